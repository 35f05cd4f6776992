"""Ask a UPnP gateway to forward our TCP port: best effort, bounded in time, said in one line.

A home router that speaks UPnP IGD makes a NATed node directly reachable without anyone
touching the router. We ask once when the dial-back check says "private": discover gateways
for at most `timeout` seconds, map external port = listen port (so peers that see us at the
router's address reach us at the port we already advertise, and the next dial-back check
finds it), and say what happened. No gateway is the common case and only logged.
miniupnpc is blocking C code: it runs in a thread that is abandoned if it overstays.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

log = logging.getLogger(__name__)

LEASE_S = 3600


@dataclass(frozen=True, slots=True, kw_only=True)
class UpnpResult:
    mapped: bool
    text: str
    external: str | None = None  # "ip:port" on the gateway


async def map_port(lan_ip: str, port: int, *, timeout: float = 5.0) -> UpnpResult:
    """Map TCP `port` on the gateway to `lan_ip:port`."""
    result = UpnpResult(mapped=False, text=f"UPnP: no answer from a gateway within {timeout:.0f} s")
    with trio.move_on_after(timeout):
        result = await trio.to_thread.run_sync(
            _map_blocking, lan_ip, port, timeout, abandon_on_cancel=True
        )
    log.info("%s", result.text)
    return result


def _map_blocking(lan_ip: str, port: int, timeout: float) -> UpnpResult:
    try:
        import miniupnpc
    except ImportError:
        return UpnpResult(mapped=False, text="UPnP: miniupnpc is not installed; no port mapping")
    client = miniupnpc.UPnP()
    client.discoverdelay = int(min(timeout, 2.0) * 1000)
    try:
        if client.discover() == 0:
            return UpnpResult(mapped=False, text="UPnP: no gateway on this network")
        client.selectigd()
        external_ip = client.externalipaddress()
        client.addportmapping(port, "TCP", lan_ip, port, "peertrain", "", LEASE_S)
    except Exception as exc:  # noqa: BLE001 - miniupnpc raises plain Exception with the
        # gateway's words, which the result's text carries to `peertrain status`
        return UpnpResult(
            mapped=False, text=f"UPnP: the gateway refused a mapping of TCP {port}: {exc}"
        )
    return UpnpResult(
        mapped=True,
        external=f"{external_ip}:{port}",
        text=f"UPnP: gateway forwards {external_ip}:{port} to {lan_ip}:{port}",
    )

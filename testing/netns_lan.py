"""A LAN of network namespaces for fault tests: N members on one bridge, each with its own link.

Each member namespace `<prefix>m<i>` holds one veth (`eth0`, 10.214.0.<10+i>/24) whose other end
sits on the bridge of `<prefix>lan`. A member's link is its own: a netem qdisc on its `eth0`
shapes what it sends (loss, delay) and nobody else's traffic. On a kernel without netem, the
members named `relayed` get a link of two TAP devices and a relay thread that shapes it in user
space instead (tap_relay.py): the same loss and delay. A partition is an nftables
table in each cut member that drops, silently (no RST, no ICMP), every packet to or from the
members on the other side, while the members on one side still reach each other.

Nothing here touches the host's interfaces or routes; `teardown` deletes every namespace this
LAN made, which also ends whatever a crashed caller left running inside them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable

from . import netns
from .tap_relay import TapRelay

NET = "10.214.0"
PORT = 4001
PARTITION_TABLE = "pt_partition"
LOSS_TABLE = "pt_loss"


def why_unavailable() -> str | None:
    """None when namespaces, nft and tc can be used here, else the reason to skip."""
    reason = netns.why_unavailable()  # root, ip, nft, and a namespace we may create
    if reason:
        return reason.replace("NAT tests", "namespace tests")
    if shutil.which("tc") is None:
        return "namespace tests need 'tc' (apt-get install iproute2)"
    return None


def has_netem() -> bool:
    """Whether this kernel's `tc` can add a netem qdisc (tried on a throwaway namespace)."""
    ns = f"ptnetem{os.getpid() % 100000}"
    _run(["ip", "netns", "add", ns], check=False)
    try:
        argv = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem"]
        return subprocess.run([*argv, "delay", "1ms"], capture_output=True).returncode == 0
    finally:
        _run(["ip", "netns", "del", ns], check=False)


def _run(argv: list[str], *, input: str | None = None, check: bool = True) -> None:
    done = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")


class Lan:
    """`size` member namespaces on one bridge. Use as a context manager: torn down on exit."""

    def __init__(self, size: int, prefix: str | None = None, relayed: Iterable[int] = ()):
        self.size = size
        self.prefix = prefix or f"ptl{os.getpid() % 100000}-"
        self.bridge = f"{self.prefix}lan"
        self.relayed = frozenset(relayed)
        self.relays: dict[int, TapRelay] = {}

    def name(self, index: int) -> str:
        return f"{self.prefix}m{index}"

    def ip(self, index: int) -> str:
        return f"{NET}.{10 + index}"

    def listen(self, index: int) -> str:
        return f"/ip4/{self.ip(index)}/tcp/{PORT}"

    def exec_argv(self, index: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name(index), *argv]

    def __enter__(self) -> Lan:
        self.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def setup(self) -> None:
        self.teardown()  # a crashed earlier run of this prefix must not leave half a LAN
        _run(["ip", "netns", "add", self.bridge])
        _run(self._in(self.bridge, ["ip", "link", "add", "br0", "type", "bridge"]))
        _run(self._in(self.bridge, ["ip", "link", "set", "br0", "up"]))
        for index in range(self.size):
            self._add_member(index)

    def _add_member(self, index: int) -> None:
        ns, port = self.name(index), f"p{index}"
        _run(["ip", "netns", "add", ns])
        _run(self._in(ns, ["ip", "link", "set", "lo", "up"]))
        if index in self.relayed:
            self.relays[index] = TapRelay(ns, self.bridge, port, seed=index)
        else:
            _run(
                ["ip", "link", "add", "name", port, "netns", self.bridge, "type", "veth"]
                + ["peer", "name", "eth0", "netns", ns]
            )
        _run(self._in(self.bridge, ["ip", "link", "set", port, "master", "br0", "up"]))
        _run(self._in(ns, ["ip", "addr", "add", f"{self.ip(index)}/24", "dev", "eth0"]))
        _run(self._in(ns, ["ip", "link", "set", "eth0", "up"]))

    def teardown(self) -> None:
        for relay in self.relays.values():
            relay.close()
        self.relays.clear()
        for ns in [self.name(i) for i in range(self.size)] + [self.bridge]:
            _run(["ip", "netns", "del", ns], check=False)

    @staticmethod
    def _in(ns: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", ns, *argv]

    # --- faults ---------------------------------------------------------------------------
    def partition(self, cut: Iterable[int]) -> None:
        """Cut members `cut` off from every other member (they still reach each other)."""
        cut = sorted(set(cut))
        others = ", ".join(self.ip(i) for i in range(self.size) if i not in cut)
        rules = f"""table inet {PARTITION_TABLE} {{
    chain input {{ type filter hook input priority -10; policy accept;
        ip saddr {{ {others} }} drop; }}
    chain output {{ type filter hook output priority -10; policy accept;
        ip daddr {{ {others} }} drop; }}
}}
"""
        for index in cut:
            _run(self.exec_argv(index, ["nft", "-f", "-"]), input=rules)

    def heal(self) -> None:
        """Undo every partition (a member that was not cut has no table: nothing to delete)."""
        for index in range(self.size):
            _run(
                self.exec_argv(index, ["nft", "delete", "table", "inet", PARTITION_TABLE]),
                check=False,
            )

    def shape(self, index: int, *, loss_pct: float, delay_ms: int, jitter_ms: int) -> str | None:
        """netem on member `index`'s link: what it sends is lost and delayed (`tc qdisc`, or
        the relay of a `relayed` member). A kernel without netem (sch_netem) on a link without a
        relay gets the loss alone, by nftables (`numgen random`): returns why the delay is
        missing then, else None."""
        if index in self.relays:
            self.relays[index].shape(loss_pct=loss_pct, delay_ms=delay_ms, jitter_ms=jitter_ms)
            return None
        argv = ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem"]
        argv += ["loss", f"{loss_pct}%", "delay", f"{delay_ms}ms", f"{jitter_ms}ms"]
        done = subprocess.run(self.exec_argv(index, argv), capture_output=True, text=True)
        if done.returncode == 0:
            return None
        per_mille = round(loss_pct * 10)
        rules = f"""table inet {LOSS_TABLE} {{
    chain output {{ type filter hook output priority -5; policy accept;
        oifname "eth0" numgen random mod 1000 < {per_mille} drop; }}
}}
"""
        _run(self.exec_argv(index, ["nft", "-f", "-"]), input=rules)
        return f"no netem here ({done.stderr.strip()}): {loss_pct}% loss by nftables, no delay"

    def unshape(self, index: int) -> None:
        if index in self.relays:
            self.relays[index].unshape()
            return
        _run(self.exec_argv(index, ["tc", "qdisc", "del", "dev", "eth0", "root"]), check=False)
        _run(self.exec_argv(index, ["nft", "delete", "table", "inet", LOSS_TABLE]), check=False)

"""NAT matrix: time to first connection, direct or relayed, and 16 MiB payload throughput.

Runs in the network namespaces of scripts/netns-nat (root only; built and removed here unless
they already exist). Per cell, a sink in the destination namespace (with a circuit relay v2
reservation on the public relay when it sits behind a NAT) and a fresh sender process in the
source namespace; the sender connects directly when the destination is reachable (public,
forwarded port), else through the relay, and then tries DCUtR hole punching for --punch
seconds; the payload goes over whichever connection it ends on ("punched" = relayed first,
then direct). Figures are medians over the fresh senders that delivered (of --repeats).
A second table starts real CLI daemons one after another (public, public, cone, symmetric,
forwarded; each bootstraps from the public ones) and times, from each one's process start,
its first connection to the public node and its reachability verdict.

    sudo .venv/bin/python benchmarks/nat.py [--repeats 3] [--mib 16] [--punch 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

try:
    from benchmarks._report import print_json, print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table

ROOT = Path(__file__).resolve().parents[1]
PORT = 4700
# (source namespace, destination namespace, matrix cell)
CELLS = [
    ("cone", "pub2", "cone → public"),
    ("cone2", "fwd", "cone → forwarded"),
    ("cone2", "cone", "cone → cone"),
    ("sym", "cone", "symmetric → cone"),
    ("cone", "sym", "cone → symmetric"),
    ("sym2", "sym", "symmetric → symmetric"),
]


def load_netns():
    spec = importlib.util.spec_from_file_location("nat_netns", ROOT / "tests" / "nat" / "netns.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start_sinks(
    world, stack: ExitStack, relay_addr: str
) -> tuple[dict[str, str], dict[str, float]]:
    """Destination address per namespace (circuit for NATed ones) and reservation times."""
    targets, reserve_ms = {}, {}
    for name in sorted({dst for _, dst, _ in CELLS}):
        port = world.FORWARDED_PORT if name == "fwd" else PORT
        args = ["sink", "--listen", f"/ip4/{world.ip_of(name)}/tcp/{port}"]
        nated = name in world.NATED and name != "fwd"
        role = world.Role(name, args + (["--relay", relay_addr] if nated else []))
        stack.callback(role.stop)
        addr = role.line("addr")["addr"]
        if nated:
            reserved = role.line("circuit")
            targets[name], reserve_ms[name] = reserved["circuit"], reserved["reserve_ms"]
        elif name == "fwd":
            peer = addr.rsplit("/p2p/", 1)[1]
            targets[name] = f"/ip4/{world.WAN['fwd']}/tcp/{port}/p2p/{peer}"
        else:
            targets[name] = addr
    return targets, reserve_ms


def measure(world, repeats: int, nbytes: int, punch: float) -> tuple[list[list], dict]:
    rows, figures = [], {}
    ports = itertools.count(PORT + 10)  # a fresh listen port per sender: no stale NAT state
    with ExitStack() as stack:
        relay = world.Role("pub", ["relay", "--listen", f"/ip4/10.213.0.10/tcp/{PORT}"])
        stack.callback(relay.stop)
        targets, reserve_ms = start_sinks(world, stack, relay.line("addr")["addr"])
        for src, dst, cell in CELLS:
            via_relay = "p2p-circuit" in targets[dst]
            runs, failures = [], []
            for _ in range(repeats):
                try:
                    runs.append(
                        world.send(
                            src,
                            targets[dst],
                            nbytes,
                            punch=punch if via_relay else 0.0,
                            port=next(ports),
                        )
                    )
                except RuntimeError as exc:  # counted, and the reason kept for the JSON line
                    failures.append(str(exc).splitlines()[-1][:200])
            rows.append(row(cell, via_relay, runs, reserve_ms.get(dst), repeats))
            figures[cell] = dict(zip(FIELDS, rows[-1][1:], strict=True)) | {"failures": failures}
    return rows, figures


FIELDS = ["ends_on", "delivered", "connect_ms", "reserve_ms", "punch_s", "mb_per_s"]


def row(cell: str, via_relay: bool, runs: list[dict], reserve: float | None, repeats: int) -> list:
    delivered = f"{len(runs)}/{repeats}"
    if not runs:
        return [cell, "failed", delivered, None, reserve, None, None]
    relayed = {r["relayed"] for r in runs}
    how = "relayed" if relayed == {True} else "direct" if relayed == {False} else "mixed"
    if via_relay and how == "direct":
        how = "punched"  # relayed first, then a direct connection by DCUtR
    punch_s = [r["punch_s"] for r in runs if r.get("punch_s") is not None]
    return [
        cell,
        how,
        delivered,
        round(statistics.median(r["connect_s"] for r in runs) * 1000, 1),
        reserve,
        round(statistics.median(punch_s), 2) if punch_s else None,
        statistics.median(r["mb_per_s"] for r in runs),
    ]


def measure_daemons(world, base: Path) -> tuple[list[list], dict]:
    """CLI daemons: seconds from start to connected to the public node, and to a verdict."""
    names = ["pub", "pub2", "cone", "sym", "fwd"]
    daemons, rows, figures = [], [], {}
    try:
        shares: list[str] = []
        for name in names:
            args = world.daemon_args(name, bootstrap=shares[:2])
            daemon = world.NamespacedDaemon(name, base / name, args)
            started = time.monotonic()
            daemons.append(daemon.start())
            status = daemon.wait_ready(timeout=30)
            daemon.started, daemon.ready_at = started, time.monotonic()
            shares.append(status["share"])
        public_id = shares[0].rsplit("/p2p/", 1)[1]
        connected = poll_all(daemons, lambda d: d.name == "pub" or public_id in d.status()["peers"])
        connected["pub"] = None  # the public node itself: nothing to connect to
        decided = poll_all(daemons, lambda d: d.status()["reachability"]["status"] != "unknown")
        for daemon in daemons:
            verdict = daemon.status()["reachability"]["status"]
            times = [
                since(daemon, t)
                for t in (daemon.ready_at, connected[daemon.name], decided[daemon.name])
            ]
            rows.append([daemon.name, verdict, *times])
            figures[daemon.name] = dict(zip(DAEMON_FIELDS, rows[-1][1:], strict=True))
    finally:
        for daemon in daemons:
            daemon.send_signal()
        for daemon in daemons:
            daemon.stop()
    return rows, figures


DAEMON_FIELDS = ["verdict", "ready_s", "connected_s", "verdict_s"]


def poll_all(daemons, predicate, timeout: float = 60.0) -> dict[str, float | None]:
    """When `predicate` first held for each daemon (all polled together), by name."""
    first: dict[str, float | None] = {d.name: None for d in daemons}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and None in first.values():
        for daemon in daemons:
            if first[daemon.name] is None and predicate(daemon):
                first[daemon.name] = time.monotonic()
        time.sleep(0.05)
    return first


def since(daemon, at: float | None) -> float | None:
    return None if at is None else round(at - daemon.started, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--punch", type=float, default=5.0, help="seconds of DCUtR per sender")
    args = parser.parse_args()
    world = load_netns()
    reason = world.why_unavailable()
    if reason:
        print(f"skipped: {reason}")
        print_json({"skipped": reason})
        return
    existed = world.exists()
    world.setup()
    try:
        rows, figures = measure(world, args.repeats, args.mib << 20, args.punch)
        with tempfile.TemporaryDirectory() as home:
            daemon_rows, daemon_figures = measure_daemons(world, Path(home))
    finally:
        if not existed:
            world.teardown()
    header = [
        "cell (sender → receiver)",
        "ends on",
        "delivered",
        "first conn ms",
        "reservation ms",
        "punch s",
        "MB/s",
    ]
    print_table(
        f"NAT matrix, {args.mib} MiB payload, medians over {args.repeats} senders per cell",
        header,
        [["-" if v is None else v for v in r] for r in rows],
    )
    print_table(
        "CLI daemons (node start): seconds from process start until ready / connected to the "
        "public node / reachability verdict",
        ["node", "verdict", "ready s", "connected s", "verdict s"],
        [["-" if v is None else v for v in r] for r in daemon_rows],
    )
    print_json(
        {
            "payload_mib": args.mib,
            "repeats": args.repeats,
            "cells": figures,
            "daemons": daemon_figures,
        }
    )


if __name__ == "__main__":
    main()

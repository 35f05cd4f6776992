"""NAT matrix: time to first connection, direct or relayed, and 16 MiB payload throughput.

Runs in the network namespaces of scripts/netns-nat (root only; built and removed here unless
they already exist). Per cell, a sink in the destination namespace (with a circuit relay v2
reservation on the public relay when it sits behind a NAT) and a fresh sender process in the
source namespace; the sender connects directly when the destination is reachable (public,
forwarded port), else through the relay. No hole punching yet: cone/cone stays relayed
(issue 6 wants it direct). Figures are medians over --repeats fresh senders.

    sudo .venv/bin/python benchmarks/nat.py [--repeats 3] [--mib 16]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
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


def measure(world, repeats: int, nbytes: int) -> tuple[list[list], dict]:
    rows, figures = [], {}
    with ExitStack() as stack:
        relay = world.Role("pub", ["relay", "--listen", f"/ip4/10.213.0.10/tcp/{PORT}"])
        stack.callback(relay.stop)
        targets, reserve_ms = start_sinks(world, stack, relay.line("addr")["addr"])
        for src, dst, cell in CELLS:
            runs = [world.send(src, targets[dst], nbytes) for _ in range(repeats)]
            connect_ms = statistics.median(r["connect_s"] for r in runs) * 1000
            mb_s = statistics.median(r["mb_per_s"] for r in runs)
            relayed = {r["relayed"] for r in runs}
            how = "relayed" if relayed == {True} else "direct" if relayed == {False} else "mixed"
            rows.append([cell, how, round(connect_ms, 1), reserve_ms.get(dst, "-"), mb_s])
            figures[cell] = {
                "connection": how,
                "connect_ms": round(connect_ms, 1),
                "reserve_ms": reserve_ms.get(dst),
                "mb_per_s": mb_s,
            }
    return rows, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mib", type=int, default=16)
    args = parser.parse_args()
    world = load_netns()
    reason = world.why_unavailable()
    if reason:
        print(f"skipped: {reason}")
        print_json({"skipped": reason})
        return
    existed = subprocess.run([str(world.SCRIPT), "status"], capture_output=True).returncode == 0
    world.setup()
    try:
        rows, figures = measure(world, args.repeats, args.mib << 20)
    finally:
        if not existed:
            world.teardown()
    header = ["cell (sender → receiver)", "connection", "first conn ms", "reservation ms", "MB/s"]
    print_table(
        f"NAT matrix, {args.mib} MiB payload, median of {args.repeats} (pid {os.getpid()})",
        header,
        rows,
    )
    print_json({"payload_mib": args.mib, "repeats": args.repeats, "cells": figures})


if __name__ == "__main__":
    main()

"""Connection setup time: our host vs a default py-libp2p 0.8.1 host, in the same run.

Each sample is a fresh dialer connecting to a listener on loopback (TCP, security and muxer
negotiation, until `host.connect` returns). Target (issue 2): ours p50 ≤ 10 ms. The default
host's dial loop waits ≈250 ms for more connections (LIBP2P-NOTES.md).

    python benchmarks/connect.py [--samples 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.node.net.host import build_host
from peertrain.node.net.identity import Identity

try:
    from benchmarks._report import print_json, print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table

LOOPBACK = [Multiaddr("/ip4/127.0.0.1/tcp/0")]


def ours():
    return build_host(Identity.generate())


def default():
    return new_host(key_pair=create_new_key_pair())


async def measure(make_host, samples: int) -> list[float]:
    listener = make_host()
    times = []
    async with listener.run(LOOPBACK):
        target = PeerInfo(listener.get_id(), listener.get_addrs())
        for _ in range(samples):
            dialer = make_host()
            async with dialer.run(LOOPBACK):
                start = time.perf_counter()
                await dialer.connect(target)
                times.append((time.perf_counter() - start) * 1000)
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(samples: int) -> None:
    results = {
        "peertrain": await measure(ours, samples),
        "py-libp2p default": await measure(default, samples),
    }
    rows = [
        (name, samples, statistics.median(t), pct(t, 0.9), max(t)) for name, t in results.items()
    ]
    print_table("connection setup on loopback (ms)", ["host", "n", "p50", "p90", "max"], rows)
    ours_p50 = statistics.median(results["peertrain"])
    default_p50 = statistics.median(results["py-libp2p default"])
    print(
        f"ours is {default_p50 / ours_p50:.0f}x faster; target p50 <= 10 ms: "
        f"{'met' if ours_p50 <= 10 else 'NOT met'}"
    )
    print_json(
        {
            "benchmark": "connect",
            "samples": samples,
            "ours_p50_ms": round(ours_p50, 2),
            "ours_p90_ms": round(pct(results["peertrain"], 0.9), 2),
            "default_p50_ms": round(default_p50, 2),
            "speedup": round(default_p50 / ours_p50, 1),
        }
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=20)
    trio.run(main, parser.parse_args().samples)

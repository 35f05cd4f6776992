"""The sharded update exchange beside the all-gather, N = 4 … 64 members on home links.

    .venv/bin/python benchmarks/exchange_scale.py [--sizes 4 8 16 32 64] [--mbytes 13]
                                                  [--rule flag] [--quick]

Both exchanges run over the same in-memory network (testing/shard_network.py): every member's
uplink passes 50 Mbit/s and its downlink 200 Mbit/s, first come first served, after 30 ms one
way. The sharded round is the real code (swarm/exchange/sharded/: commitments, owners, partial
statistics, output shards, projections, checks), with each member's update its own int8
payload of `--mbytes` MB. The all-gather is today's pattern: every member announces its whole
payload and pulls every other member's, four pulls at a time (the update gossip's MAX_PULLS).

Time runs on trio's MockClock with autojump, so "wall" is network time: the torch work of the
round (statistics, outputs, checks) is measured separately as CPU seconds per member. Per N:
bytes received and sent per member per round (as multiples of U, the update's payload), the
median and p99 member's round time, and the ratio of the all-gather's to the sharded round's.
The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import trio
import trio.testing
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_json, print_table  # noqa: E402
from peertrain.swarm.aggregation import build_aggregator  # noqa: E402
from peertrain.swarm.exchange.codec import ProtocolCodec  # noqa: E402
from peertrain.swarm.exchange.sharded import ShardedRound, run_round  # noqa: E402
from peertrain.testing.shard_network import Link, shard_network  # noqa: E402

MBIT = 1e6 / 8
HOME = Link(up=50 * MBIT, down=200 * MBIT, latency=0.030)
MAX_PULLS = 4  # the update gossip's downloads in flight per round
ANNOUNCEMENT = 200  # bytes of a signed announcement


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def inline(fn, *args):
    """Torch work on the event loop: the mock clock stands still while it runs."""
    return fn(*args)


def members(n: int) -> dict:
    pairs = [create_new_key_pair(i.to_bytes(4, "big") * 8) for i in range(n)]
    return {ID.from_pubkey(k.public_key).to_base58(): k for k in pairs}


async def sharded(n: int, numel: int, rule: str) -> dict:
    peers = members(n)
    base = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    done, generating = {}, []
    async with shard_network(HOME) as net:
        rounds = {}
        for peer, key in peers.items():
            endpoint = net.endpoint(peer)
            rounds[peer] = ShardedRound(
                run_id="bench", round_=1, me=peer, key_pair=key, group=list(peers),
                transport=endpoint, rule=build_aggregator(rule), numel=numel,
                patience=30.0, timeout=3600.0, compute=inline,
            )  # fmt: skip
            endpoint.deliver = lambda origin, raw, board=rounds[peer].board: board.receive(raw)

        async def one(i: int, peer: str) -> None:
            started = time.process_time()  # synchronous: this member's inputs alone
            noise = torch.randn(numel, generator=torch.Generator().manual_seed(i + 1))
            update = rounds[peer].codec.encode(base + 0.5 * noise)  # as the member sends it
            del noise
            generating.append(time.process_time() - started)
            await run_round(rounds[peer], update)
            done[peer] = trio.current_time()

        cpu = time.process_time()
        async with trio.open_nursery() as nursery:
            for i, peer in enumerate(peers):
                nursery.start_soon(one, i, peer)
        cpu = time.process_time() - cpu - sum(generating)
        traffic = {p: (net.endpoints[p].received, net.endpoints[p].sent) for p in peers}
    # every member's torch work runs inline on one thread: the total, shared out
    return {"done": done, "traffic": traffic, "cpu_s": cpu / n}


async def all_gather(n: int, payload_bytes: int) -> dict:
    peers = list(members(n))
    payload = bytes(payload_bytes)  # one object: only its length crosses the simulated links
    done = {}
    async with shard_network(HOME) as net:
        for peer in peers:
            key = await net.endpoint(peer).serve(payload)

        async def one(peer: str) -> None:
            me = net.endpoints[peer]
            await me.broadcast(bytes(ANNOUNCEMENT))
            limiter = trio.CapacityLimiter(MAX_PULLS)

            async def pull(other: str) -> None:
                async with limiter:
                    await me.fetch(other, key, len(payload))

            async with trio.open_nursery() as pulls:
                for other in peers:
                    if other != peer:
                        pulls.start_soon(pull, other)
            done[peer] = trio.current_time()

        async with trio.open_nursery() as nursery:
            for peer in peers:
                nursery.start_soon(one, peer)
        traffic = {p: (net.endpoints[p].received, net.endpoints[p].sent) for p in peers}
    return {"done": done, "traffic": traffic}


def figures(result: dict, u: int) -> dict:
    times = list(result["done"].values())
    received = [r for r, _ in result["traffic"].values()]
    sent = [s for _, s in result["traffic"].values()]
    return {
        "recv_u": statistics.mean(received) / u,
        "sent_u": statistics.mean(sent) / u,
        "max_u": max(max(received), max(sent)) / u,
        "wall_p50_s": statistics.median(times),
        "wall_p99_s": pct(times, 0.99),
    }


def measure(n: int, mbytes: float, rule: str) -> dict:
    codec = ProtocolCodec("int8")
    numel = int(mbytes * 1e6 / (1 + 4 / codec.block_size))
    u = codec.payload_bytes(numel)
    clock = trio.testing.MockClock(autojump_threshold=0)
    shard = trio.run(sharded, n, numel, rule, clock=clock)
    gather = trio.run(all_gather, n, u, clock=trio.testing.MockClock(autojump_threshold=0))
    return {
        "n": n,
        "u_bytes": u,
        "sharded": {**figures(shard, u), "cpu_s": shard["cpu_s"]},
        "all_gather": figures(gather, u),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--mbytes", type=float, default=13.0)
    parser.add_argument("--rule", default="flag")
    parser.add_argument("--quick", action="store_true", help="N = 4 and 8, a 2 MB update")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.mbytes = [4, 8], 2.0
    load = os.getloadavg()[0]
    results = [measure(n, args.mbytes, args.rule) for n in args.sizes]
    rows = []
    for r in results:
        s, g = r["sharded"], r["all_gather"]
        rows.append([
            r["n"], s["recv_u"], s["sent_u"], s["max_u"], g["recv_u"], g["sent_u"],
            s["wall_p50_s"], s["wall_p99_s"], g["wall_p50_s"], g["wall_p99_s"],
            g["wall_p99_s"] / s["wall_p99_s"], s["cpu_s"],
        ])  # fmt: skip
    print_table(
        f"sharded ({args.rule}) vs all-gather: {args.mbytes:g} MB int8 update (U), links "
        f"50/200 Mbit/s, 30 ms; time is network time (mock clock); load {load:.2f}",
        ["N", "shard recv/U", "shard sent/U", "shard max/U", "gather recv/U", "gather sent/U",
         "shard p50 s", "shard p99 s", "gather p50 s", "gather p99 s", "gather/shard",
         "shard cpu s/member"],
        rows,
    )  # fmt: skip
    print_json({"rule": args.rule, "mbytes": args.mbytes, "load": load, "results": results})


if __name__ == "__main__":
    main()

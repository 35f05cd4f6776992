"""DHT benchmark: bootstrap time, store and get latency for 16 to 128 nodes in one process.

    .venv/bin/python benchmarks/dht.py [--sizes 16 32 64 128] [--ops 100] [--seed 0]

Every node is a real libp2p host (node.host.build_host: TCP + Noise + Yamux) on loopback, all
in one trio process: every byte of every node's crypto and framing runs on one core, so these
figures are pessimistic against separate machines (hivemind's run each peer in its own process).
CPU seconds are printed next to wall seconds: on a shared machine their ratio shows how much
of the wall time was spent waiting for a core.

Per size:
  bootstrap   all nodes but the first join at once, each through one random earlier node,
              until every node finished its bootstrap (connect + self-lookup)
  usable      bootstrap, then one record put by node 0 and found by every node (16 at a time);
              its CPU seconds beside it (one core runs every node: the wall time a quiet
              machine would show)
  join one    a node joining the finished swarm: bootstrap + its first successful get
  store, get  `--ops` sequential puts from random nodes (fresh keys), then gets of those keys
              from random other nodes (no caches: each get walks the DHT); p50 / p99.
              "cold": the first pass, which opens most of the connections it uses (in one
              process, a new connection costs ≈17 ms of CPU, two thirds of it identify);
              "warm": the same puts and gets again over the connections now open, i.e. the
              protocol's own cost, as in a network whose nodes stay connected.
  rpc         one request/response on an open DHT stream (the floor a lookup is built from)
  failures    what py-libp2p logged while the size ran: upgrades that failed ("fail to upgrade
              mux", a handshake whose other side gave up) and identify exchanges that failed

For comparison, the figures a user measured with hivemind (its own processes, Go daemon):
64 peers, store 62 ms, get 11.6 ms, 40.7 s to create the swarm (printed, not run here).

The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import logging
import random
import resource
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_json, print_table  # noqa: E402
from peertrain.dht import DhtConfig, stage_key  # noqa: E402
from peertrain.dht.messages import Ping, Pong  # noqa: E402
from peertrain.node.net.loaded_code import freeze_what_is_loaded  # noqa: E402
from peertrain.testing.dht_swarm import DhtSwarm, dht_host, open_dht_swarm  # noqa: E402

CONFIG = DhtConfig(publish_peer_record=False)
TARGETS = {
    "bootstrap_32_s": 3.0,
    "usable_64_s": 3.0,
    "store_p50_64_ms": 20.0,
    "get_p50_64_ms": 10.0,
    "failed_upgrades_64": 0,
    "identify_failures_64": 0,
}
# Measured by the user with hivemind 1.1.12, 64 peers (issue 20); printed beside ours, not run.
HIVEMIND_64 = {"store_p50_ms": 62.0, "get_p50_ms": 11.6, "create_s": 40.7}


class Libp2pFailures(logging.Handler):
    """Counts py-libp2p's failure lines: failed upgrades and failed identify exchanges."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.upgrades = self.identify = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "fail to upgrade" in text or "failed to upgrade" in text:
            self.upgrades += 1
        elif "/ipfs/id/" in text or "identify" in text.lower():
            self.identify += 1


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Clock:
    """Wall and CPU seconds of one phase."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


async def everyone_gets(
    swarm: DhtSwarm, key: str, *, timeout: float = 120.0, parallel: int = 16
) -> int | None:
    """Every node gets `key` until it finds it; returns how many gets came back empty first,
    None if not every node found it within `timeout` (the size is then reported unusable).

    At most `parallel` at a time: 64 first gets at once are 64 nodes dialling the same few
    replicas in one process, a connection storm no real network sees from one key.
    """
    misses = 0
    limiter = trio.CapacityLimiter(parallel)

    async def one(node):
        nonlocal misses
        async with limiter:
            while not await node.get(key):
                misses += 1
                await trio.sleep(0.05)

    with trio.move_on_after(timeout) as scope:
        async with trio.open_nursery() as nursery:
            for node in swarm.nodes:
                nursery.start_soon(one, node)
    return None if scope.cancelled_caught else misses


async def store_then_get(
    swarm: DhtSwarm, plan, rng: random.Random
) -> tuple[list[float], list[float]]:
    """Each (key, writer, reader): writer puts, then (after all puts) reader gets; ms each."""
    stores, gets = [], []
    for key, writer, _reader in plan:
        start = time.perf_counter()
        await swarm.nodes[writer].put(key, {"writer": writer, "tput": rng.random()}, ttl=300)
        stores.append((time.perf_counter() - start) * 1e3)
    for key, _writer, reader in plan:
        start = time.perf_counter()
        found = await swarm.nodes[reader].get(key)
        gets.append((time.perf_counter() - start) * 1e3)
        assert len(found) == 1, (key, found)
    return stores, gets


async def rpc_round_trip(swarm: DhtSwarm, rng: random.Random, count: int = 100) -> list[float]:
    i, j = rng.sample(range(len(swarm.nodes)), 2)
    a, b = swarm.nodes[i], swarm.nodes[j]
    await a.host.connect(swarm.info(j))
    times = []
    for _ in range(count):
        start = time.perf_counter()
        await a.links.request(b.own, Ping(server=True), Pong, timeout=5)
        times.append((time.perf_counter() - start) * 1e3)
    return times


async def measure(n: int, ops: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    failures = Libp2pFailures()
    logging.getLogger("libp2p").addHandler(failures)
    try:
        figures = await _measure(n, ops, rng, seed)
    finally:
        logging.getLogger("libp2p").removeHandler(failures)
    return figures | {
        "failed_upgrades": failures.upgrades,
        "identify_failures": failures.identify,
    }


async def _measure(n: int, ops: int, rng: random.Random, seed: int) -> dict[str, float]:
    async with open_dht_swarm(n + 1, dht_host, config=CONFIG, seed=seed) as swarm:
        freeze_what_is_loaded()  # as each daemon does once it serves (node/net/loaded_code.py)
        late = swarm.nodes.pop()  # listens now, joins at the end
        late_scope = swarm.scopes.pop()
        swarm.alive.pop()
        with Clock() as boot:
            await swarm.join_all()
        with Clock() as usable:
            await swarm.nodes[0].put(stage_key("bench", 0), {"hello": n}, ttl=300)
            misses = await everyone_gets(swarm, stage_key("bench", 0))
        plan = [(stage_key("bench", i), rng.randrange(n)) for i in range(1, ops + 1)]
        plan = [
            (key, writer, rng.choice([i for i in range(n) if i != writer])) for key, writer in plan
        ]
        with Clock() as cold:
            cold_stores, cold_gets = await store_then_get(swarm, plan, rng)
        with Clock() as warm:
            warm_stores, warm_gets = await store_then_get(swarm, plan, rng)
        rpc = await rpc_round_trip(swarm, rng)
        with Clock() as join_one:
            await late.bootstrap([swarm.info(rng.randrange(n))])
            assert await late.get(plan[0][0])
        del late_scope
    return {
        "nodes": n,
        "bootstrap_s": boot.wall,
        "bootstrap_cpu_s": boot.cpu,
        "usable_s": None if misses is None else boot.wall + usable.wall,
        "usable_cpu_s": None if misses is None else boot.cpu + usable.cpu,
        "usable_misses": misses,
        "join_one_s": join_one.wall,
        "store_p50_ms": statistics.median(warm_stores),
        "store_p99_ms": pct(warm_stores, 0.99),
        "get_p50_ms": statistics.median(warm_gets),
        "get_p99_ms": pct(warm_gets, 0.99),
        "cold_store_p50_ms": statistics.median(cold_stores),
        "cold_store_p99_ms": pct(cold_stores, 0.99),
        "cold_get_p50_ms": statistics.median(cold_gets),
        "cold_get_p99_ms": pct(cold_gets, 0.99),
        "cold_cpu_per_op_ms": cold.cpu * 1e3 / (2 * ops),
        "warm_cpu_per_op_ms": warm.cpu * 1e3 / (2 * ops),
        "rpc_p50_ms": statistics.median(rpc),
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def summary(results: list[dict[str, float]]) -> dict[str, object]:
    """The headline figures (32 and 64 nodes) beside hivemind's, which the user measured."""
    by_size = {row["nodes"]: row for row in results}
    figures: dict[str, object] = {"results": results, "targets": TARGETS}
    if 32 in by_size:
        figures["bootstrap_32_s"] = by_size[32]["bootstrap_s"]
    print(
        f"hivemind, 64 peers (the user's figures, not run here): store p50 "
        f"{HIVEMIND_64['store_p50_ms']:g} ms, get p50 {HIVEMIND_64['get_p50_ms']:g} ms, "
        f"{HIVEMIND_64['create_s']:g} s to create"
    )
    figures["hivemind_64_user_measured"] = HIVEMIND_64
    if 64 in by_size:
        at_64 = by_size[64]
        figures["usable_64_s"] = at_64["usable_s"]
        figures["failed_upgrades_64"] = at_64["failed_upgrades"]
        figures["identify_failures_64"] = at_64["identify_failures"]
        figures["store_p50_64_ms"] = at_64["store_p50_ms"]
        figures["get_p50_64_ms"] = at_64["get_p50_ms"]
        figures["get_p50_in_rpcs_64"] = at_64["get_p50_ms"] / at_64["rpc_p50_ms"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # py-libp2p logs every reset stream at ERROR

    results = [trio.run(measure, n, args.ops, args.seed + n) for n in args.sizes]
    columns = [
        ("nodes", "nodes"),
        ("bootstrap s", "bootstrap_s"),
        ("(cpu s)", "bootstrap_cpu_s"),
        ("usable s", "usable_s"),
        ("(cpu s)", "usable_cpu_s"),
        ("join one s", "join_one_s"),
        ("store p50 ms", "store_p50_ms"),
        ("p99", "store_p99_ms"),
        ("get p50 ms", "get_p50_ms"),
        ("p99", "get_p99_ms"),
        ("cold store p50", "cold_store_p50_ms"),
        ("p99", "cold_store_p99_ms"),
        ("cold get p50", "cold_get_p50_ms"),
        ("p99", "cold_get_p99_ms"),
        ("rpc p50 ms", "rpc_p50_ms"),
        ("cpu/op warm", "warm_cpu_per_op_ms"),
        ("cold", "cold_cpu_per_op_ms"),
        ("failed upgrades", "failed_upgrades"),
        ("identify fails", "identify_failures"),
    ]
    print_table(
        f"DHT, all nodes in one process ({args.ops} stores then {args.ops} gets per size, "
        "cold pass then warm pass; store/get columns are warm)",
        [title for title, _ in columns],
        [[row[key] for _, key in columns] for row in results],
    )
    figures = summary(results)
    met = {
        name: figures[name] is not None and figures[name] <= limit
        for name, limit in TARGETS.items()
        if name in figures
    }
    print(
        "targets: "
        + ", ".join(
            f"{k} {figures[k] if figures[k] is None else format(figures[k], '.3g')} "
            f"≤ {TARGETS[k]:g}: {'met' if ok else 'NOT met'}"
            for k, ok in met.items()
        )
    )
    figures["targets_met"] = met
    print_json(figures)


if __name__ == "__main__":
    main()

"""Internet scale by simulation: our real DHT, run-state replication and update announcements at
1k, 4k and 10k nodes on a simulated Internet, each figure beside its theoretical growth.

    .venv/bin/python benchmarks/scale_sim.py [--sizes 1000 4000 10000] [--quick] [--png PATH]

Nothing of ours is reimplemented: `dht.Dht` runs unchanged on `SimHost`s (the libp2p host
interface it is written against), `crdt.Replicator` and `swarm.diloco.UpdateGossip` on gossip
endpoints (the `PubSub` / `Exchange` / `GroupTransport` seams that `MemoryRouter` fills in
tests). The network beneath them is simulated (peertrain/testing/sim_*.py): residential latency,
up/down rates, loss and churn drawn from published measurements (sources in
testing/sim_links.py), gossipsub as a mesh of degree 6, time on trio's `MockClock` with
autojump, so minutes of simulated time cost only the CPU of the code that runs in them.

Per size (testing/sim_scenarios.py):
  lookup      100 gets of peer records (64 writers) from random live nodes during a 20 s
              window of churn, after a minute of joins and 20 s of settling: hops to the replica
              that answered, latency, requests, success
  traffic     messages and bytes (with framing and TCP/IP headers) each node sends per minute,
              DHT (maintenance, churn, the window's gets) and run-state replication
  converge    one replica's change (a progress counter): time until every replica holds it
  reach       one member's update announcement: time until 50%, 99%, all members recorded it
  exchange    one DiLoCo group's update round at N = 4 … 64 members (the group sizes a run
              allows): update bytes each member receives per round, in multiples of the update
              U, for the sharded exchange (the real code: benchmarks/exchange_scale.py, a 13 MB
              int8 update on 50/200 Mbit/s links) beside the all-gather
Models: hops, lookup latency, DHT traffic, convergence and reach grow as log N (Kademlia's
lookups, gossip's depth log_D N); replication traffic per node is constant in N. Each model is
fitted at the smallest size and extrapolated. Update bytes per member: about 2 U whatever N for
the sharded exchange (an all-reduce's 2 U (N − 1)/N) plus the owners' statistics, N partial
Grams of N × N floats, which grow as N³ and are small beside a real model's U (at N = 64, 2 MB
against 2 MB: 2.6 U; against 13 MB: 2.2 U); (N − 1) U for the all-gather.

`--quick` runs 1k nodes and groups of 4 and 8 only; `--sizes` with no size runs the exchange
alone; `--combine OUT...` prints one table and plot from the outputs of runs made separately
(one size per process). The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_json, print_table  # noqa: E402
from _scale_plot import Panel, Series, draw  # noqa: E402
from exchange_scale import measure as measure_exchange  # noqa: E402
from peertrain.testing.sim_scenarios import (  # noqa: E402
    DhtFigures,
    GossipFigures,
    dht_scenario,
    gossip_scenario,
)

LOG_MODELS = ("hops_mean", "lookup_p50_s", "dht_msgs_node_min", "converge_max_s", "reach_all_s")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def simulate(n: int, seed: int) -> dict:
    clock = dict(clock=trio.testing.MockClock(autojump_threshold=0))
    wall, cpu, before = time.perf_counter(), time.process_time(), rss_mib()
    dht: DhtFigures = trio.run(lambda: dht_scenario(n, seed=seed), **clock)
    peak = rss_mib()
    gossip: GossipFigures = trio.run(lambda: gossip_scenario(n, seed=seed), **clock)
    found = [g for g in dht.gets if g.found]
    return {
        "n": n,
        "hops_mean": statistics.mean(g.hops for g in found) if found else float("nan"),
        "hops_p99": pct([g.hops for g in found], 0.99),
        "lookup_p50_s": pct([g.seconds for g in found], 0.5),
        "lookup_p99_s": pct([g.seconds for g in found], 0.99),
        "lookup_requests": statistics.mean(g.requests for g in dht.gets),
        "found": dht.found,
        "dht_msgs_node_min": dht.msgs_per_node_min,
        "dht_kB_node_min": dht.bytes_per_node_min / 1e3,
        "dht_busiest_msgs_min": dht.busiest_msgs_per_min,
        "churn_left_joined": [dht.crashed, dht.joined],
        "table_mean": dht.table_mean,
        "conns_mean": dht.conns_mean,
        "crdt_msgs_node_min": gossip.msgs_per_node_min,
        "crdt_kB_node_min": gossip.bytes_per_node_min / 1e3,
        "converged": gossip.converged,
        "converge_p50_s": gossip.converge_p50,
        "converge_max_s": gossip.converge_max,
        "reach": gossip.reach,
        "reach_50_s": gossip.reach_50,
        "reach_99_s": gossip.reach_99,
        "reach_all_s": gossip.reach_all if gossip.reach_all is not None else float("inf"),
        "dup_per_node": gossip.duplicates_per_node,
        "mem_KiB_per_node": max(0.0, peak - before) * 1024 / n,
        "peak_rss_MiB": rss_mib(),
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
    }


GROUP_SIZES = (4, 8, 16, 32, 64)  # members of one DiLoCo group (a run's max_members is 64)
EXCHANGE_MBYTES = 13.0  # the update U of the exchange scenario (exchange_scale.py's default)


def exchange(sizes: list[int]) -> list[dict]:
    """Update bytes per member per round against the group's size, both exchanges."""
    rows = []
    for n in sizes:
        got = measure_exchange(n, EXCHANGE_MBYTES, "flag")
        rows.append({
            "members": n,
            "sharded_recv_u": got["sharded"]["recv_u"],
            "sharded_sent_u": got["sharded"]["sent_u"],
            "gather_recv_u": got["all_gather"]["recv_u"],
            "sharded_round_s": got["sharded"]["wall_p99_s"],
            "gather_round_s": got["all_gather"]["wall_p99_s"],
        })  # fmt: skip
        print(f"group of {n}: sharded {rows[-1]['sharded_recv_u']:.2f} U", flush=True)
    return rows


def model(results: list[dict], key: str, n: int) -> float:
    """log N growth through the smallest size's figure (constant for per-node replication)."""
    base = results[0]
    if key in LOG_MODELS:
        return base[key] * math.log(n) / math.log(base["n"])
    return base[key]


ROWS = (  # (key, label, unit)
    ("hops_mean", "lookup hops, mean", "hops"),
    ("hops_p99", "lookup hops, p99", "hops"),
    ("lookup_p50_s", "lookup latency p50", "s"),
    ("lookup_p99_s", "lookup latency p99", "s"),
    ("lookup_requests", "requests per lookup", ""),
    ("found", "lookups that found the record", "share"),
    ("dht_msgs_node_min", "DHT messages per node per minute", ""),
    ("dht_kB_node_min", "DHT kB per node per minute", "kB"),
    ("dht_busiest_msgs_min", "DHT messages, busiest node, per minute", ""),
    ("table_mean", "routing table size", "peers"),
    ("conns_mean", "connections per node", ""),
    ("crdt_msgs_node_min", "replication messages per node per minute", ""),
    ("crdt_kB_node_min", "replication kB per node per minute", "kB"),
    ("converge_p50_s", "change reaches half the replicas", "s"),
    ("converge_max_s", "change reaches every replica", "s"),
    ("reach_50_s", "announcement reaches 50%", "s"),
    ("reach_99_s", "announcement reaches 99%", "s"),
    ("reach_all_s", "announcement reaches all", "s"),
    ("mem_KiB_per_node", "memory per node (DHT phase)", "KiB"),
    ("cpu_s", "CPU seconds for this size", "s"),
)


def exchange_report(rows: list[dict]) -> Panel:
    print_table(
        f"update bytes per member per round vs N ({EXCHANGE_MBYTES:g} MB int8 update U, Flag; "
        "links 50/200 Mbit/s, 30 ms; round time is network time)",
        ["members", "sharded recv/U", "sharded sent/U", "all-gather recv/U", "(N-1)",
         "sharded round s", "all-gather round s"],
        [[r["members"], r["sharded_recv_u"], r["sharded_sent_u"], r["gather_recv_u"],
          r["members"] - 1, r["sharded_round_s"], r["gather_round_s"]] for r in rows],
    )  # fmt: skip
    sizes = [r["members"] for r in rows]
    return Panel(
        "update bytes per member per round vs N",
        "U",
        [
            Series("sharded", [r["sharded_recv_u"] for r in rows]),
            Series("all-gather", [r["gather_recv_u"] for r in rows]),
            Series("2 U (all-reduce)", [2.0 * (n - 1) / n for n in sizes], dashed=True),
        ],
        sizes=sizes,
    )


def report(results: list[dict], png: Path, exchange_rows: list[dict]) -> None:
    panels = network_report(results) if results else []
    if exchange_rows:
        panels.append(exchange_report(exchange_rows))
    draw(png, [r["n"] for r in results] or [1], panels)
    print(f"plot: {png}")


def network_report(results: list[dict]) -> list[Panel]:
    sizes = [r["n"] for r in results]
    modelled = {k for k, *_ in ROWS if k in LOG_MODELS or k in ("crdt_msgs_node_min",)}
    header = ["measure", *[f"N={n}" for n in sizes], "model", f"model at {sizes[-1]}"]
    rows = []
    for key, label, unit in ROWS:
        name = f"{label} ({unit})" if unit else label
        values = [r[key] for r in results]
        if key in modelled:
            kind = "log N" if key in LOG_MODELS else "constant"
            rows.append([name, *values, kind, model(results, key, sizes[-1])])
        else:
            rows.append([name, *values, "", ""])
    print_table("scale simulation (simulated seconds; CPU is this machine's)", header, rows)
    panels = [
        _panel(results, "lookup hops", "hops", [("hops_mean", "mean"), ("hops_p99", "p99")]),
        _panel(results, "lookup latency", "s", [("lookup_p50_s", "p50"), ("lookup_p99_s", "p99")]),
        _panel(
            results,
            "traffic per node per minute",
            "messages",
            [("dht_msgs_node_min", "DHT"), ("crdt_msgs_node_min", "replication")],
        ),  # fmt: skip
        _panel(
            results,
            "one change, one announcement",
            "s",
            [("converge_max_s", "change at every replica"), ("reach_all_s", "announcement at all")],
        ),  # fmt: skip
    ]
    return panels


def _panel(results: list[dict], title: str, unit: str, keys: list[tuple[str, str]]) -> Panel:
    sizes = [r["n"] for r in results]
    series = [Series(label, [r[key] for r in results]) for key, label in keys]
    first = keys[0][0]
    kind = "log N" if first in LOG_MODELS else "constant"
    series.append(Series(f"{kind} model", [model(results, first, n) for n in sizes], dashed=True))
    return Panel(title, unit, series)


def _simulate_one(n: int, seed: int) -> dict:
    result = simulate(n, seed)
    print(f"N={n}: {result['cpu_s']:.0f} CPU s, {result['wall_s']:.0f} s wall", flush=True)
    return result


def _last_json(path: Path) -> dict:
    """The JSON line of a saved run (its last, unless a wrapper appended lines after it)."""
    lines = path.read_text().strip().splitlines()
    return json.loads(next(line for line in reversed(lines) if line.startswith("{")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=[1000, 4000, 10000],
        help="network sizes (none: the update-exchange scenario alone)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="1k nodes only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--png", type=Path, default=Path("scale_sim.png"))
    parser.add_argument(
        "--group-sizes", type=int, nargs="*", default=list(GROUP_SIZES),
        help="members of the update-exchange scenario (none: skip it)",
    )  # fmt: skip
    parser.add_argument(
        "--combine", type=Path, nargs="+", help="no simulation: one table and plot of earlier "
        "runs' outputs (their last lines), e.g. sizes run as separate processes",
    )  # fmt: skip
    args = parser.parse_args()
    load = os.getloadavg()[0]
    exchange_rows = None
    if args.combine:
        saved = [_last_json(path) for path in args.combine]
        results = [r for out in saved for r in out["results"]]
        exchange_rows = next((out["exchange"] for out in saved if out.get("exchange")), None)
    else:
        results = [_simulate_one(n, args.seed) for n in ([1000] if args.quick else args.sizes)]
    results.sort(key=lambda r: r["n"])
    sizes = [r["n"] for r in results]
    if exchange_rows is None:
        exchange_rows = exchange(args.group_sizes[:2] if args.quick else args.group_sizes)
    report(results, args.png, exchange_rows)
    models = {k: model(results, k, sizes[-1]) for k in LOG_MODELS} if sizes else {}
    loads = [round(load, 2), round(os.getloadavg()[0], 2)]
    print_json({"benchmark": "scale_sim", "sizes": sizes, "results": results,
                "exchange": exchange_rows,
                "models_at_largest": models, "png": str(args.png),
                "load_avg": loads, "cpus": os.cpu_count()})  # fmt: skip


if __name__ == "__main__":
    main()

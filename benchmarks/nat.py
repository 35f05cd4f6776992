"""NAT matrix through CLI daemons: time to first connection, direct or not, 16 MiB throughput.

Runs in the network namespaces of scripts/netns-nat (root only; built and removed here unless
they already exist). Real `peertrain node start` processes: three public nodes, a forwarded
one, and listeners behind a cone and a symmetric NAT, all bootstrapped from the first public
node only. Per repeat, two fresh dialers (behind another cone and another symmetric NAT) find
each target by its bare peer ID (`resolve_peer`: DHT lookup and peer record, then direct
addresses and circuits raced), wait up to --punch seconds for DCUtR to make a relayed
connection direct, and fetch a 16 MiB tensor from it through the tensor service (`debug.fetch`).

    join from start `peertrain join <bare id> --bootstrap <first public node>` started afresh in
                    the dialer's namespace: seconds from the process start (imports, daemon,
                    DHT bootstrap, resolution, dial) to its log saying it joined (target 3 s)
    first conn ms   resolve_peer on a running daemon: DHT lookup + dial (direct or via a relay)
    ends on         direct | punched (relayed, then direct by DCUtR) | relayed
    MB/s            the payload over whatever connection the pair ends on

The last cell repeats symmetric → symmetric with every TCP connection of the dialer reset
0.6 s into the transfer (`ss -K`): the download resumes from the same holder once the circuit
is dialed again (its MB/s include the reconnection).

A second table gives each daemon's start → reachability verdict and → relays held.

    sudo .venv/bin/python benchmarks/nat.py [--repeats 2] [--mib 16] [--punch 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

try:
    from benchmarks._report import print_json, print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table

ROOT = Path(__file__).resolve().parents[1]
# (dialer, target, matrix cell)
CELLS = [
    ("cone2", "pub2", "cone → public"),
    ("cone2", "fwd", "cone → forwarded"),
    ("cone2", "cone", "cone → cone"),
    ("sym2", "cone", "symmetric → cone"),
    ("cone2", "sym", "cone → symmetric"),
    ("sym2", "sym", "symmetric → symmetric"),
]
RESET_CELL = "symmetric → symmetric, reset"  # every TCP connection of the dialer cut mid-way
CELL_NAMES = [cell for _, _, cell in CELLS] + [RESET_CELL]
FIELDS = [
    "ends_on",
    "delivered",
    "join_from_start_s",
    "first_conn_ms",
    "direct_after_s",
    "mb_per_s",
]
JOIN_TARGET_S = 3.0


def load_netns():
    from peertrain.testing import netns

    return netns


class Nodes:
    """Named daemons in namespaces; `stop_all` ends them (SIGTERM, then SIGKILL)."""

    def __init__(self, world, base: Path):
        self.world, self.base = world, base
        self.by_name: dict = {}
        self.started: dict[str, float] = {}

    def start(self, key: str, ns: str, port: int, args: list[str]) -> None:
        listen = ["--listen", f"/ip4/{self.world.ip_of(ns)}/tcp/{port}", "--log-format", "json"]
        daemon = self.world.NamespacedDaemon(ns, self.base / key, [*args, *listen])
        self.started[key] = time.monotonic()
        self.by_name[key] = daemon.start()

    def ready(self, key: str) -> dict:
        return self.by_name[key].wait_ready(timeout=30)

    def status(self, key: str) -> dict:
        return self.by_name[key].status()

    def call(self, key: str, method: str, params: dict, timeout: float = 30.0):
        from peertrain.node.api.control import call_sync

        return call_sync(self.by_name[key].control_socket, method, params, timeout=timeout)

    def stop(self, key: str) -> None:
        self.by_name.pop(key).stop()

    def stop_all(self) -> None:
        for daemon in self.by_name.values():
            daemon.send_signal()
        for daemon in self.by_name.values():
            daemon.stop()


def start_world(nodes: Nodes) -> tuple[dict[str, str], dict[str, dict]]:
    """Public, forwarded and listening NATed daemons; their peer IDs and start-up figures."""
    nodes.start("pub", "pub", 4001, ["node", "start"])
    ids = {"pub": nodes.ready("pub")["peer_id"]}
    boot = nodes.status("pub")["share"]
    start = ["node", "start", "--bootstrap", boot]
    for key, ns, port in (("pub2", "pub2", 4001), ("pub3", "pub", 4002), ("fwd", "fwd", 4001)):
        nodes.start(key, ns, port, start)
    for key in ("cone", "sym"):
        nodes.start(key, key, 4001, start)
    for key in ("pub2", "pub3", "fwd", "cone", "sym"):
        ids[key] = nodes.ready(key)["peer_id"]
    figures = {}
    for key in ids:
        verdict_at = wait_or_none(
            lambda k=key: _verdict(nodes, k) != "unknown" and time.monotonic(),
            timeout=60,
            interval=0.1,
        )
        relays_at = None
        if _verdict(nodes, key) == "private":
            relays_at = wait_or_none(
                lambda k=key: (
                    len(nodes.status(k)["reachability"]["relays"]) >= 2 and time.monotonic()
                ),
                timeout=40,
                interval=0.1,
            )
        figures[key] = {
            "verdict": _verdict(nodes, key),
            "verdict_s": _since(nodes, key, verdict_at),
            "relays_s": _since(nodes, key, relays_at),
        }
    return ids, figures


def wait_or_none(predicate, *, timeout: float, interval: float):
    """The predicate's value once true, or None: a benchmark reports a cell that never got there."""
    from peertrain.testing import wait_until_sync

    try:
        return wait_until_sync(predicate, timeout=timeout, interval=interval)
    except TimeoutError:
        return None


def _verdict(nodes: Nodes, key: str) -> str:
    return nodes.status(key)["reachability"]["status"]


def _since(nodes: Nodes, key: str, at: float | None) -> float | None:
    return None if not at else round(at - nodes.started[key], 2)


def measure_cell(nodes: Nodes, src: str, dst: str, dst_id: str, checksum: str, punch: float):
    started = time.perf_counter()
    found = nodes.call(src, "resolve_peer", {"peer": dst_id, "timeout": 9.0})
    first_ms = round((time.perf_counter() - started) * 1000, 1)
    relayed_first = found.get("connection") == "relayed"
    direct_after = None
    if relayed_first:
        direct_at = wait_or_none(
            lambda: (
                nodes.status(src)["reachability"]["connections"].get(dst_id) == "direct"
                and time.perf_counter()
            ),
            timeout=punch,
            interval=0.1,
        )
        direct_after = round(direct_at - started, 2) if direct_at else None
    got = nodes.call(src, "debug.fetch", {"peer": dst_id, "checksum": checksum})
    ends = got["connection"]
    if relayed_first and ends == "direct":
        ends = "punched"
    return {
        "ends_on": ends,
        "first_conn_ms": first_ms,
        "direct_after_s": direct_after,
        "mb_per_s": got["mb_per_s"],
        "already_connected": found.get("how") == "connected",
    }


def join_from_start(nodes: Nodes, ns: str, key: str, port: int, dst_id: str, boot: str):
    """Seconds from starting `peertrain join <dst_id>` in namespace `ns` to its log line
    "joined <dst_id>" (keep_joined.py writes it once connected); None if not within 30 s."""
    nodes.start(key, ns, port, ["join", dst_id, "--bootstrap", boot])
    log = nodes.by_name[key].log_path
    at = wait_or_none(
        lambda: f"joined {dst_id}" in log.read_text() and time.monotonic(),
        timeout=30,
        interval=0.02,
    )
    seconds = _since(nodes, key, at)
    nodes.stop(key)
    return seconds


def measure_joins(nodes: Nodes, ids: dict[str, str], boot: str, repeat: int) -> dict:
    """`join_from_start` for every cell of the matrix, each from a fresh process."""
    out = {}
    for index, (src, dst, cell) in enumerate(CELLS):
        key = f"join-{src}-{dst}-{repeat}"
        out[cell] = join_from_start(nodes, src, key, 4100 + index, ids[dst], boot)
    return out


def measure_reset(nodes: Nodes, src: str, dst_id: str, checksum: str, ns: str):
    """`debug.fetch` while every TCP connection in the dialer's namespace is reset 0.6 s in
    (`ss -K`, as when its relay restarts): the download resumes once the circuit is back."""
    out: dict = {}

    def fetch() -> None:
        try:
            out["got"] = nodes.call(src, "debug.fetch", {"peer": dst_id, "checksum": checksum})
        except Exception as exc:  # noqa: BLE001 - raised below, in the benchmark's thread
            out["error"] = exc

    worker = threading.Thread(target=fetch)
    worker.start()
    time.sleep(0.6)
    cut = nodes.world.in_ns(ns, ["ss", "-K", "-t", "state", "established"])
    subprocess.run(cut, check=True, capture_output=True)
    worker.join(60)
    if "got" not in out:
        raise RuntimeError(str(out.get("error", "no answer")))
    resumed = "asking it again once reconnected" in nodes.by_name[src].log_path.read_text()
    got = out["got"]
    return {
        "ends_on": got["connection"] if resumed else f"{got['connection']} (cut missed)",
        "first_conn_ms": None,
        "direct_after_s": None,
        "mb_per_s": got["mb_per_s"],
        "seconds": got["seconds"],
        "already_connected": True,
    }


def measure(world, base: Path, repeats: int, mib: int, punch: float):
    nodes = Nodes(world, base)
    runs: dict[str, list[dict]] = {cell: [] for cell in CELL_NAMES}
    joins: dict[str, list[float | None]] = {cell: [] for cell in CELL_NAMES}
    failures: dict[str, list[str]] = {cell: [] for cell in CELL_NAMES}
    try:
        ids, startup = start_world(nodes)
        boot = nodes.status("pub")["share"]
        offers = {
            k: nodes.call(k, "debug.offer", {"mib": mib}) for k in ("pub2", "fwd", "cone", "sym")
        }
        for repeat in range(repeats):
            for cell, seconds in measure_joins(nodes, ids, boot, repeat).items():
                joins[cell].append(seconds)
            dialers = {"cone2": f"cone2-{repeat}", "sym2": f"sym2-{repeat}"}
            for ns, key in dialers.items():
                nodes.start(key, ns, 4001 + repeat, ["node", "start", "--bootstrap", boot])
            for key in dialers.values():
                nodes.ready(key)
                nodes.call(key, "debug.offer", {"mib": 1})  # loads torch before the clock runs
            for src, dst, cell in CELLS:
                try:
                    runs[cell].append(
                        measure_cell(
                            nodes, dialers[src], dst, ids[dst], offers[dst]["checksum"], punch
                        )
                    )
                except Exception as exc:  # noqa: BLE001 - counted, the reason kept for the JSON
                    failures[cell].append(str(exc).splitlines()[0][:200])
            try:
                sym = offers["sym"]["checksum"]
                runs[RESET_CELL].append(
                    measure_reset(nodes, dialers["sym2"], ids["sym"], sym, "sym2")
                )
            except Exception as exc:  # noqa: BLE001 - counted, the reason kept for the JSON
                failures[RESET_CELL].append(str(exc).splitlines()[0][:200])
            for key in dialers.values():
                nodes.stop(key)
    finally:
        nodes.stop_all()
    return runs, joins, failures, startup


def row(cell: str, runs: list[dict], joins: list[float | None], repeats: int) -> list:
    delivered = f"{len(runs)}/{repeats}"
    joined = _median(joins) if joins and None not in joins else None  # a miss: no figure
    if not runs:
        return [cell, "failed", delivered, joined, None, None, None]
    ends = sorted({r["ends_on"] for r in runs})
    return [
        cell,
        "/".join(ends),
        delivered,
        joined,
        _median(r["first_conn_ms"] for r in runs),  # none for the reset cell: already connected
        _median(r["direct_after_s"] for r in runs),
        _median(r["mb_per_s"] for r in runs),
    ]


def _median(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def figures(args, rows, runs, joins, failures, startup) -> dict:
    """The JSON line: every cell, every run, every join, and whether joins met the target."""
    cells = {
        r[0]: dict(zip(FIELDS, r[1:], strict=True)) | {"failures": failures[r[0]]} for r in rows
    }
    every_join = [j for js in joins.values() for j in js]
    return {
        "payload_mib": args.mib,
        "repeats": args.repeats,
        "cells": cells,
        "runs": runs,
        "joins_from_start_s": joins,
        "join_target_s": JOIN_TARGET_S,
        "join_target_met": bool(every_join)
        and all(j is not None and j <= JOIN_TARGET_S for j in every_join),
        "daemons": startup,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--punch", type=float, default=20.0, help="seconds to wait for DCUtR")
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
        with tempfile.TemporaryDirectory() as home:
            runs, joins, failures, startup = measure(
                world, Path(home), args.repeats, args.mib, args.punch
            )
    finally:
        if not existed:
            world.teardown()
    rows = [row(cell, runs[cell], joins[cell], args.repeats) for cell in CELL_NAMES]
    print_table(
        f"NAT matrix through CLI daemons, {args.mib} MiB tensor, medians over {args.repeats} "
        "fresh dialers per cell",
        [
            "cell (dialer → target)",
            "ends on",
            "delivered",
            "join from start s",
            "first conn ms",
            "direct after s",
            "MB/s",
        ],
        [["-" if v is None else v for v in r] for r in rows],
    )
    print_table(
        "daemons: seconds from process start to reachability verdict / to 2 relays held",
        ["node", "verdict", "verdict s", "relays s"],
        [
            [k, f["verdict"], f["verdict_s"] or "-", f["relays_s"] or "-"]
            for k, f in startup.items()
        ],
    )
    print_json(figures(args, rows, runs, joins, failures, startup))


if __name__ == "__main__":
    main()

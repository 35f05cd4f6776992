"""Figures of benchmarks/update_round.py: bytes per link from the kernel, the round's breakdown,
the printed tables and the final JSON line (split from the runner so each reads on its own).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
from typing import Any

try:
    from benchmarks._hivemind_allreduce import HIVEMIND_RATIO, hivemind_rows
    from benchmarks._report import print_json, print_table
except ImportError:  # run as a script from the benchmarks folder
    from _hivemind_allreduce import HIVEMIND_RATIO, hivemind_rows
    from _report import print_json, print_table

FLOOR_RATIO = 1.3  # issue 20: the round within 1.3x its CPU floor
MB = 1e6


# ---------------------------------------------------------------- bytes per link, from the kernel


def tcp_counters(ports: set[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """(local port, peer port) -> (bytes acked, bytes received) of established loopback sockets
    whose local port is one of `ports` (the listening side of each connection)."""
    where = " or ".join(f"sport = :{p}" for p in sorted(ports))
    text = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( {where} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out: dict[tuple[int, int], tuple[int, int]] = {}
    key = None
    for line in text.splitlines():
        if not line[:1].isspace():
            found = re.findall(r":(\d+)\s", line + " ")
            key = (int(found[-2]), int(found[-1])) if len(found) >= 2 else None
        elif key is not None:
            acked = re.search(r"bytes_acked:(\d+)", line)
            received = re.search(r"bytes_received:(\d+)", line)
            out[key] = (
                int(acked.group(1)) if acked else 0,
                int(received.group(1)) if received else 0,
            )
    return out


def link_bytes(
    reports: list[dict[str, Any]], ports: dict[str, int], before, after
) -> list[dict[str, Any]]:
    """Bytes per direction of each node pair during the round, from the listener's socket."""
    owner = {port: peer for peer, port in ports.items()}
    dialers = {
        (r["peer"], port): peer
        for r in reports
        for peer, rports in r["links"].items()
        for port in rports
    }
    links: dict[tuple[str, str], int] = {}
    for (local, remote), (sent, received) in after.items():
        listener = owner.get(local)
        dialer = dialers.get((listener, remote))
        if listener is None or dialer is None:
            continue
        sent0, received0 = before.get((local, remote), (0, 0))
        links[(listener, dialer)] = links.get((listener, dialer), 0) + sent - sent0
        links[(dialer, listener)] = links.get((dialer, listener), 0) + received - received0
    return [{"src": s, "dst": d, "bytes": b} for (s, d), b in sorted(links.items())]


# ---------------------------------------------------------------- figures


def _pull(ev: list[dict[str, Any]], fetch: dict[str, Any]) -> dict[str, Any]:
    """One fetched payload's timeline: its transfer inside the fetch, and any re-serve."""
    transfer = next(e for e in ev if e["op"] == "transfer" and e["checksum"] == fetch["checksum"])
    # a fetched payload is served on as verified, without a second serve (0 s)
    reserve = next(
        (e for e in ev if e["op"] == "serve" and e.get("checksum") == fetch["checksum"]),
        {"t0": 0.0, "t1": 0.0},
    )
    return {
        "holders": fetch["holders"],
        "start_s": fetch["t0"],
        "transfer_s": transfer["t1"] - transfer["t0"],
        "copy_out_s": fetch["t1"] - transfer["t1"],
        "reserve_s": reserve["t1"] - reserve["t0"],
        "in_at_s": fetch["t1"],
        "MBps": transfer["nbytes"] / MB / max(1e-9, transfer["t1"] - transfer["t0"]),
    }


def _pulls(reports: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[float]]:
    """Every successful fetch of every node, with its gossip delay; each node's own prepare."""
    owner_of: dict[str, str] = {}
    announced: dict[str, float] = {}
    prepare: list[float] = []
    for r in reports:
        own = next(
            (e for e in r["events"] if e.get("op") == "serve" and e["owner"] == r["peer"]), None
        )
        if own is None:  # the sharded exchange: no whole update is served or pulled
            return [], [float("nan")]
        owner_of[own["checksum"]] = r["peer"]
        prepare.append(own["t1"] - own["t0"])
        announced[r["peer"]] = next(e for e in r["events"] if e["op"] == "publish")["t1"]
    pulls = []
    for r in reports:
        for fetch in (e for e in r["events"] if e["op"] == "fetch" and "error" not in e):
            sender = owner_of.get(fetch["checksum"], "?")
            pull = _pull(r["events"], fetch)
            delay = fetch["t0"] - announced.get(sender, 0.0)
            pulls.append({"node": r["peer"], "sender": sender, "gossip_delay_s": delay, **pull})
    return pulls, prepare


def analyse(result: dict[str, Any], nbytes: int, peers: int) -> dict[str, Any]:
    reports, links = result["reports"], result["links"]
    pulls, prepare = _pulls(reports)
    round_s = max(r["done_s"] for r in reports)
    moved = sum(link["bytes"] for link in links)

    def med(key: str) -> float:
        return statistics.median(p[key] for p in pulls) if pulls else float("nan")

    return {
        "round_s": round_s,
        **_phases(reports),
        "complete": all(r["got"] == peers and not r["missing"] for r in reports),
        "same_theta": len({r.get("theta") for r in reports}) == 1,
        "pulls": pulls,
        "failures": [
            dict(node=r["peer"], **e) for r in reports for e in r["events"] if "error" in e
        ],
        "prepare_s": statistics.median(prepare),
        "encode_s": statistics.median(r["encode_s"] for r in reports),
        "apply_floor_s": statistics.median(r["apply_s"] for r in reports),
        "encoder_build_s": statistics.median(r["build_s"] for r in reports),
        "encode_kernel_s": statistics.median(r["kernel_s"] for r in reports),
        "gossip_delay_s": med("gossip_delay_s"),
        "transfer_s": med("transfer_s"),
        "transfer_max_s": max((p["transfer_s"] for p in pulls), default=float("nan")),
        "copy_out_s": med("copy_out_s"),
        "reserve_s": med("reserve_s"),
        "bytes_total": moved,
        "bytes_ideal_total": nbytes * peers * (peers - 1),
        "link_max_bytes": max((link["bytes"] for link in links), default=0),
        "link_min_bytes": min((link["bytes"] for link in links), default=0),
        "link_ideal_bytes": nbytes,
        **_cpu(result),
        "log_errors": sum(r.get("log_errors", 0) for r in reports),
        "foreign_peers": sorted({p for r in reports for p in r.get("foreign_peers", ())}),
        "aggregate_MBps": moved / MB / round_s if round_s else 0.0,
    }


def _phases(reports: list[dict[str, Any]]) -> dict[str, float]:
    """The round's phases (medians over nodes) and its CPU floor: the unavoidable compute
    (encode + aggregate + outer step, measured alone on each node before the round) of every
    node, on this machine's cores: no faster than one node's own, nor than every node's CPU
    seconds spread over all cores. Each node measures the same work; the least disturbed
    measurement (the smallest) stands for all, which only makes the floor lower."""
    cpus = os.cpu_count() or 1
    one = min(r["floor_s"] for r in reports)
    floor = max(one, len(reports) * min(r["floor_cpu_s"] for r in reports) / cpus)
    return {
        "encode_in_round_s": statistics.median(r["encoded_s"] for r in reports),
        "exchange_s": statistics.median(r["exchanged_s"] - r["encoded_s"] for r in reports),
        "all_in_s": max(r["exchanged_s"] for r in reports),
        "apply_in_round_s": statistics.median(r["done_s"] - r["exchanged_s"] for r in reports),
        "floor_node_s": one,
        "floor_cpu_s": len(reports) * min(r["floor_cpu_s"] for r in reports),
        "compute_floor_s": floor,
    }


def _cpu(result: dict[str, Any]) -> dict[str, float]:
    reports = result["reports"]
    cpu = sum(r.get("cpu_s", 0.0) for r in reports)
    loop_cpu = sum(r.get("loop_cpu_s", 0.0) for r in reports)
    busiest_loop = (
        loop_cpu if result["loops"] == 1 else max(r.get("loop_cpu_s", 0.0) for r in reports)
    )
    # the round if the CPUs were ours alone: all the CPU it spent spread over the cores, but no
    # faster than the busiest event loop (one thread each) allows
    spent = max(cpu / (os.cpu_count() or 1), busiest_loop)
    return {"cpu_s": cpu, "cpu_spent_floor_s": spent, "loop_cpu_s": loop_cpu}


# ---------------------------------------------------------------- tables


def report(
    title: str,
    result: dict[str, Any],
    figures: dict[str, Any],
    base: dict[str, float],
    load: tuple[float, float],
    nbytes: int,
    hivemind: dict[str, Any],
) -> None:
    names = {r["peer"]: f"n{i}" for i, r in enumerate(result["reports"])}
    _nodes_table(title, result["reports"], names)
    _pulls_table(figures["pulls"], names)
    _phases_table(result["reports"], names)
    rows = [
        (names[link["src"]], names[link["dst"]], link["bytes"] / MB, link["bytes"] / nbytes)
        for link in result["links"]
    ]
    print_table(
        "bytes per link direction during the round (kernel TCP counters)",
        ["from", "to", "MB", "x ideal (1 payload)"],
        rows,
    )
    for failure in figures["failures"]:
        where = f"{failure['op']} on {names[failure['node']]} at {failure['t0']:.2f} s"
        print(f"  FAILED {where}: {failure['error']}")
    print_table("summary", ["what", "value", "note"], _summary_rows(figures, base, hivemind))
    print(f"load average {load[0]:.2f} -> {load[1]:.2f} on {os.cpu_count()} CPUs")
    if figures["log_errors"]:
        print(
            f"libp2p logged {figures['log_errors']} errors during the round; foreign peers named:"
            f" {len(figures['foreign_peers'])} (other programs on this loopback dialling our ports)"
        )


def _nodes_table(title: str, reports: list[dict[str, Any]], names: dict[str, str]) -> None:
    def own_serve(r: dict[str, Any]) -> float:
        serves = (e for e in r["events"] if e.get("op") == "serve" and e.get("owner") == r["peer"])
        e = next(serves, None)  # none in a sharded round: its slices are served as shards
        return e["t1"] - e["t0"] if e is not None else float("nan")

    rows = [
        (
            names[r["peer"]],
            r["peer"][-8:],
            r["floor_s"],
            r["encoded_s"],
            own_serve(r),
            r["got"],
            r["exchanged_s"],
            r["done_s"],
            r.get("cpu_s", 0.0),
            r.get("loop_cpu_s", 0.0),
            r.get("max_rss_MB", 0.0),
        )
        for r in reports
    ]
    header = ["node", "peer ID ends", "floor s", "encoded at s", "prepare own s", "payloads"]
    header += ["all in at s", "applied at s", "CPU s in round", "of it event loop", "peak RSS MB"]
    print_table(title, header, rows)


def _phases_table(reports: list[dict[str, Any]], names: dict[str, str]) -> None:
    """The sharded round's phases on each node, seconds from its start (nothing for gather)."""
    at = [dict(r.get("phases", [])) for r in reports]
    if phases := list(dict.fromkeys(what for node in at for what in node)):  # first seen first
        rows = [(what, *(node.get(what, float("nan")) for node in at)) for what in phases]
        header = ["sharded round phase ends at s", *(names[r["peer"]] for r in reports)]
        print_table("the sharded round, phase by phase (each node's own clock)", header, rows)


def _pulls_table(pulls: list[dict[str, Any]], names: dict[str, str]) -> None:
    rows = [
        (
            names[p["node"]],
            names.get(p["sender"], "?"),
            p["holders"],
            p["start_s"],
            p["gossip_delay_s"],
            p["transfer_s"],
            p["MBps"],
            p["copy_out_s"],
            p["reserve_s"],
            p["in_at_s"],
        )
        for p in sorted(pulls, key=lambda p: (p["node"], p["start_s"]))
    ]
    header = ["node", "from", "holders", "starts", "gossip delay", "transfer s", "MB/s"]
    header += ["copy out s", "re-serve s", "in at"]
    print_table("pulls (seconds from the common start)", header, rows)


def _summary_rows(
    f: dict[str, Any], base: dict[str, float], hm: dict[str, Any]
) -> list[tuple[str, float, str]]:
    cpus = os.cpu_count() or 1
    rows = [
        ("round: encode, exchange, aggregate + outer step", f["round_s"],
         f"all nodes done; {f['round_s'] / f['compute_floor_s']:.2f}x the CPU floor"
         f" (target <= {FLOOR_RATIO}x): {'met' if f['floor_met'] else 'NOT met'}"),
        ("CPU floor (unavoidable compute, this machine)", f["compute_floor_s"],
         f"max(one node alone, {f['floor_cpu_s']:.2f} CPU s of all nodes / {cpus} CPUs)"),
        ("  one node alone: encode + aggregate + step", f["floor_node_s"],
         f"best node; median encode {f['encode_s']:.3f} s,"
         f" aggregate + step {f['apply_floor_s']:.3f} s"),
        ("  the same encode as codec.py times it", f["encode_kernel_s"],
         "bare kernel into a payload already faulted in"),
        ("  building the encoder (numba load)", f["encoder_build_s"], "at join, not timed"),
        ("in the round: encoded at", f["encode_in_round_s"], "median node"),
        ("in the round: exchange", f["exchange_s"],
         f"median node; the last node had every payload at {f['all_in_s']:.3f} s"),
        ("in the round: aggregate + outer step", f["apply_in_round_s"], "median node"),
        ("prepare own payload (copy + blake3)", f["prepare_s"], "median node"),
        ("gossip delay (announced -> pull starts)", f["gossip_delay_s"], "median pull"),
        ("transfer one payload (fetch_tensor)", f["transfer_s"],
         f"median; max {f['transfer_max_s']:.2f} s"),
        ("CPU seconds, all nodes, during the round", f["cpu_s"],
         f"{f['cpu_s'] / (f['round_s'] * cpus):.0%} of {cpus} CPUs;"
         f" event loops {f['loop_cpu_s']:.2f} s"),
        ("round if the CPUs were ours alone", f["cpu_spent_floor_s"],
         "max(CPU s spent / CPUs, busiest event loop's CPU s)"),
        ("bytes moved / ideal", f["bytes_total"] / max(1, f["bytes_ideal_total"]),
         f"{f['bytes_total'] / MB:.0f} MB vs {f['bytes_ideal_total'] / MB:.0f} MB"),
    ]  # fmt: skip
    rows += hivemind_rows(f, hm)
    if base:
        rows += [
            ("loopback TCP MB/s (2 processes)", base["tcp"], "physical limit, one link"),
            ("our Noise+Yamux stream MB/s", base["ours"],
             f"{base['ours_cpu_MBps']:.0f} MB per CPU-s"),
        ]  # fmt: skip
    return rows


def judge(figures: dict[str, Any], hivemind: dict[str, Any]) -> None:
    """The targets: the round within FLOOR_RATIO of its CPU floor, HIVEMIND_RATIO x hivemind."""
    f = figures
    f["floor_met"] = bool(f["complete"] and f["round_s"] <= FLOOR_RATIO * f["compute_floor_s"])
    hm = hivemind.get("8bit") or []
    f["hivemind_ratio"] = statistics.median(hm) / f["round_s"] if hm else float("nan")
    f["hivemind_met"] = bool(f["complete"] and hm and f["hivemind_ratio"] >= HIVEMIND_RATIO)
    f["met"] = f["floor_met"] and f["hivemind_met"]


# ---------------------------------------------------------------- the JSON line

BREAKDOWN = (
    "encode_s",
    "encode_kernel_s",
    "encoder_build_s",
    "apply_floor_s",
    "floor_node_s",
    "floor_cpu_s",
    "encode_in_round_s",
    "exchange_s",
    "all_in_s",
    "apply_in_round_s",
    "prepare_s",
    "gossip_delay_s",
    "transfer_s",
    "transfer_max_s",
    "copy_out_s",
    "reserve_s",
    "cpu_s",
    "loop_cpu_s",
    "cpu_spent_floor_s",
)


def print_figures(run: dict[str, Any], result, figures, base, load, hivemind) -> None:
    """The last line: `run` (benchmark, mode, peers, numel, codec, payload_bytes) + figures."""
    f = figures
    print_json(
        {
            **run,
            "round_s": round(f["round_s"], 3),
            "cpu_floor_s": round(f["compute_floor_s"], 3),
            "floor_ratio": round(f["round_s"] / f["compute_floor_s"], 3),
            "floor_ratio_target": FLOOR_RATIO,
            "hivemind_8bit_ratio": round(f["hivemind_ratio"], 2),
            "hivemind_ratio_target": HIVEMIND_RATIO,
            "met": f["met"],
            "complete": f["complete"],
            "same_theta": f["same_theta"],
            "failures": len(f["failures"]),
            "log_errors": f["log_errors"],
            "foreign_peers": len(f["foreign_peers"]),
            "max_rss_MB": round(max(r.get("max_rss_MB", 0.0) for r in result["reports"])),
            "breakdown": {k: None if f[k] is None else round(f[k], 4) for k in BREAKDOWN},
            "tcp_MBps": round(base["tcp"], 1) if base else None,
            "stream_MBps": round(base["ours"], 1) if base else None,
            "aggregate_MBps": round(f["aggregate_MBps"], 1),
            "bytes_per_link": {
                "ideal": f["link_ideal_bytes"],
                "min": f["link_min_bytes"],
                "max": f["link_max_bytes"],
                "total": f["bytes_total"],
                "ideal_total": f["bytes_ideal_total"],
            },
            "hivemind": hivemind,
            "load_avg": [round(x, 2) for x in load],
            "cpus": os.cpu_count(),
        }
    )

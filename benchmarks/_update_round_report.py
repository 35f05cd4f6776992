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
    from benchmarks._report import print_json, print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table

TARGET_S = 2.0
HIVEMIND_S = {"fp32": 6.3, "8bit": 4.8}
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
        own = next(e for e in r["events"] if e["op"] == "serve" and e["owner"] == r["peer"])
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
        "complete": all(r["got"] == peers and not r["missing"] for r in reports),
        "pulls": pulls,
        "failures": [
            dict(node=r["peer"], **e) for r in reports for e in r["events"] if "error" in e
        ],
        "prepare_s": statistics.median(prepare),
        "encode_s": statistics.median(r["encode_s"] for r in reports),
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
        "decode_s": reports[0].get("decode_s"),
        "decoded_finite": reports[0].get("decoded_finite"),
        "aggregate_MBps": moved / MB / round_s if round_s else 0.0,
    }


def _cpu(result: dict[str, Any]) -> dict[str, float]:
    reports = result["reports"]
    cpu = sum(r.get("cpu_s", 0.0) for r in reports)
    loop_cpu = sum(r.get("loop_cpu_s", 0.0) for r in reports)
    busiest_loop = (
        loop_cpu if result["loops"] == 1 else max(r.get("loop_cpu_s", 0.0) for r in reports)
    )
    # the CPU-bound floor: all our CPU spread over the cores, but no faster than the busiest
    # event loop (one thread each) allows
    floor = max(cpu / (os.cpu_count() or 1), busiest_loop)
    return {"cpu_s": cpu, "cpu_floor_s": floor, "loop_cpu_s": loop_cpu}


# ---------------------------------------------------------------- tables


def report(
    title: str,
    result: dict[str, Any],
    figures: dict[str, Any],
    base: dict[str, float],
    load: tuple[float, float],
    nbytes: int,
) -> None:
    names = {r["peer"]: f"n{i}" for i, r in enumerate(result["reports"])}
    _nodes_table(title, result["reports"], names)
    _pulls_table(figures["pulls"], names)
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
    print_table("summary", ["what", "value", "note"], _summary_rows(figures, base))
    hivemind = f"{HIVEMIND_S['fp32']} s fp32, {HIVEMIND_S['8bit']} s 8-bit"
    print(f"hivemind all-reduce, same size, this machine: {hivemind}")
    print(f"load average {load[0]:.2f} -> {load[1]:.2f} on {os.cpu_count()} CPUs")
    if figures["log_errors"]:
        print(
            f"libp2p logged {figures['log_errors']} errors during the round; foreign peers named:"
            f" {len(figures['foreign_peers'])} (other programs on this loopback dialling our ports)"
        )


def _nodes_table(title: str, reports: list[dict[str, Any]], names: dict[str, str]) -> None:
    def own_serve(r: dict[str, Any]) -> float:
        serves = (e for e in r["events"] if e["op"] == "serve" and e.get("owner") == r["peer"])
        e = next(serves)
        return e["t1"] - e["t0"]

    rows = [
        (
            names[r["peer"]],
            r["peer"][-8:],
            r["encode_s"],
            own_serve(r),
            r["got"],
            r["done_s"],
            r.get("cpu_s", 0.0),
            r.get("loop_cpu_s", 0.0),
            r.get("max_rss_MB", 0.0),
        )
        for r in reports
    ]
    header = ["node", "peer ID ends", "encode s", "prepare own s", "payloads", "all in at s"]
    header += ["CPU s in round", "of it event loop", "peak RSS MB"]
    print_table(title, header, rows)


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


def _summary_rows(f: dict[str, Any], base: dict[str, float]) -> list[tuple[str, float, str]]:
    cpus = os.cpu_count() or 1
    rows = [
        ("round (all nodes hold all payloads)", f["round_s"],
         f"target {TARGET_S} s: {'met' if f['met'] else 'NOT met'}"),
        ("encode own update (int8 + error feedback)", f["encode_s"],
         "before the round, one node at a time"),
        ("  same encode as codec.py times it", f["encode_kernel_s"],
         "into a payload already faulted in"),
        ("  building the encoder (numba load)", f["encoder_build_s"],
         "at join; was inside the first encode"),
        ("prepare own payload (copy + blake3)", f["prepare_s"], "median node"),
        ("gossip delay (announced -> pull starts)", f["gossip_delay_s"], "median pull"),
        ("transfer one payload (fetch_tensor)", f["transfer_s"],
         f"median; max {f['transfer_max_s']:.2f} s"),
        ("copy out to bytes", f["copy_out_s"], "median pull"),
        ("re-serve as holder (copy + blake3)", f["reserve_s"], "median pull"),
        ("decode one payload (after the round)", f["decode_s"] or float("nan"),
         "node 0, for reference"),
        ("CPU seconds, all nodes, during the round", f["cpu_s"],
         f"{f['cpu_s'] / (f['round_s'] * cpus):.0%} of {os.cpu_count()} CPUs;"
         f" event loops {f['loop_cpu_s']:.2f} s"),
        ("round if the CPUs were ours alone", f["cpu_floor_s"],
         "max(CPU s / CPUs, busiest event loop's CPU s)"),
        ("bytes moved / ideal", f["bytes_total"] / max(1, f["bytes_ideal_total"]),
         f"{f['bytes_total'] / MB:.0f} MB vs {f['bytes_ideal_total'] / MB:.0f} MB"),
        ("aggregate MB/s over all links", f["aggregate_MBps"], "bytes moved / round"),
    ]  # fmt: skip
    if base:
        rows += [
            ("loopback TCP MB/s (2 processes)", base["tcp"], "physical limit, one link"),
            ("our Noise+Yamux stream MB/s", base["ours"],
             f"{base['ours_cpu_MBps']:.0f} MB per CPU-s"),
        ]  # fmt: skip
    return rows


# ---------------------------------------------------------------- the JSON line

BREAKDOWN = (
    "encode_s",
    "encode_kernel_s",
    "encoder_build_s",
    "prepare_s",
    "gossip_delay_s",
    "transfer_s",
    "transfer_max_s",
    "copy_out_s",
    "reserve_s",
    "decode_s",
    "cpu_s",
    "loop_cpu_s",
)


def print_figures(run: dict[str, Any], result, figures, base, load) -> None:
    """The last line: `run` (benchmark, mode, peers, numel, codec, payload_bytes) + figures."""
    f = figures
    print_json(
        {
            **run,
            "round_s": round(f["round_s"], 3),
            "target_s": TARGET_S,
            "met": f["met"],
            "complete": f["complete"],
            "decoded_finite": f["decoded_finite"],
            "failures": len(f["failures"]),
            "cpu_floor_s": round(f["cpu_floor_s"], 3),
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
            "hivemind_s": HIVEMIND_S,
            "load_avg": [round(x, 2) for x in load],
            "cpus": os.cpu_count(),
        }
    )

"""benchmarks/update_round.py's command line, and the exchanges of one run side by side."""

from __future__ import annotations

import argparse
import sys

from _report import print_table


def arguments(doc: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--numel", type=int, default=100_000_000, help="floats per update")
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--mode", choices=("processes", "inproc"), default="processes")
    parser.add_argument(
        "--deadline", type=float, default=300.0, help="the round's deadline in seconds"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the TCP / single-stream baselines"
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="cProfile each node's event loop during the round"
    )
    parser.add_argument(
        "--aggregator", default="mean", help="the rule the nodes aggregate with (mean, flag, ...)"
    )
    parser.add_argument(
        "--exchange",
        choices=("gather", "sharded", "both"),
        default="gather",
        help="the update exchange: every member pulls every update, each owns a shard, or"
        " both one after the other in this run (one hivemind arm beside them)",
    )
    parser.add_argument(
        "--hivemind",
        nargs="?",
        const=sys.executable,
        metavar="PYTHON",
        help="also run hivemind's all-reduce of the same size (8-bit and fp32) with this"
        " interpreter (default: this one); it must import hivemind",
    )
    parser.add_argument("--hivemind-rounds", type=int, default=3)
    args = parser.parse_args()
    if args.peers < 2:
        parser.error("--peers must be at least 2")
    return args


def compare_arms(arms: dict) -> dict:
    """The exchanges side by side (printed as a table, and kept for the JSON line)."""
    rows, out = [], {}
    for exchange, (_, f) in arms.items():
        out[exchange] = {
            "round_s": round(f["round_s"], 3),
            "floor_ratio": round(f["round_s"] / f["compute_floor_s"], 3),
            "hivemind_8bit_ratio": round(f["hivemind_ratio"], 2),
            "bytes_total": f["bytes_total"],
            "same_theta": f["same_theta"],
        }
        rows.append([exchange, *out[exchange].values()])
    header = ["exchange", "round s", "x CPU floor", "hivemind 8-bit / ours", "bytes", "same θ"]
    print_table("the exchanges in this run", header, rows)
    return out

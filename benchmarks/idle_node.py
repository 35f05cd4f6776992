"""Memory of an idle daemon: RSS of `peertrain node start` with one connected peer.

Two daemons are started through the CLI as separate processes (exactly as a user would), the
second joined to the first. Once they see each other, the first is left idle for `--idle`
seconds and its memory is sampled a few times. For context, the same run also measures a bare
Python process and a bare `import libp2p` (py-libp2p 0.8.1 imports ~1250 modules at its top
level, most of them for features we never use; see node/net/slim_imports.py), and the same daemon
with that import guard turned off (PEERTRAIN_FULL_IMPORTS=1), to show what it saves, and with
`--metrics-listen` (issue 18: prometheus_client, the dashboard's history, scraped once).
Target (issue 2): idle daemon RSS ≤ 80 MiB, metrics off.

The module count comes from the peer daemon, started with PYTHONPROFILEIMPORTTIME (one log
line per imported module); the measured daemon runs without it so that nothing skews its
memory. Both run the same code, so they import the same modules.

    python benchmarks/idle_node.py [--idle 10] [--samples 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import psutil
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.node.net import slim_imports
from peertrain.testing import free_tcp_port, wait_until_sync

try:
    from benchmarks._report import print_json, print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table

MIB = 1024 * 1024
TARGET_MIB = 80.0
PEER_TIMEOUT = 10.0
DAEMONS = (  # (key, label, full imports, serve metrics); the last one is the figure of record
    ("daemon_full_imports", f"idle daemon, {slim_imports.DISABLE_ENV}=1", True, False),
    ("daemon_metrics", "idle daemon, --metrics-listen", False, True),
    ("daemon", "idle daemon, 1 peer", False, False),
)
BASELINES = {
    "bare python": "pass",
    "python + import libp2p": "import libp2p",
    "python + slim import libp2p": "from peertrain.node.net import slim_imports\n"
    "slim_imports.install()\nimport libp2p",
}


def sample_memory(pid: int, samples: int, interval: float = 1.0) -> dict[str, float]:
    """Median over `samples` readings of RSS, USS and the anon/file split, in MiB."""
    process = psutil.Process(pid)
    readings: list[dict[str, float]] = []
    for index in range(samples):
        if index:
            time.sleep(interval)
        full = process.memory_full_info()
        split = _rss_split(pid)
        readings.append({"rss": full.rss / MIB, "uss": full.uss / MIB, **split})
    return {key: statistics.median(r[key] for r in readings) for key in readings[0]} | {
        "rss_max": max(r["rss"] for r in readings)
    }


def _rss_split(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            out[key.lower().replace("rss", "rss_")] = int(value.split()[0]) / 1024
    return out


def baseline(code: str, samples: int) -> dict[str, float]:
    """Memory of `python -c code` once the code has run, while it sleeps."""
    script = f"{code}\nimport sys, time\nprint('ready', flush=True)\nsys.stdin.read()"
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        return sample_memory(process.pid, samples, interval=0.2)
    finally:
        process.kill()
        process.wait()


def imported_modules(log: Path) -> int:
    lines = log.read_text(errors="replace").splitlines()
    return sum(1 for line in lines if line.startswith("import time:")) - 1  # minus the header


def measure_daemon(
    base: Path, idle: float, samples: int, env: dict[str, str], *, metrics: bool = False
) -> tuple[dict[str, float], int]:
    """Memory of a daemon left idle with one peer, and how many modules the peer imported.
    With `metrics`, the measured daemon serves /metrics and is scraped once before it idles."""
    port = free_tcp_port()
    extra = ["--metrics-listen", f"127.0.0.1:{port}"] if metrics else []
    measured = DaemonProcess(base / "measured", node_args(extra=extra), env=env)
    peer = DaemonProcess(base / "peer", [], env={**env, "PYTHONPROFILEIMPORTTIME": "1"})
    daemons: Sequence[DaemonProcess] = (measured, peer)
    try:
        share = measured.start().wait_ready()["share"]
        peer.args = node_args(bootstrap=[share])
        peer_id = peer.start().wait_ready()["peer_id"]
        wait_until_sync(lambda: measured.status()["peers"] == [peer_id], timeout=PEER_TIMEOUT)
        if metrics:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
                assert b"peertrain_peers" in page.read()
        time.sleep(idle)
        # the peer is still there; a reachability re-check may show a dial-back probe's
        # throwaway identity beside it for a moment (it hangs up within 1 s)
        peers = measured.status()["peers"]
        assert measured.process is not None and peer_id in peers and len(peers) <= 2, (
            f"after {idle:.0f} s idle the daemon's peers are {peers}, not [{peer_id}]\n"
            + measured.log_tail()
        )
        return sample_memory(measured.process.pid, samples), imported_modules(peer.log_path)
    finally:
        codes = stop_all(daemons)
        if codes != [0, 0]:
            print(f"warning: daemon exit codes {codes}\n{measured.log_tail()}", file=sys.stderr)


def main(idle: float, samples: int) -> None:
    rows = []
    figures: dict[str, object] = {"benchmark": "idle_node", "idle_s": idle, "samples": samples}
    for name, code in BASELINES.items():
        memory = baseline(code, samples)
        rows.append((name, *_columns(memory), "-"))
        figures[_key(name)] = {k: round(v, 1) for k, v in memory.items()}
    for key, name, full, metrics in DAEMONS:
        with tempfile.TemporaryDirectory(prefix="peertrain-idle-") as tmp:
            env = {slim_imports.DISABLE_ENV: "1" if full else "0"}
            memory, modules = measure_daemon(Path(tmp), idle, samples, env, metrics=metrics)
        rows.append((name, *_columns(memory), modules))
        figures[key] = {k: round(v, 1) for k, v in memory.items()} | {"modules": modules}
    full_rss = figures["daemon_full_imports"]["rss"]  # type: ignore[index]
    figures["saved_by_slim_imports_mib"] = round(full_rss - memory["rss"], 1)
    metrics_rss = figures["daemon_metrics"]["rss"]  # type: ignore[index]
    figures["metrics_cost_mib"] = round(metrics_rss - memory["rss"], 1)
    figures["target_mib"] = TARGET_MIB
    figures["met"] = memory["rss_max"] <= TARGET_MIB
    print_table(
        f"memory after {idle:.0f} s idle (MiB, median of {samples})",
        ["process", "RSS", "USS", "RssAnon", "RssFile", "modules"],
        rows,
    )
    verdict = "met" if figures["met"] else "NOT met"
    print(
        f"idle daemon RSS {memory['rss']:.1f} MiB (max {memory['rss_max']:.1f}); "
        f"target <= {TARGET_MIB:.0f} MiB: {verdict}"
    )
    print_json(figures)


def _columns(memory: dict[str, float]) -> tuple[float, ...]:
    return memory["rss"], memory["uss"], memory["rss_anon"], memory["rss_file"]


def _key(name: str) -> str:
    return name.replace("python + ", "").replace(" ", "_")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--idle", type=float, default=10.0, help="seconds to leave the daemon idle")
    parser.add_argument("--samples", type=int, default=5, help="memory readings, 1 s apart")
    options = parser.parse_args()
    main(options.idle, options.samples)

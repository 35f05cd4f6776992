"""A joiner's state download: one state fetched from 1 donor and from several at once, each
donor and the joiner a process of its own with a real node on 127.0.0.1 (Noise + Yamux), the
path a DiLoCo member catching up takes (`fetch_tensor`: chunk ranges handed to one worker per
donor, every chunk checked against its digest).

The state is what a DiLoCo member serves: θ and the outer momentum in fp32, 8 bytes a
parameter (the 29.5 M-parameter `gpt-25m`: 236 MB, the default `--mib 225`). Arms run
round-robin, `--repeats` times each, a fresh download each time; the table gives the median
wall-clock MB/s and the joiner's CPU seconds. The anchor (issue 30): hivemind serves a joiner
from one donor at about 31 MB/s; the target is 200 MB/s with 3 donors on loopback.

    .venv/bin/python benchmarks/state_download.py [--mib 225] [--donors 3] [--repeats 3] [--busy]

`--busy`: each donor trains while it serves (torch on a worker thread beside its event loop, as
a member of a run does): what a restarted or late member meets in a run on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import trio

try:
    from benchmarks._report import print_json, print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table

MB = 1 << 20  # sizes in MiB; rates in MB/s (10^6 bytes), as the figures


def state(mib: int):
    """The same prepared fp32 tensor in every process (seeded), and its checksum."""
    from peertrain.protocol.tensors import prepare_tensor

    generator = torch.Generator().manual_seed(30)
    values = torch.randn(mib * MB // 4, generator=generator)
    return prepare_tensor("diloco/state", values, codec="fp32")


async def _node(home: Path, bootstrap: tuple[str, ...] = ()):
    from peertrain.node.api.serve import serve_node
    from peertrain.node.config import NodeConfig
    from peertrain.node.daemon import Daemon
    from peertrain.node.net.identity import Identity

    config = NodeConfig(home=home, listen=("/ip4/127.0.0.1/tcp/0",), bootstrap=bootstrap)
    return serve_node, Daemon(config, Identity.generate())


def compute(stop: threading.Event) -> None:
    """What a member does while it serves: torch on a worker thread, the event loop beside it
    (matrix products of a 512-wide transformer's shapes, on torch's one thread)."""
    x, w = torch.randn(512, 512), torch.randn(512, 2048)
    while not stop.is_set():
        (x @ w).relu_().sum()


async def donor(mib: int, busy: bool) -> None:
    """Serve the state until stdin closes; print our address and peer ID first. `busy`: train
    meanwhile, as a member of a run does (`compute`)."""
    from peertrain.node.services.tensors import TensorService, TensorStore

    prepared = state(mib)
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="donor-") as home:
        serve_node, daemon = await _node(Path(home))
        async with trio.open_nursery() as nursery:
            if busy:
                nursery.start_soon(lambda: trio.to_thread.run_sync(compute, stop))
            await nursery.start(serve_node, daemon)
            store = TensorStore()
            await nursery.start(TensorService(daemon.host, store, daemon.scoreboard).run)
            store.put(prepared, pin=True)
            print(json.dumps({"addr": daemon.addrs()[0], "peer": daemon.host.get_id().to_base58()}))
            sys.stdout.flush()
            await trio.to_thread.run_sync(sys.stdin.read)  # the parent closes it at the end
            stop.set()
            nursery.cancel_scope.cancel()


async def joiner(mib: int, donors: list[dict], arms: list[int], repeats: int) -> None:
    """Fetch the state from the first k donors for each k in `arms`, round-robin."""
    from libp2p.peer.id import ID
    from peertrain.node.services.tensor_fetch import fetch_tensor
    from peertrain.testing import wait_until

    checksum = state(mib).header.checksum
    results: dict[int, list[dict]] = {k: [] for k in arms}
    with tempfile.TemporaryDirectory(prefix="joiner-") as home:
        serve_node, daemon = await _node(Path(home), tuple(d["addr"] for d in donors))
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_node, daemon)
            ids = [ID.from_base58(d["peer"]) for d in donors]
            wanted = {d["peer"] for d in donors}
            await wait_until(lambda: wanted <= set(daemon.status()["peers"]), timeout=60)
            for _ in range(repeats):
                for k in arms:
                    cpu, wall = time.process_time(), time.perf_counter()
                    download = await fetch_tensor(
                        daemon.host, ids[:k], checksum, max_nbytes=mib * MB + (1 << 20)
                    )
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    nbytes = download.header.nbytes
                    results[k].append({"mb_per_s": nbytes / 1e6 / wall, "cpu_s": cpu, "s": wall})
                    del download
            nursery.cancel_scope.cancel()
    print(json.dumps({str(k): v for k, v in results.items()}))


def _spawn(role: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, __file__, "--role", role, *args]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=225, help="state size (225: gpt-25m's 236 MB)")
    parser.add_argument("--donors", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--busy", action="store_true", help="donors train while they serve, as in a run"
    )
    parser.add_argument("--role", choices=["main", "donor", "joiner"], default="main")
    parser.add_argument("--donor-info", default="[]", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    arms = sorted({1, args.donors})
    if args.role == "donor":
        trio.run(donor, args.mib, args.busy)
        return {}
    if args.role == "joiner":
        trio.run(joiner, args.mib, json.loads(args.donor_info), arms, args.repeats)
        return {}
    load = os.getloadavg()[0]
    busy = ["--busy"] if args.busy else []
    donors = [_spawn("donor", "--mib", str(args.mib), *busy) for _ in range(args.donors)]
    try:
        info = [json.loads(d.stdout.readline()) for d in donors]
        sizes = ["--mib", str(args.mib), "--donors", str(args.donors)]
        fetch = _spawn(
            "joiner", *sizes, "--repeats", str(args.repeats), "--donor-info", json.dumps(info)
        )
        out, _ = fetch.communicate(timeout=1800)
        results = json.loads(out.strip().splitlines()[-1])
    finally:
        for d in donors:
            d.stdin.close()
            d.wait(timeout=60)
    rows, figures = [], {}
    for k in arms:
        runs = results[str(k)]
        rate = statistics.median(r["mb_per_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        figures[f"donors_{k}_mb_per_s"] = round(rate, 1)
        rows.append((f"{k} donor(s)", f"{rate:.1f}", f"{cpu:.2f}", f"{args.mib * MB / 1e6:.0f}"))
    print_table("state download", ["arm", "MB/s (median)", "joiner CPU s", "MB"], rows)
    figures.update(mib=args.mib, repeats=args.repeats, load_before=round(load, 2),
                   load_after=round(os.getloadavg()[0], 2), target_mb_per_s=200,
                   donors_training=args.busy)  # fmt: skip
    print_json(figures)
    return figures


if __name__ == "__main__":
    main()

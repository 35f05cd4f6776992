"""One whole DiLoCo outer round: N real nodes encode, swap and apply int8 updates of 100M floats.

Issue 20's targets: the round within 1.3x its CPU floor, and 5x faster than hivemind's 8-bit
all-reduce of the same size measured alongside (`--hivemind PYTHON`; without it the user's
figure for 4 x 100M is printed, labelled as such). A member must end the round holding every
other member's update (Byzantine-robust aggregation needs all of them), so the round is an
all-gather: each node sends and receives (N-1) payloads, twice the bytes of an all-reduce.

The round, per node, from a common start: encode its Δ (int8 + error feedback, into the node's
recycled payload buffers), the update exchange, and `apply_contributions` (aggregate, outer
Nesterov step on θ_global); each received update is checked and measured as it arrives, in
the node's one torch thread, while the next is still on the wire (DiLoCoMember.admit). Every
node must end with the same θ ("same_theta"). The CPU floor is that compute alone, measured on
each node before the round, one node at a time, on warm buffers: max(one node's time, all
nodes' CPU seconds / CPUs).

What runs is the daemon's own path, nothing stubbed: real `Daemon`s (TCP + Noise + Yamux on
127.0.0.1, gossipsub, TensorService), `UpdateGossip.exchange` on every node at once, through
`open_update_exchange` (node/runs/update_exchange.py), which a DiLoCo session opens too
(`NodeTensors` + `UpdateTransport`: serve = `prepare_encoded` in a thread + `TensorStore.put`;
fetch = `fetch_tensor` from the holders; announcements on the run's gossip topic). The
payloads are real int8 + error-feedback encodings (`ErrorFeedbackEncoder(ProtocolCodec("int8"))`,
as `DiLoCoMember.prepare_update` makes them) of a different random delta per node. The
benchmark only wraps the transport with clocks (benchmarks/_update_round_node.py); figures and
tables are in benchmarks/_update_round_report.py.

Modes:
  processes  (default) one process per node, each with its own GIL and event loop, as nodes run
             in practice; the machine's cores are shared between them, and each node has one
             torch thread, as `peertrain swarm local` starts its daemons (DAEMON_ENV).
  inproc     the nodes of `peertrain.testing.open_test_swarm` in one trio loop: every byte's
             encryption, framing and hashing funnels through one Python thread.

Measured: round_s = from the common start until the last node has applied the round; per node
when its encode, exchange and apply ended, preparing (hashing) its own payload, and per fetched
payload: gossip delay (sender's announcement done -> pull starts), transfer
(`fetch_tensor`: header, chunks, per-chunk blake3 verify), the copy out to bytes, and serving it
again (copy + hash) as a holder. Bytes per link come from the kernel (`ss -ti` byte counters of
each TCP connection, before and after the round), so Noise/Yamux overhead and any duplicate
transfer show up; the ideal is one payload per direction of each link. The same run measures
plain loopback TCP and one Noise+Yamux stream of our host (benchmarks/stream.py's two-process
trial) with the payload's size: the physical and the single-link ceilings.

On a shared machine the wall-clock round falls with everyone else's load, so each node also
reports its CPU seconds during the round (all threads, and its event loop's alone); their sum
over the cores (or the busiest event loop, whichever is longer) is the round this code would
take with the machine to itself. Other programs on a shared loopback sometimes dial ports our
nodes happen to reuse; libp2p then logs failed streams, counted per round ("log_errors").

    python benchmarks/update_round.py [--numel 100000000] [--peers 4] [--mode processes|inproc]
                                      [--deadline 300] [--no-baseline] [--profile DIR]
                                      [--aggregator mean] [--exchange gather|sharded]
                                      [--hivemind [PYTHON]]
"""

from __future__ import annotations

import argparse
import gc
import logging
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its helper modules, run as a script
from _hivemind_allreduce import hivemind_arm  # noqa: E402
from _update_round_args import arguments, compare_arms  # noqa: E402
from _update_round_node import CODEC, SETUP_TIMEOUT, TALLY, BenchNode  # noqa: E402
from _update_round_report import (  # noqa: E402
    MB,
    analyse,
    judge,
    link_bytes,
    print_figures,
    report,
    tcp_counters,
)
from stream import trial as stream_trial  # noqa: E402


def _node_config(home: Path, bootstrap: Sequence[str]):
    from peertrain.node.config import NodeConfig

    return NodeConfig(
        home=home,
        listen=("/ip4/127.0.0.1/tcp/0",),
        bootstrap=tuple(bootstrap),
        reconnect_interval=0.2,
    )


# ---------------------------------------------------------------- processes mode


def node_process(
    index: int,
    numel: int,
    peers: int,
    home: str,
    conn,
    profile: str | None,
    aggregator: str,
    exchange: str = "gather",
) -> None:
    """Child: one daemon; commands from the parent over `conn` (see `run_processes`)."""
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger().addHandler(TALLY)
    # torch and the update gossip load before the roster, as a session's node has them when its
    # run starts: imported on the event loop while the others dial us, they stall the handshakes
    # for seconds, and a pubsub hello lost then leaves the mesh unformed (the setup never ends)
    import peertrain.swarm.exchange.gossip  # noqa: F401

    try:
        trio.run(_node_main, index, numel, peers, Path(home), conn, profile, aggregator, exchange)
    except BaseException as exc:  # noqa: BLE001 - a child process: the parent reports it
        import traceback

        conn.send({"error": f"node {index}: {exc!r}", "traceback": traceback.format_exc()[-4000:]})


async def _node_main(
    index: int,
    numel: int,
    peers: int,
    home: Path,
    conn,
    profile: str | None,
    aggregator: str,
    exchange: str = "gather",
) -> None:
    from peertrain.node.api.serve import serve_node
    from peertrain.node.daemon import Daemon
    from peertrain.node.net.host import connect, parse_peer_addr
    from peertrain.node.net.identity import Identity

    async with trio.open_nursery() as nursery:
        daemon = await nursery.start(
            serve_node, Daemon(_node_config(home, ()), Identity.generate())
        )
        node = BenchNode(daemon, numel, peers, aggregator, exchange)
        conn.send({"peer": node.me, "addr": daemon.addrs()[0], "port": node.listen_port()})
        roster = await _recv(conn)
        for addr in roster["addrs"][:index]:  # node i dials the nodes before it: one a pair
            await connect(daemon.host, parse_peer_addr(addr))
        async with node.joined(roster["members"], seed=index):
            await node.wait_connected()
            conn.send({"ready": True})
            while (command := await _recv(conn))["do"] != "stop":
                if command["do"] == "prepare":
                    await node.measure_floor()
                    conn.send(node.floor_times)
                elif command["do"] == "round":
                    await _one_round(node, index, conn, command, profile)
        nursery.cancel_scope.cancel()


async def _recv(conn) -> Any:
    return await trio.to_thread.run_sync(conn.recv)


async def _one_round(node: BenchNode, index: int, conn, command, profile: str | None) -> None:
    """The round, then (once everyone is done) this process's CPU and memory during it."""
    profiler = _profiler(profile)
    await trio.sleep(max(0.0, command["start_at"] - time.monotonic()))
    cpu0, loop0 = time.process_time(), time.thread_time()
    conn.send(await node.exchange(command["start_at"], command["deadline_s"]))
    await _recv(conn)  # everyone is done: what we spent serving the others counts too
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.path.join(profile, f"node{index}.prof"))
    conn.send(
        {
            "cpu_s": time.process_time() - cpu0,
            "loop_cpu_s": time.thread_time() - loop0,
            **TALLY.since(command["start_at"], node.members),
            "max_rss_MB": _max_rss_mb(),
            **(await node.digest()),
        }
    )


def _max_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _profiler(folder: str | None):
    if not folder:
        return None
    import cProfile

    os.makedirs(folder, exist_ok=True)
    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def run_processes(args: argparse.Namespace) -> dict[str, Any]:
    from peertrain.node.cli.local_swarm import DAEMON_ENV

    # the nodes share this machine's cores as `peertrain swarm local`'s daemons do, with its one
    # torch thread each: at torch's default (a thread per core, spinning while it waits) four
    # nodes on two cores spent 18 CPU s on a round whose work is 2 (9.2 s round, 1.7 s with one)
    os.environ.update(DAEMON_ENV)  # spawned children read it before they import torch
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="peertrain-bench-round-") as tmp:
        pipes, procs = [], []
        try:
            for index in range(args.peers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=node_process,
                    daemon=True,
                    args=(
                        index,
                        args.numel,
                        args.peers,
                        f"{tmp}/n{index}",
                        child,
                        args.profile,
                        args.aggregator,
                        args.exchange,
                    ),
                )
                proc.start()
                pipes.append(parent)
                procs.append(proc)
            return _drive_processes(pipes, args.deadline)
        finally:
            for proc in procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()


def _drive_processes(pipes: list, deadline_s: float) -> dict[str, Any]:
    """Roster, readiness, each node's compute floor one at a time, then the round on every
    node at once."""
    hello = [_get(p) for p in pipes]
    roster = {"addrs": [h["addr"] for h in hello], "members": [h["peer"] for h in hello]}
    for pipe in pipes:
        pipe.send(roster)
    for pipe in pipes:
        _get(pipe)
    for pipe in pipes:  # one at a time: the floor is measured without the others' load
        pipe.send({"do": "prepare"})
        _get(pipe, timeout=SETUP_TIMEOUT * 3)
    ports = {h["peer"]: h["port"] for h in hello}
    before = tcp_counters(set(ports.values()))
    start_at = time.monotonic() + 0.5
    for pipe in pipes:
        pipe.send({"do": "round", "start_at": start_at, "deadline_s": deadline_s})
    reports = [_get(p, timeout=deadline_s + 60) for p in pipes]
    after = tcp_counters(set(ports.values()))
    for pipe in pipes:
        pipe.send({"do": "finish"})
    for report_, pipe in zip(reports, pipes, strict=True):
        report_.update(_get(pipe))
        pipe.send({"do": "stop"})
    links = link_bytes(reports, ports, before, after)
    return {"reports": reports, "ports": ports, "links": links, "loops": len(reports)}


def _get(pipe, timeout: float = SETUP_TIMEOUT) -> dict[str, Any]:
    if not pipe.poll(timeout):
        raise TimeoutError(f"a node did not answer within {timeout:.0f} s")
    message = pipe.recv()
    if "error" in message:
        raise RuntimeError(f"{message['error']}\n{message.get('traceback', '')}")
    return message


# ---------------------------------------------------------------- in-process mode


async def run_inproc(args: argparse.Namespace) -> dict[str, Any]:
    from peertrain.testing import open_test_swarm, wait_until

    async with open_test_swarm(args.peers) as daemons, AsyncExitStack() as joined:
        await wait_until(
            lambda: all(len(d.host.get_connected_peers()) >= args.peers - 1 for d in daemons),
            timeout=SETUP_TIMEOUT,
        )
        nodes = [
            BenchNode(d, args.numel, args.peers, args.aggregator, args.exchange) for d in daemons
        ]
        members = {n.me for n in nodes}
        for index, node in enumerate(nodes):
            await joined.enter_async_context(node.joined(members, seed=index))
        for node in nodes:
            await node.wait_connected()
        for node in nodes:
            await node.measure_floor()
        ports = {n.me: n.listen_port() for n in nodes}
        before = tcp_counters(set(ports.values()))
        start_at = time.monotonic() + 0.5
        reports = await _inproc_round(nodes, start_at, args.deadline)
        after = tcp_counters(set(ports.values()))
        reports[0].update(TALLY.since(start_at, members))
        for node, report_ in zip(nodes, reports, strict=True):
            report_.update(await node.digest())
    links = link_bytes(reports, ports, before, after)
    return {"reports": reports, "ports": ports, "links": links, "loops": 1}


async def _inproc_round(
    nodes: list[BenchNode], start_at: float, deadline_s: float
) -> list[dict[str, Any]]:
    cpu0, loop0 = time.process_time(), time.thread_time()
    reports: list[dict[str, Any]] = [{}] * len(nodes)

    async def one(index: int) -> None:
        reports[index] = await nodes[index].exchange(start_at, deadline_s)

    async with trio.open_nursery() as round_nursery:
        for index in range(len(nodes)):
            round_nursery.start_soon(one, index)
    cpu, loop = time.process_time() - cpu0, time.thread_time() - loop0
    for report_ in reports:  # one process: its CPU shared out evenly
        report_["cpu_s"], report_["loop_cpu_s"] = cpu / len(reports), loop / len(reports)
        report_["max_rss_MB"] = _max_rss_mb()  # one process holds all the nodes
    return reports


# ---------------------------------------------------------------- main


def baseline(nbytes: int) -> dict[str, float]:
    """Loopback TCP and one Noise+Yamux stream of our host, two processes, the payload's size."""
    out = {}
    for arm in ("tcp", "ours"):
        run = stream_trial(arm, nbytes, 4 << 20, None)
        out[arm] = nbytes / run["seconds"] / MB
        out[f"{arm}_cpu_MBps"] = nbytes / max(run["rx_cpu"], run["tx_cpu"]) / MB
    return out


def main() -> None:
    args = arguments(__doc__)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger().addHandler(TALLY)
    from peertrain.swarm.exchange.codec import ProtocolCodec

    nbytes = ProtocolCodec(CODEC).payload_bytes(args.numel)
    load0 = os.getloadavg()[0]
    base = {} if args.no_baseline else baseline(nbytes)
    arms = {}
    for exchange in ("gather", "sharded") if args.exchange == "both" else (args.exchange,):
        args.exchange = exchange
        gc.collect()
        result = run_processes(args) if args.mode == "processes" else trio.run(run_inproc, args)
        arms[exchange] = (result, analyse(result, nbytes, args.peers))
    hivemind = hivemind_arm(
        args.hivemind, numel=args.numel, peers=args.peers, rounds=args.hivemind_rounds
    )
    load = (load0, os.getloadavg()[0])
    for exchange, (result, figures) in arms.items():
        judge(figures, hivemind)
        title = (
            f"nodes ({args.mode}; {args.peers} x {args.numel:,} floats, {CODEC}:"
            f" {nbytes / MB:.1f} MB each; aggregator {args.aggregator}; exchange {exchange})"
        )
        report(title, result, figures, base, load, nbytes, hivemind)
    run = {"benchmark": "update_round", "mode": args.mode, "peers": args.peers}
    run |= {"numel": args.numel, "codec": CODEC, "payload_bytes": nbytes}
    run |= {"aggregator": args.aggregator, "exchange": exchange}
    if len(arms) > 1:
        run |= {"arms": compare_arms(arms)}
    print_figures(run, result, figures, base, load, hivemind)


if __name__ == "__main__":
    main()

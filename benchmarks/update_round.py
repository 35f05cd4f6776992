"""One DiLoCo outer-update round: N real nodes swap int8 updates of 100M floats by update gossip.

Issue 7's target: one round for 4 peers x 100M floats with int8 in <= 2 s (hivemind's all-reduce
of the same size takes 6.3 s in fp32 and 4.8 s in 8-bit on this machine). A member must end the
round holding every other member's update (Byzantine-robust aggregation needs all of them), so
the round is an all-gather: each node sends and receives (N-1) payloads.

What runs is the daemon's own path, nothing stubbed: real `Daemon`s (TCP + Noise + Yamux on
127.0.0.1, gossipsub, TensorService), `UpdateGossip.exchange` on every node at once, through the
transport the daemon builds in node/runs/session.py (`NodeTensors` + `_UpdateTransport`: serve =
`prepare_encoded` in a thread + `TensorStore.put`; fetch = `fetch_tensor` from the holders;
announcements on the node's gossip topic). The payloads are real int8 + error-feedback encodings
(`ErrorFeedbackEncoder(ProtocolCodec("int8"))`, as `DiLoCoMember.prepare_update` makes them) of
a different random delta per node. The benchmark only wraps the transport with clocks.

Modes:
  processes  (default) one process per node, each with its own GIL and event loop, as nodes run
             in practice; the machine's cores are shared between them.
  inproc     the nodes of `peertrain.testing.open_test_swarm` in one trio loop: every byte's
             encryption, framing and hashing funnels through one Python thread.

Measured: round_s = from the common start until the last node has all N payloads; per node the
encode time (done one node at a time, before the round), preparing (hashing) its own payload,
and per fetched payload: gossip delay (sender's announcement done -> pull starts), transfer
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
"""

from __future__ import annotations

import argparse
import gc
import logging
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

try:
    from benchmarks._report import print_json, print_table
    from benchmarks.stream import trial as stream_trial
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table
    from stream import trial as stream_trial

from peertrain.node.runs.session import NodeTensors, _UpdateTransport

RUN_ID = "bench-update-round"
TOPIC = f"/peertrain/{RUN_ID}/updates"
CODEC = "int8"
TARGET_S = 2.0
HIVEMIND_S = {"fp32": 6.3, "8bit": 4.8}
SETUP_TIMEOUT = 120.0
MB = 1e6


class LogTally(logging.Handler):
    """Counts error records (libp2p logs failed streams there) and the foreign peers they name:
    other programs on this shared loopback sometimes dial ports our nodes reuse."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < 1000:
            self.records.append((time.monotonic(), record.getMessage()))

    def since(self, start: float, ours: set[str]) -> dict[str, Any]:
        texts = [text for at, text in self.records if at >= start]
        named = {m for t in texts for m in re.findall(r"12D3KooW[1-9A-HJ-NP-Za-km-z]+", t)}
        return {"log_errors": len(texts), "foreign_peers": sorted(named - ours)}


TALLY = LogTally()


# ---------------------------------------------------------------- clocks around the real transport


class TimedTensors(NodeTensors):
    """The daemon's NodeTensors; `fetch` (= fetch_tensor from the holders) is timed."""

    events: list[dict[str, Any]]
    origin: float

    async def fetch(self, holders, checksum: bytes, max_nbytes: int, **options: Any):
        t0 = time.monotonic()
        download = await super().fetch(holders, checksum, max_nbytes, **options)
        self.events.append(
            {
                "op": "transfer",
                "checksum": checksum.hex(),
                "holders": len(holders),
                "t0": t0 - self.origin,
                "t1": time.monotonic() - self.origin,
                "nbytes": download.header.nbytes,
            }
        )
        return download


class TimedTransport(_UpdateTransport):
    """The daemon's `_UpdateTransport`, recording when each serve / fetch / publish ran."""

    def __init__(self, tensors: TimedTensors):
        super().__init__(tensors)
        self.events = tensors.events = []
        self.origin = tensors.origin = time.monotonic()

    def start_clock(self, origin: float) -> None:
        self.origin = self.tensors.origin = origin

    async def _timed(self, op: str, call, **fields: Any):
        t0 = time.monotonic()
        try:
            result = await call
        except BaseException as exc:
            self.events.append(
                {
                    "op": op,
                    "t0": t0 - self.origin,
                    "t1": time.monotonic() - self.origin,
                    "error": repr(exc)[:300],
                    **fields,
                }
            )
            raise
        self.events.append(
            {"op": op, "t0": t0 - self.origin, "t1": time.monotonic() - self.origin, **fields}
        )
        return result

    async def publish(self, data: bytes) -> None:
        await self._timed("publish", super().publish(data))

    async def serve(self, owner: str, payload: bytes) -> bytes:
        checksum = await self._timed("serve", super().serve(owner, payload), owner=owner)
        self.events[-1]["checksum"] = checksum.hex()
        return checksum

    async def fetch(self, holders, checksum: bytes, nbytes: int) -> bytes:
        return await self._timed(
            "fetch",
            super().fetch(holders, checksum, nbytes),
            checksum=checksum.hex(),
            holders=len(holders),
        )


# ---------------------------------------------------------------- one node's part


def encode_update(numel: int, seed: int) -> tuple[bytes, float]:
    """A random pseudo-gradient, int8 + error feedback encoded as a member does; (payload, s)."""
    import torch
    from peertrain.swarm.diloco.compression import ErrorFeedbackEncoder, ProtocolCodec

    delta = torch.randn(numel, generator=torch.Generator().manual_seed(seed)).mul_(1e-3)
    encoder = ErrorFeedbackEncoder(ProtocolCodec(CODEC), numel)
    t0 = time.perf_counter()
    payload = encoder.encode(delta)
    return payload, time.perf_counter() - t0


def decode_check(payload: bytes, numel: int) -> tuple[float, bool]:
    """Decode one received update as aggregation will; (seconds, all values finite)."""
    import torch
    from peertrain.swarm.diloco.compression import ProtocolCodec

    t0 = time.perf_counter()
    values = ProtocolCodec(CODEC).decode(payload, numel)
    return time.perf_counter() - t0, bool(torch.isfinite(values).all())


class BenchNode:
    """One daemon with the run's update topic and an UpdateGossip on the daemon's transport."""

    def __init__(self, daemon, numel: int, peers: int):
        from peertrain.protocol.int8_blockwise import DEFAULT_BLOCK_SIZE
        from peertrain.swarm.diloco.compression import ProtocolCodec
        from peertrain.swarm.diloco.update_gossip import UpdateGossip

        self.daemon, self.numel, self.peers = daemon, numel, peers
        self.me = daemon.identity.peer_id.to_base58()
        self.members: set[str] = {self.me}
        self.tensors = tensors = TimedTensors(
            daemon, TOPIC, codec=CODEC, block_size=DEFAULT_BLOCK_SIZE, numel=numel
        )
        self.transport = TimedTransport(tensors)
        self.gossip = UpdateGossip(
            run_id=RUN_ID,
            key_pair=daemon.identity.key_pair,
            transport=self.transport,
            expected_nbytes=ProtocolCodec(CODEC).payload_bytes(numel),
            is_member=lambda peer: True,
            expected=lambda round_: set(self.members),
        )
        self.payload: bytes | None = None
        self.encode_s = 0.0

    def listen_port(self) -> int:
        return int(re.search(r"/tcp/(\d+)", self.daemon.addrs()[0]).group(1))

    async def join(self, nursery: trio.Nursery, members: set[str]) -> None:
        self.members = set(members)
        inbox = await self.daemon.gossip.subscribe(TOPIC, validator=self.gossip.validate)
        nursery.start_soon(_drain, inbox)  # announcements act in the validator, as in RunSession
        # as RunSession does when a run starts (it overlaps the first inner steps there)
        nbytes = self.gossip.expected_nbytes
        await self.tensors.reserve_receive_buffers(len(members) - 1, nbytes)

    async def wait_connected(self) -> None:
        # an announcement published before the gossipsub mesh forms (next heartbeat) is lost
        from peertrain.testing import wait_until

        gossip, want = self.daemon.gossip, min(self.peers - 1, 4)
        await wait_until(
            lambda: (
                len(gossip.topic_peers(TOPIC)) >= self.peers - 1
                and len(gossip.router.mesh.get(TOPIC, ())) >= want
            ),
            timeout=SETUP_TIMEOUT,
        )

    async def encode(self, seed: int) -> None:
        self.payload, self.encode_s = await trio.to_thread.run_sync(encode_update, self.numel, seed)

    async def exchange(self, start_at: float, deadline_s: float) -> dict[str, Any]:
        await trio.sleep(max(0.0, start_at - time.monotonic()))
        self.transport.start_clock(start_at)
        payload, self.payload = self.payload, None
        contributions = await self.gossip.exchange(
            0, payload, deadline=trio.current_time() + deadline_s
        )
        done = time.monotonic() - start_at
        self.received = {c.sender: c.payload for c in contributions}
        return {
            "peer": self.me,
            "done_s": done,
            "got": len(contributions),
            "encode_s": self.encode_s,
            "events": list(self.transport.events),
            "bytes_fetched": self.gossip.bytes_fetched,
            "rejected": self.gossip.rejected,
            "missing": sorted(self.members - set(self.received)),
            "links": self.remote_ports(),
        }

    async def check_one(self) -> dict[str, Any]:
        other = next((p for s, p in self.received.items() if s != self.me), None)
        self.received = {}
        if other is None:
            return {}
        seconds, finite = await trio.to_thread.run_sync(decode_check, other, self.numel)
        return {"decode_s": seconds, "decoded_finite": finite}

    def remote_ports(self) -> dict[str, list[int]]:
        """peer -> remote TCP ports of our connections to it (to name the kernel's sockets)."""
        out: dict[str, list[int]] = {}
        for peer, conns in self.daemon.host.get_network().connections.items():
            for conn in conns:
                addr = conn.muxed_conn.get_remote_address()
                if addr:
                    out.setdefault(peer.to_base58(), []).append(int(addr[1]))
        return out


async def _drain(inbox: trio.MemoryReceiveChannel) -> None:
    async for _ in inbox:
        pass


def _node_config(home: Path, bootstrap: Sequence[str]):
    from peertrain.node.config import NodeConfig

    return NodeConfig(
        home=home,
        listen=("/ip4/127.0.0.1/tcp/0",),
        bootstrap=tuple(bootstrap),
        reconnect_interval=0.2,
    )


# ---------------------------------------------------------------- processes mode


def node_process(index: int, numel: int, peers: int, home: str, conn, profile: str | None) -> None:
    """Child: one daemon; commands from the parent over `conn` (see `run_processes`)."""
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger().addHandler(TALLY)
    try:
        trio.run(_node_main, index, numel, peers, Path(home), conn, profile)
    except BaseException as exc:  # noqa: BLE001 - a child process: the parent reports it
        import traceback

        conn.send({"error": f"node {index}: {exc!r}", "traceback": traceback.format_exc()[-4000:]})


async def _node_main(
    index: int, numel: int, peers: int, home: Path, conn, profile: str | None
) -> None:
    from peertrain.node.api.serve import serve_node
    from peertrain.node.daemon import Daemon
    from peertrain.node.net.host import connect, parse_peer_addr
    from peertrain.node.net.identity import Identity

    async def recv() -> Any:
        return await trio.to_thread.run_sync(conn.recv)

    async with trio.open_nursery() as nursery:
        daemon = await nursery.start(serve_node, Daemon(_node_config(home, ()), Identity.generate()))
        node = BenchNode(daemon, numel, peers)
        conn.send({"peer": node.me, "addr": daemon.addrs()[0], "port": node.listen_port()})
        roster = await recv()
        for addr in roster["addrs"][
            :index
        ]:  # node i dials the nodes before it: one connection a pair
            await connect(daemon.host, parse_peer_addr(addr))
        await node.join(nursery, set(roster["members"]))
        await node.wait_connected()
        conn.send({"ready": True})
        while (command := await recv())["do"] != "stop":
            if command["do"] == "encode":
                await node.encode(seed=index)
                conn.send({"encode_s": node.encode_s, "nbytes": len(node.payload)})
            elif command["do"] == "round":
                profiler = _profiler(profile)
                await trio.sleep(max(0.0, command["start_at"] - time.monotonic()))
                cpu0, loop0 = time.process_time(), time.thread_time()
                report = await node.exchange(command["start_at"], command["deadline_s"])
                conn.send(report)
                await recv()  # everyone is done: what we spent serving the others counts too
                if profiler is not None:
                    profiler.disable()
                    profiler.dump_stats(os.path.join(profile, f"node{index}.prof"))
                conn.send(
                    {
                        "cpu_s": time.process_time() - cpu0,
                        "loop_cpu_s": time.thread_time() - loop0,
                        **TALLY.since(command["start_at"], node.members),
                        "max_rss_MB": _max_rss_mb(),
                        **(await node.check_one() if index == 0 else {}),
                    }
                )
        nursery.cancel_scope.cancel()


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
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="peertrain-bench-round-") as tmp:
        pipes, procs = [], []
        try:
            for index in range(args.peers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=node_process,
                    daemon=True,
                    args=(index, args.numel, args.peers, f"{tmp}/n{index}", child, args.profile),
                )
                proc.start()
                pipes.append(parent)
                procs.append(proc)
            hello = [_get(p) for p in pipes]
            roster = {"addrs": [h["addr"] for h in hello], "members": [h["peer"] for h in hello]}
            for pipe in pipes:
                pipe.send(roster)
            for pipe in pipes:
                _get(pipe)
            encodes = []
            for pipe in pipes:  # one at a time: encoding is measured without the others' load
                pipe.send({"do": "encode"})
                encodes.append(_get(pipe))
            ports = {h["port"] for h in hello}
            before = tcp_counters(ports)
            start_at = time.monotonic() + 0.5
            for pipe in pipes:
                pipe.send({"do": "round", "start_at": start_at, "deadline_s": args.deadline})
            reports = [_get(p, timeout=args.deadline + 60) for p in pipes]
            after = tcp_counters(ports)
            for pipe in pipes:
                pipe.send({"do": "finish"})
            for report, pipe in zip(reports, pipes, strict=True):
                report.update(_get(pipe))
                pipe.send({"do": "stop"})
            return {
                "reports": reports,
                "ports": {h["peer"]: h["port"] for h in hello},
                "links": link_bytes(reports, {h["peer"]: h["port"] for h in hello}, before, after),
                "loops": len(reports),
            }
        finally:
            for proc in procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()


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

    async with open_test_swarm(args.peers) as daemons, trio.open_nursery() as nursery:
        await wait_until(
            lambda: all(len(d.host.get_connected_peers()) >= args.peers - 1 for d in daemons),
            timeout=SETUP_TIMEOUT,
        )
        nodes = [BenchNode(d, args.numel, args.peers) for d in daemons]
        members = {n.me for n in nodes}
        for node in nodes:
            await node.join(nursery, members)
        for node in nodes:
            await node.wait_connected()
        for index, node in enumerate(nodes):
            await node.encode(seed=index)
        ports = {n.me: n.listen_port() for n in nodes}
        before = tcp_counters(set(ports.values()))
        start_at = time.monotonic() + 0.5
        cpu0, loop0 = time.process_time(), time.thread_time()
        reports: list[dict[str, Any]] = [{}] * len(nodes)

        async def one(index: int) -> None:
            reports[index] = await nodes[index].exchange(start_at, args.deadline)

        async with trio.open_nursery() as round_nursery:
            for index in range(len(nodes)):
                round_nursery.start_soon(one, index)
        after = tcp_counters(set(ports.values()))
        cpu, loop = time.process_time() - cpu0, time.thread_time() - loop0
        for report in reports:  # one process: its CPU shared out evenly
            report["cpu_s"], report["loop_cpu_s"] = cpu / len(reports), loop / len(reports)
        reports[0].update(TALLY.since(start_at, members))
        for report in reports:
            report["max_rss_MB"] = _max_rss_mb()  # one process holds all the nodes
        reports[0].update(await nodes[0].check_one())
        for node in nodes[1:]:
            node.received = {}
        nursery.cancel_scope.cancel()
    links = link_bytes(reports, ports, before, after)
    return {"reports": reports, "ports": ports, "links": links, "loops": 1}


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


def analyse(result: dict[str, Any], nbytes: int, peers: int) -> dict[str, Any]:
    reports = result["reports"]
    owner_of: dict[str, str] = {}
    announced: dict[str, float] = {}
    prepare: list[float] = []
    for r in reports:
        serves = [e for e in r["events"] if e["op"] == "serve"]
        own = next(e for e in serves if e["owner"] == r["peer"])
        owner_of[own["checksum"]] = r["peer"]
        prepare.append(own["t1"] - own["t0"])
        publish = next(e for e in r["events"] if e["op"] == "publish")
        announced[r["peer"]] = publish["t1"]
    pulls = []
    for r in reports:
        ev = r["events"]
        for fetch in (e for e in ev if e["op"] == "fetch" and "error" not in e):
            transfer = next(
                e for e in ev if e["op"] == "transfer" and e["checksum"] == fetch["checksum"]
            )
            # a fetched payload is served on as verified, without a second serve (0 s)
            reserve = next(
                (e for e in ev if e["op"] == "serve" and e.get("checksum") == fetch["checksum"]),
                {"t0": 0.0, "t1": 0.0},
            )
            sender = owner_of.get(fetch["checksum"], "?")
            pulls.append(
                {
                    "node": r["peer"],
                    "sender": sender,
                    "holders": fetch["holders"],
                    "gossip_delay_s": fetch["t0"] - announced.get(sender, 0.0),
                    "start_s": fetch["t0"],
                    "transfer_s": transfer["t1"] - transfer["t0"],
                    "copy_out_s": fetch["t1"] - transfer["t1"],
                    "reserve_s": reserve["t1"] - reserve["t0"],
                    "in_at_s": fetch["t1"],
                    "MBps": transfer["nbytes"] / MB / max(1e-9, transfer["t1"] - transfer["t0"]),
                }
            )
    failures = [dict(node=r["peer"], **e) for r in reports for e in r["events"] if "error" in e]
    ideal = nbytes
    links = result["links"]
    round_s = max(r["done_s"] for r in reports)
    complete = all(r["got"] == peers and not r["missing"] for r in reports)
    moved = sum(link["bytes"] for link in links)
    cpu = sum(r.get("cpu_s", 0.0) for r in reports)
    loop_cpu = sum(r.get("loop_cpu_s", 0.0) for r in reports)
    foreign = sorted({p for r in reports for p in r.get("foreign_peers", ())})

    def med(key: str) -> float:
        return statistics.median(p[key] for p in pulls) if pulls else float("nan")

    return {
        "round_s": round_s,
        "complete": complete,
        "pulls": pulls,
        "failures": failures,
        "prepare_s": statistics.median(prepare),
        "encode_s": statistics.median(r["encode_s"] for r in reports),
        "gossip_delay_s": med("gossip_delay_s"),
        "transfer_s": med("transfer_s"),
        "transfer_max_s": max((p["transfer_s"] for p in pulls), default=float("nan")),
        "copy_out_s": med("copy_out_s"),
        "reserve_s": med("reserve_s"),
        "bytes_total": moved,
        "bytes_ideal_total": ideal * peers * (peers - 1),
        "link_max_bytes": max((link["bytes"] for link in links), default=0),
        "link_min_bytes": min((link["bytes"] for link in links), default=0),
        "link_ideal_bytes": ideal,
        "cpu_s": cpu,
        # the CPU-bound floor: all our CPU spread over the cores, but no faster than the
        # busiest event loop (one thread each) allows
        "cpu_floor_s": max(
            cpu / (os.cpu_count() or 1),
            loop_cpu if result["loops"] == 1 else max(r.get("loop_cpu_s", 0.0) for r in reports),
        ),
        "loop_cpu_s": loop_cpu,
        "log_errors": sum(r.get("log_errors", 0) for r in reports),
        "foreign_peers": foreign,
        "decode_s": reports[0].get("decode_s"),
        "decoded_finite": reports[0].get("decoded_finite"),
        "aggregate_MBps": moved / MB / round_s if round_s else 0.0,
    }


def baseline(nbytes: int) -> dict[str, float]:
    """Loopback TCP and one Noise+Yamux stream of our host, two processes, the payload's size."""
    out = {}
    for arm in ("tcp", "ours"):
        run = stream_trial(arm, nbytes, 4 << 20, None)
        out[arm] = nbytes / run["seconds"] / MB
        out[f"{arm}_cpu_MBps"] = nbytes / max(run["rx_cpu"], run["tx_cpu"]) / MB
    return out


def report(
    args: argparse.Namespace,
    result: dict[str, Any],
    figures: dict[str, Any],
    base: dict[str, float],
    load: tuple[float, float],
    nbytes: int,
) -> None:
    names = {r["peer"]: f"n{i}" for i, r in enumerate(result["reports"])}
    rows = [
        (
            names[r["peer"]],
            r["peer"][-8:],
            r["encode_s"],
            next(
                e["t1"] - e["t0"]
                for e in r["events"]
                if e["op"] == "serve" and e.get("owner") == r["peer"]
            ),
            r["got"],
            r["done_s"],
            r.get("cpu_s", 0.0),
            r.get("loop_cpu_s", 0.0),
            r.get("max_rss_MB", 0.0),
        )
        for r in result["reports"]
    ]
    print_table(
        f"nodes ({args.mode}; {args.peers} x {args.numel:,} floats,"
        f" {CODEC}: {nbytes / MB:.1f} MB each)",
        [
            "node",
            "peer ID ends",
            "encode s",
            "prepare own s",
            "payloads",
            "all in at s",
            "CPU s in round",
            "of it event loop",
            "peak RSS MB",
        ],
        rows,
    )
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
        for p in sorted(figures["pulls"], key=lambda p: (p["node"], p["start_s"]))
    ]
    print_table(
        "pulls (seconds from the common start)",
        [
            "node",
            "from",
            "holders",
            "starts",
            "gossip delay",
            "transfer s",
            "MB/s",
            "copy out s",
            "re-serve s",
            "in at",
        ],
        rows,
    )
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
    f = figures
    rows = [
        (
            "round (all nodes hold all payloads)",
            f["round_s"],
            f"target {TARGET_S} s: {'met' if f['met'] else 'NOT met'}",
        ),
        (
            "encode own update (int8 + error feedback)",
            f["encode_s"],
            "before the round, one node at a time",
        ),
        ("prepare own payload (copy + blake3)", f["prepare_s"], "median node"),
        ("gossip delay (announced -> pull starts)", f["gossip_delay_s"], "median pull"),
        (
            "transfer one payload (fetch_tensor)",
            f["transfer_s"],
            f"median; max {f['transfer_max_s']:.2f} s",
        ),
        ("copy out to bytes", f["copy_out_s"], "median pull"),
        ("re-serve as holder (copy + blake3)", f["reserve_s"], "median pull"),
        (
            "decode one payload (after the round)",
            f["decode_s"] or float("nan"),
            "node 0, for reference",
        ),
        (
            "CPU seconds, all nodes, during the round",
            f["cpu_s"],
            f"{f['cpu_s'] / (f['round_s'] * (os.cpu_count() or 1)):.0%} of {os.cpu_count()} CPUs;"
            f" event loops {f['loop_cpu_s']:.2f} s",
        ),
        (
            "round if the CPUs were ours alone",
            f["cpu_floor_s"],
            "max(CPU s / CPUs, busiest event loop's CPU s)",
        ),
        (
            "bytes moved / ideal",
            f["bytes_total"] / max(1, f["bytes_ideal_total"]),
            f"{f['bytes_total'] / MB:.0f} MB vs {f['bytes_ideal_total'] / MB:.0f} MB",
        ),
        ("aggregate MB/s over all links", f["aggregate_MBps"], "bytes moved / round"),
    ]
    if base:
        rows += [
            ("loopback TCP MB/s (2 processes)", base["tcp"], "physical limit, one link"),
            (
                "our Noise+Yamux stream MB/s",
                base["ours"],
                f"{base['ours_cpu_MBps']:.0f} MB per CPU-s",
            ),
        ]
    print_table("summary", ["what", "value", "note"], rows)
    hivemind = f"{HIVEMIND_S['fp32']} s fp32, {HIVEMIND_S['8bit']} s 8-bit"
    print(f"hivemind all-reduce, same size, this machine: {hivemind}")
    print(f"load average {load[0]:.2f} -> {load[1]:.2f} on {os.cpu_count()} CPUs")
    if f["log_errors"]:
        print(
            f"libp2p logged {f['log_errors']} errors during the round; foreign peers named:"
            f" {len(f['foreign_peers'])} (other programs on this loopback dialling our ports)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
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
    args = parser.parse_args()
    if args.peers < 2:
        parser.error("--peers must be at least 2")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger().addHandler(TALLY)
    from peertrain.swarm.diloco.compression import ProtocolCodec

    nbytes = ProtocolCodec(CODEC).payload_bytes(args.numel)
    load0 = os.getloadavg()[0]
    base = {} if args.no_baseline else baseline(nbytes)
    gc.collect()
    result = run_processes(args) if args.mode == "processes" else trio.run(run_inproc, args)
    figures = analyse(result, nbytes, args.peers)
    figures["met"] = bool(figures["complete"] and figures["round_s"] <= TARGET_S)
    load = (load0, os.getloadavg()[0])
    report(args, result, figures, base, load, nbytes)
    print_json(
        {
            "benchmark": "update_round",
            "mode": args.mode,
            "peers": args.peers,
            "numel": args.numel,
            "codec": CODEC,
            "payload_bytes": nbytes,
            "round_s": round(figures["round_s"], 3),
            "target_s": TARGET_S,
            "met": figures["met"],
            "complete": figures["complete"],
            "decoded_finite": figures["decoded_finite"],
            "failures": len(figures["failures"]),
            "cpu_floor_s": round(figures["cpu_floor_s"], 3),
            "log_errors": figures["log_errors"],
            "foreign_peers": len(figures["foreign_peers"]),
            "max_rss_MB": round(max(r.get("max_rss_MB", 0.0) for r in result["reports"])),
            "breakdown": {
                k: None if figures[k] is None else round(figures[k], 4)
                for k in (
                    "encode_s",
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
            },
            "tcp_MBps": round(base["tcp"], 1) if base else None,
            "stream_MBps": round(base["ours"], 1) if base else None,
            "aggregate_MBps": round(figures["aggregate_MBps"], 1),
            "bytes_per_link": {
                "ideal": figures["link_ideal_bytes"],
                "min": figures["link_min_bytes"],
                "max": figures["link_max_bytes"],
                "total": figures["bytes_total"],
                "ideal_total": figures["bytes_ideal_total"],
            },
            "hivemind_s": HIVEMIND_S,
            "load_avg": [round(x, 2) for x in load],
            "cpus": os.cpu_count(),
        }
    )


if __name__ == "__main__":
    main()

"""A stage server in a SWARM run: serves one slice of the model over `/peertrain/pipeline/1.0.0`.

What it does, each piece from swarm/pipeline/:

- **serve** forward / backward / loss_backward (`StageServer`, recompute-on-backward, so any
  server of a stage may take any microbatch's backward), one call at a time in arrival order,
  torch in a worker thread. With `base_seconds` > 0 every call is padded to
  `base_seconds · work / speed` (testing: heterogeneous servers on one machine);
- **measure** its own throughput (bias-corrected EMA of forward-equivalent samples per second of
  service time, queueing excluded) and **announce** (stage, throughput) in RunState
  every few seconds with a short lease, and in the DHT stage key;
- **average** within the stage over the network and step (`StageAverager`: numbered rounds,
  all-gather of sample-weighted gradient sums among the stage's live servers), and **repair
  drift**: a copy whose state checksum loses to the stage's majority re-syncs from a winner
  (node/runs/pipeline_drift.py; `resyncs` in the status);
- **rebalance**: every `rebalance_period`, evaluate `plan_move` on the RunState view at the
  middle of the period (peers' clocks agree on the period index there), unless that view changed
  since the previous period (not settled yet: skip) or a trainer is measuring the static
  baseline; the mover downloads its new stage's state (parameters + Adam moments + round) from
  a server of that stage, then switches and re-announces. A joiner takes the stage with the most
  need, the same way.

Remote misbehaviour never stops the server: a request for a run or stage we do not serve is
refused (`ErrorResponse`, small penalty: an honest trainer may lag a move by a second); an
undecodable, oversized, non-finite or mis-shaped tensor, or a forged digest, is refused with a
penalty (`PeerScoreboard`), and the server goes on.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import torch
import trio
from libp2p.abc import INetStream
from peertrain.dht import stage_key
from peertrain.protocol.errors import DecodeError, PeertrainError, ProtocolError
from peertrain.protocol.framing import read_message, write_message
from peertrain.protocol.messages import ErrorCode, ErrorResponse, Request
from peertrain.swarm.pipeline.averaging import StageAverager
from peertrain.swarm.pipeline.boundary import pack
from peertrain.swarm.pipeline.membership import in_static_phase, server_role, servers, stage_views
from peertrain.swarm.pipeline.migration import import_state
from peertrain.swarm.pipeline.rebalance import plan_move, stage_for_new_peer
from peertrain.swarm.pipeline.run_spec import PipelineSpec
from peertrain.swarm.pipeline.slices import mlp_stage_module
from peertrain.swarm.pipeline.stage import StageServer
from peertrain.swarm.pipeline.wiring import BACKWARD_COST, ThroughputEMA

from ..net.penalties import is_misbehaviour
from ..net.rpc import refuse
from ..net.stream_limits import StreamSlots
from .pipeline_drift import StagePeerTransport, answer_gradients, answer_state, stage_averager
from .pipeline_wire import (
    MAX_BOUNDARY_BYTES,
    PIPELINE,
    GradientsRequest,
    StageCall,
    StageReply,
    StateRequest,
    boundary_of,
    prepare_boundary,
    read_payloads,
    write_payloads,
)

if TYPE_CHECKING:
    from .context import RunContext

log = logging.getLogger(__name__)

LEASE_MS = 10_000
ANNOUNCE_EVERY = 3.0
DHT_EVERY = 10.0
WRONG_STAGE = 101  # ErrorResponse code: the server serves another stage (it may just have moved)
BAD_INPUT_PENALTY = 25.0
WRONG_STAGE_PENALTY = 1.0
IDLE_TIMEOUT = 10.0
FIRST_CLAIM_WAIT = 5.0  # a joiner waits this long for a first server claim before choosing


class PipelineServer:
    """This node's stage server in one run. `await nursery.start(server.run)`."""

    def __init__(
        self,
        context: RunContext,
        spec: PipelineSpec,
        *,
        speed: float = 1.0,
        stage: int | None = None,
    ) -> None:
        if speed <= 0:
            raise ValueError("a server's speed must be positive")
        self.context, self.spec, self.speed = context, spec, speed
        self.node = context.node
        self.me = self.node.identity.peer_id.to_base58()
        self.transport = StagePeerTransport(self.node.host, context.run_id, timeout=20.0)
        self.stage = -1  # none until `run` has chosen one and fetched its state
        self._wanted = stage
        self.server: StageServer | None = None
        self.averager: StageAverager | None = None
        self._ema = ThroughputEMA(beta=0.9)
        self._serve = trio.Lock()  # one call at a time, FIFO
        self._thread = trio.CapacityLimiter(1)
        self._slots = StreamSlots(self.node.scoreboard, max_total=64, max_per_peer=24)
        self._nursery: trio.Nursery | None = None
        self.moves: list[dict[str, Any]] = []
        self.calls = self.refused = 0
        self.moving = False  # building or downloading a stage: drift repairs wait
        self._past_resyncs = 0  # of the averagers of stages we served before

    # --- lifecycle -------------------------------------------------------------------------
    async def run(
        self, *, task_status: trio.TaskStatus[PipelineServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.node.host.set_stream_handler(str(PIPELINE), self._on_stream)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            stage = self._wanted if self._wanted is not None else await self._choose_stage()
            await self._become(stage)
            nursery.start_soon(self._announce_loop)
            nursery.start_soon(self._dht_loop)
            if self.spec.rebalance_period > 0:
                nursery.start_soon(self._rebalance_loop)
            task_status.started(self)

    def _view(self):
        entries = servers(self.context.state, self.spec.stages)
        return entries, stage_views(entries, [self.spec.demand(s) for s in range(self.spec.stages)])

    async def _choose_stage(self) -> int:
        """The stage with the most need, once someone else's claim is in view: a joiner that
        looks while the creator still builds its pipeline sees no server at all, and would
        take the creator's stage (rebalancing would undo it, a few periods later)."""
        if self.context.manifest.creator != self.me:
            with trio.move_on_after(FIRST_CLAIM_WAIT):
                while not set(servers(self.context.state, self.spec.stages)) - {self.me}:
                    await trio.sleep(0.2)
        return self._stage_with_most_need()

    def _stage_with_most_need(self) -> int:
        entries = servers(self.context.state, self.spec.stages)
        entries.pop(self.me, None)  # a restarted server: our old record says nothing of need
        return stage_for_new_peer(
            stage_views(entries, [self.spec.demand(s) for s in range(self.spec.stages)])
        )

    def _peers_in(self, stage: int) -> list[str]:
        """The other live servers of `stage`, as RunState tells us now."""
        entries, _ = self._view()
        return sorted(p for p, e in entries.items() if e.stage == stage and p != self.me)

    def _build(self, stage: int) -> StageServer:
        """A fresh server of `stage` from the run's config and seed (sync: call in a thread)."""
        spec = self.spec
        module = mlp_stage_module(spec.model_config(), spec.stages, stage, seed=spec.seed)
        return StageServer(
            module,
            stage=stage,
            is_last=stage == spec.stages - 1,
            codec=spec.codec,
            optimizer=lambda params: torch.optim.Adam(params, lr=spec.lr),
        )

    async def _become(self, stage: int, *, period: int | None = None) -> None:
        """Serve `stage` with its current state, downloaded from one of its servers if any."""
        self.moving = True
        try:
            await self._switch(stage, decided=time.time(), period=period)
        finally:
            self.moving = False

    async def _switch(self, stage: int, *, decided: float, period: int | None) -> None:
        server = await trio.to_thread.run_sync(self._build, stage, limiter=self._thread)
        completed = 0
        async with self._serve:  # the call in progress finishes first; none starts meanwhile
            for donor in self._peers_in(stage)[:3]:
                try:
                    flat, adam_step, completed = await self.transport.state(donor, stage=stage)
                    await trio.to_thread.run_sync(
                        import_state, server, flat, adam_step, limiter=self._thread
                    )
                    break
                except (PeertrainError, ValueError) as exc:
                    log.info("stage %d state from %s failed: %s", stage, donor, exc)
                    completed = 0
            old = self.stage
            if self.averager is not None:
                self._past_resyncs += self.averager.drift.resyncs
            self.server, self.stage = server, stage
            self.averager = stage_averager(
                self.transport,
                server,
                me=self.me,
                stage=stage,
                completed=completed,
                peers=lambda: self._peers_in(stage),
                may_repair=lambda: not self.moving and self.stage == stage,
            )
            self._ema = ThroughputEMA(beta=0.9)
            await self._measure_once(server)
        self._announce()
        if old >= 0:
            self.moves = [
                *self.moves[-63:],
                {"at": decided, "from": old, "to": stage, "period": period},
            ]
        log.info(
            "serving stage %d of run %s (round %d)", stage, self.context.run_id[:12], completed
        )

    async def _measure_once(self, server: StageServer, calls: int = 3) -> None:
        """A first throughput figure before any trainer calls: a few forwards of one microbatch of
        random inputs, timed (and padded) as served calls are. Announced at once, so wiring,
        rebalancing and the static baseline's choice of the fastest server start from a
        measurement instead of a guess. Forwards keep nothing, so the stage's state is untouched."""
        x = pack(torch.randn(self.spec.batch_size, server.in_features))
        for _ in range(calls):
            started = trio.current_time()
            await trio.to_thread.run_sync(server.forward, x, limiter=self._thread)
            await self._pad(started, x.rows)
            self._ema.update((trio.current_time() - started) / x.rows)

    async def _pad(self, started: float, work: float) -> None:
        """Testing knob: stretch a call to `base_seconds · work / speed` (a slower machine)."""
        if self.spec.base_seconds > 0:
            target = self.spec.base_seconds * work / self.speed
            await trio.sleep(max(0.0, target - (trio.current_time() - started)))

    # --- announcements -----------------------------------------------------------------------
    def throughput(self) -> float:
        seconds = self._ema.value
        return 0.0 if not seconds else 1.0 / max(seconds, 1e-9)

    def _announce(self) -> None:
        self.context.replicator.writer.announce(
            role=server_role(self.stage),
            addrs=self.node.addrs()[:8],
            throughput=self.throughput(),
            lease_ms=LEASE_MS,
        )

    async def _announce_loop(self) -> None:
        while True:
            await trio.sleep(ANNOUNCE_EVERY)
            self._announce()

    async def _dht_loop(self) -> None:
        """The DHT stage key, for discovery from outside the run (decisions use RunState)."""
        dht = self.node.dht.dht
        while True:
            with trio.move_on_after(DHT_EVERY):
                try:
                    await dht.put(
                        stage_key(self.context.run_id[:64], self.stage),
                        {"tput": round(self.throughput(), 3)},
                        ttl=6 * DHT_EVERY,
                    )
                except (PeertrainError, ValueError) as exc:
                    log.debug("dht stage announcement failed: %s", exc)
            await trio.sleep(DHT_EVERY)

    async def _rebalance_loop(self) -> None:
        """Once per period, at its middle: the period's move, if we are its mover.

        Only on a settled view: if who-serves-what changed since our last look (a join, a
        death, someone else's move), we skip this period. Views converge by gossip; deciding
        while they still change is how two peers each see themselves as the period's mover.
        Our first look only records the view (a joiner's view is the least settled of all).
        """
        period_s = self.spec.rebalance_period
        last: dict[str, int] | None = None
        while True:
            now = time.time()
            midpoint = (int(now // period_s) + 0.5) * period_s
            await trio.sleep(midpoint - now if midpoint > now else midpoint + period_s - now)
            period = int(time.time() // period_s)
            entries, views = self._view()
            layout = {peer: entry.stage for peer, entry in entries.items()}
            settled, last = layout == last, layout
            if not settled or in_static_phase(self.context.state):
                continue
            move = plan_move(views, period)
            if move is not None and move.peer == self.me and move.source == self.stage:
                log.info(
                    "rebalancing: moving from stage %d to %d (period %d)",
                    move.source,
                    move.target,
                    period,
                )
                await self._become(move.target, period=period)

    # --- serving ---------------------------------------------------------------------------
    async def _on_stream(self, stream: INetStream) -> None:
        async with self._slots.admit(stream) as peer:
            if peer is None:
                return
            with trio.move_on_after(120.0):
                await self._answer(peer, stream)

    async def _answer(self, peer: str, stream: INetStream) -> None:
        try:
            req = await read_message(
                stream, (StageCall, GradientsRequest, StateRequest), idle_timeout=IDLE_TIMEOUT
            )
        except ProtocolError as exc:
            self._penalise_if_bad(peer, exc)
            return
        prepared: tuple = ()
        try:
            if isinstance(req, StageCall):
                tensors = await read_payloads(
                    stream, req.tensors, max_nbytes=MAX_BOUNDARY_BYTES, idle_timeout=IDLE_TIMEOUT
                )
                reply, prepared = await self._stage_call(peer, req, tensors)
            elif isinstance(req, GradientsRequest):
                reply, prepared = await self._gradients(peer, req)
            else:
                reply, prepared = await self._state(req)
        except ProtocolError as exc:  # a payload that is too big, forged or cut short
            self._penalise_if_bad(peer, exc)
            reply, prepared = refuse(req, ErrorCode.BAD_REQUEST, str(exc)), ()
        except Exception:
            # our bug, but one a remote request triggers: answer INTERNAL and keep serving (as
            # node/net/rpc.py does); the traceback is logged
            log.exception("pipeline: handler failed on a request from %s", peer)
            reply, prepared = refuse(req, ErrorCode.INTERNAL, "internal error"), ()
        if isinstance(reply, ErrorResponse):
            self.refused += 1
        try:
            await write_message(stream, reply, idle_timeout=IDLE_TIMEOUT)
            await write_payloads(stream, prepared, idle_timeout=IDLE_TIMEOUT)
        except ProtocolError as exc:
            log.debug("pipeline: could not answer %s: %s", peer, exc)

    def _penalise_if_bad(
        self, peer: str, exc: ProtocolError, points: float = BAD_INPUT_PENALTY
    ) -> None:
        if is_misbehaviour(exc):
            self.node.scoreboard.penalise(peer, points, f"pipeline: {exc}")

    def _wrong_place(self, peer: str, req: Request, run: str, stage: int) -> ErrorResponse | None:
        if run != self.context.run_id:
            return refuse(req, ErrorCode.NOT_FOUND, "not in that run")
        if stage != self.stage:
            self.node.scoreboard.penalise(
                peer, WRONG_STAGE_PENALTY, f"pipeline: stage {stage} asked of {self.stage}"
            )
            return refuse(req, WRONG_STAGE, f"this server serves stage {self.stage}, not {stage}")
        return None

    async def _stage_call(self, peer: str, req: StageCall, tensors: list[torch.Tensor]):
        wrong = self._wrong_place(peer, req, req.run, req.stage)
        if wrong is not None:
            return wrong, ()
        last = self.spec.stages - 1
        expected = {"forward": 1, "backward": 2, "loss": 1}[req.op]
        if (
            (req.op == "loss") != (req.stage == last)
            or len(req.tensors) != expected
            or (req.op != "loss" and req.targets)
        ):
            self._penalise_if_bad(peer, DecodeError("malformed stage call"))
            return refuse(
                req,
                ErrorCode.BAD_REQUEST,
                f"{req.op} with {len(req.tensors)} tensors at stage {req.stage}",
            ), ()
        x = boundary_of(req.tensors[0], tensors[0])
        async with self._serve:
            server = self.server
            if req.stage != self.stage or server is None:  # moved while the call waited
                return refuse(req, WRONG_STAGE, f"this server now serves stage {self.stage}"), ()
            started = trio.current_time()
            try:
                if req.op == "forward":
                    out = await trio.to_thread.run_sync(server.forward, x, limiter=self._thread)
                    loss, result = 0.0, out
                elif req.op == "backward":
                    grad = boundary_of(req.tensors[1], tensors[1])
                    loss, result = (
                        0.0,
                        await trio.to_thread.run_sync(
                            server.backward, x, grad, limiter=self._thread
                        ),
                    )
                else:
                    targets = torch.tensor(req.targets, dtype=torch.int64)
                    loss, result = await trio.to_thread.run_sync(
                        server.loss_backward, x, targets, limiter=self._thread
                    )
            except DecodeError as exc:  # NaN/inf, wrong width, wrong rows, bad labels
                self._penalise_if_bad(peer, exc)
                return refuse(req, ErrorCode.BAD_REQUEST, str(exc)), ()
            work = x.rows * (1.0 if req.op == "forward" else BACKWARD_COST)
            await self._pad(started, work)
            self._ema.update((trio.current_time() - started) / work)
            self.calls += 1
        if req.op != "forward" and self.averager is not None and self._nursery is not None:
            share = -(-self.spec.target_batch // (1 + len(self._peers_in(self.stage))))
            await self.averager.maybe_start(self._nursery, share)
        prepared = () if result is None else (prepare_boundary(result),)
        return req.reply(
            StageReply, loss=float(loss), tensors=tuple(p.header for p in prepared)
        ), prepared

    async def _gradients(self, peer: str, req: GradientsRequest):
        wrong = self._wrong_place(peer, req, req.run, req.stage)
        if wrong is not None or self.averager is None or self._nursery is None:
            return wrong or refuse(req, ErrorCode.BUSY, "starting"), ()
        return await answer_gradients(self.averager, self._nursery, peer, req)

    async def _state(self, req: StateRequest):
        if req.run != self.context.run_id or req.stage != self.stage or self.averager is None:
            return refuse(req, WRONG_STAGE, f"this server serves stage {self.stage}"), ()
        return await answer_state(self.averager, req)

    # --- status --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        stats = self.server.statistics() if self.server else None
        return {
            "role": "server",
            "phase": "serving",
            "stage": self.stage,
            "speed": self.speed,
            "throughput": round(self.throughput(), 3),
            "calls": self.calls,
            "refused": self.refused,
            "forwards": stats.forwards if stats else 0,
            "backwards": stats.backwards if stats else 0,
            "steps": stats.steps if stats else 0,
            "round": self.averager.completed if self.averager else 0,
            "round_sizes": list(self.averager.contributors) if self.averager else [],
            "moves": list(self.moves),
            "resyncs": self._past_resyncs + (self.averager.drift.resyncs if self.averager else 0),
        }

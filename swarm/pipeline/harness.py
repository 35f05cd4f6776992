"""A whole SWARM in one process: stage servers on threads, an in-process transport, kills, moves.

Tests and benchmarks need many heterogeneous, killable servers without processes or sockets.
Each `ServerHost` runs one real `StageServer` (real torch compute on a worker thread, one call at a
time, FIFO) and, to model a slower machine, pads every call to `base_seconds · cost · rows / speed`
(cost: forward 1, backward and loss_backward 2.5, as the wiring counts them). `kill` makes a host
fail its current and future calls, exactly as a dead peer looks to a trainer (`ServerUnavailable`).

Servers of a stage average and step when the stage's accumulated samples reach `target_batch`:
the in-process all-reduce takes every live server's (gradient sum, samples), sums them, and each
server steps with the totals; servers keep serving meanwhile, as over the network. `rebalance`
applies `plan_move`: the mover finishes its current call, downloads the target stage's state from
a live server there, swaps its slice, and is re-announced to every attached trainer's wiring in
its new stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import trio
from peertrain.swarm.models.mlp import MLPConfig

from .boundary import BoundaryTensor
from .errors import ServerUnavailable
from .rebalance import Move, StageView, plan_move, stage_for_new_peer
from .slices import mlp_stage_module
from .stage import StageServer
from .wiring import BACKWARD_COST, PeerKey, PipelineWiring

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class SwarmSpec:
    """`speeds[s]` lists the relative speeds of stage s's servers (its length: how many)."""

    speeds: tuple[tuple[float, ...], ...]
    model: MLPConfig = MLPConfig(hidden=64, depth=2)
    seed: int = 0
    codec: str = "fp32"
    target_batch: int = 256  # samples per stage step, summed over the stage's servers
    base_seconds: float = 0.0  # per forward sample at speed 1; 0: no artificial slowdown

    @property
    def num_stages(self) -> int:
        return len(self.speeds)


class ServerHost:
    def __init__(self, peer: str, stage: int, server: StageServer, *, speed: float) -> None:
        self.peer, self.stage, self.server, self.speed = peer, stage, server, speed
        self.alive = True
        self.lock = trio.Lock()  # one call at a time, served in arrival order
        self._thread = trio.CapacityLimiter(1)

    async def call(self, fn: Callable[[], T], *, stage: int, work: float, base: float) -> T:
        async with self.lock:
            if not self.alive or stage != self.stage:
                raise ServerUnavailable(f"{self.peer} does not serve stage {stage}")
            started = trio.current_time()
            result = await trio.to_thread.run_sync(fn, limiter=self._thread)
            await trio.sleep(max(0.0, base * work / self.speed - (trio.current_time() - started)))
            if not self.alive:
                raise ServerUnavailable(f"{self.peer} died during the call")
            return result


class InProcessSwarm:
    """Stage servers plus an implementation of `StageTransport` that reaches them directly."""

    def __init__(self, spec: SwarmSpec) -> None:
        self.spec = spec
        self.hosts: dict[str, ServerHost] = {}
        for stage, speeds in enumerate(spec.speeds):
            for index, speed in enumerate(speeds):
                peer = f"s{stage}-{index}"
                self.hosts[peer] = ServerHost(peer, stage, self._server(stage), speed=speed)
        self._wirings: list[PipelineWiring] = []
        self._step_locks = [trio.Lock() for _ in spec.speeds]
        self.steps = [0] * spec.num_stages
        self.stage_sizes: list[list[int]] = [self.sizes()]

    def _server(self, stage: int) -> StageServer:
        module = mlp_stage_module(self.spec.model, self.spec.num_stages, stage, seed=self.spec.seed)
        last = stage == self.spec.num_stages - 1
        return StageServer(module, stage=stage, is_last=last, codec=self.spec.codec)

    # --- membership -----------------------------------------------------------------------
    def attach(self, wiring: PipelineWiring, *, only: set[str] | None = None) -> None:
        """Announce live servers (all, or `only` these) to a trainer's wiring, and keep it told."""
        for host in self.hosts.values():
            if host.alive and (only is None or host.peer in only):
                wiring[host.stage].announce(host.peer)
        if only is None:
            self._wirings.append(wiring)

    def members(self, stage: int) -> list[ServerHost]:
        return [h for h in self.hosts.values() if h.stage == stage and h.alive]

    def sizes(self) -> list[int]:
        return [len(self.members(stage)) for stage in range(self.spec.num_stages)]

    def kill(self, peer: str) -> None:
        self.hosts[peer].alive = False

    # --- StageTransport -------------------------------------------------------------------
    async def forward(self, peer: PeerKey, *, stage: int, x: BoundaryTensor) -> BoundaryTensor:
        host = self._host(peer)
        return await host.call(
            lambda: host.server.forward(x), stage=stage, work=x.rows, base=self.spec.base_seconds
        )

    async def backward(
        self, peer: PeerKey, *, stage: int, x: BoundaryTensor, grad_out: BoundaryTensor
    ) -> BoundaryTensor | None:
        host = self._host(peer)
        grad = await host.call(
            lambda: host.server.backward(x, grad_out),
            stage=stage,
            work=BACKWARD_COST * x.rows,
            base=self.spec.base_seconds,
        )
        await self._maybe_step(stage)
        return grad

    async def loss_backward(
        self, peer: PeerKey, *, stage: int, x: BoundaryTensor, targets: torch.Tensor
    ) -> tuple[float, BoundaryTensor | None]:
        host = self._host(peer)
        result = await host.call(
            lambda: host.server.loss_backward(x, targets),
            stage=stage,
            work=BACKWARD_COST * x.rows,
            base=self.spec.base_seconds,
        )
        await self._maybe_step(stage)
        return result

    def _host(self, peer: PeerKey) -> ServerHost:
        host = self.hosts.get(str(peer))
        if host is None:
            raise ServerUnavailable(f"unknown server {peer!r}")
        return host

    # --- averaging within a stage ---------------------------------------------------------
    async def _maybe_step(self, stage: int) -> None:
        if self._pending(stage) < self.spec.target_batch or self._step_locks[stage].locked():
            return
        async with self._step_locks[stage]:
            members = self.members(stage)
            await trio.to_thread.run_sync(self._all_reduce_and_step, members)
            self.steps[stage] += 1

    def _pending(self, stage: int) -> int:
        return sum(h.server.pending_samples for h in self.members(stage))

    @staticmethod
    def _all_reduce_and_step(members: list[ServerHost]) -> None:
        """Sum every live server's (gradient sum, samples), then step each with the totals.

        Servers keep serving meanwhile (no host is held): a backward that lands between the take
        and the step counts towards the next step.
        """
        parts = [h.server.take_gradients() for h in members]
        total = torch.stack([flat for flat, _ in parts]).sum(0)
        samples = sum(n for _, n in parts)
        for host in members:
            host.server.apply_average(total, samples)

    # --- rebalancing ----------------------------------------------------------------------
    def views(self) -> list[StageView]:
        """What servers would announce: demand per sample per stage, throughput per server."""
        last = self.spec.num_stages - 1
        return [
            StageView(
                demand=BACKWARD_COST if stage == last else 1.0 + BACKWARD_COST,
                servers={h.peer: h.speed for h in self.members(stage)},
            )
            for stage in range(self.spec.num_stages)
        ]

    async def join(self, speed: float) -> str:
        """A new server joins the stage with the most need, with that stage's current state."""
        stage = stage_for_new_peer(self.views())
        peer = f"j{len(self.hosts)}"
        server = self._server(stage)
        donors = self.members(stage)
        if donors:
            state = await trio.to_thread.run_sync(donors[0].server.state)
            await trio.to_thread.run_sync(server.load_state, state)
        self.hosts[peer] = ServerHost(peer, stage, server, speed=speed)
        for wiring in self._wirings:
            wiring[stage].announce(peer)
        self.stage_sizes.append(self.sizes())
        return peer

    async def rebalance(self, period: int) -> Move | None:
        """One period of the rebalancing rule; the move made, if any."""
        move = plan_move(self.views(), period)
        if move is None:
            return None
        donors = self.members(move.target)
        host = self.hosts[move.peer]
        async with host.lock:  # its current call finishes first
            server = self._server(move.target)
            if donors:
                state = await trio.to_thread.run_sync(donors[0].server.state)
                await trio.to_thread.run_sync(server.load_state, state)
            host.server, host.stage = server, move.target
        for wiring in self._wirings:
            wiring[move.source].exclude(move.peer)
            wiring[move.target].announce(move.peer)
        self.stage_sizes.append(self.sizes())
        return move

    async def rebalance_every(self, seconds: float) -> None:
        """Run the rebalancing rule forever, one period every `seconds`."""
        period = 0
        while True:
            await trio.sleep(seconds)
            await self.rebalance(period)
            period += 1


def evaluate(swarm: InProcessSwarm, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(loss, accuracy) of the model formed by the first live server of each stage."""
    with torch.no_grad():
        h = x
        for stage in range(swarm.spec.num_stages):
            h = swarm.members(stage)[0].server.module(h)
        loss = torch.nn.functional.cross_entropy(h, y)
        return float(loss), float((h.argmax(-1) == y).float().mean())

"""The pipeline transports in one process: callers reach `StageService`s directly, no sockets.

`MemoryStageNetwork` holds the live services by peer ID; `client(me)` is what one peer is given
as its transport (a trainer's `StageTransport`, a server's `StagePeerTransport`). A call runs the
callee's real service code (its serve lock, padding, measuring, averaging rounds) in the
caller's task, and fails the way a call over the network fails: an unknown or killed peer, a
refusal (`WrongStage`, `NotServing`, no contribution kept) or input the callee refuses
(`DecodeError`) surfaces as `ServerUnavailable`, so callers retry elsewhere exactly as they do
on the network. `kill(peer)` makes its current and future calls fail (a dead peer, as a trainer
sees it); the caller of `kill` ends the peer's own tasks. `state_seconds` stretches every state
download, as a large stage over a slow link does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import torch
import trio
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.pipeline.averaging import StageContribution, StageState
from peertrain.swarm.pipeline.boundary import BoundaryTensor
from peertrain.swarm.pipeline.errors import NotServing, ServerUnavailable, WrongStage
from peertrain.swarm.pipeline.stage_service import StageService
from peertrain.swarm.pipeline.wiring import PeerKey

T = TypeVar("T")


class MemoryStageNetwork:
    """Live stage services by peer ID, and the clients that call them."""

    def __init__(self) -> None:
        self.services: dict[str, StageService] = {}
        self.dead: set[str] = set()
        self.state_seconds = 0.0  # how long a state download takes, on top of the copy

    def register(self, peer: str, service: StageService) -> None:
        self.services[peer] = service
        self.dead.discard(peer)

    def kill(self, peer: str) -> None:
        self.dead.add(peer)

    def client(self, me: str) -> MemoryStageClient:
        return MemoryStageClient(self, me)

    async def call(self, peer: PeerKey, send: Callable[[StageService], Awaitable[T]]) -> T:
        """`send(service)` on `peer`'s service; any failure of that peer: ServerUnavailable."""
        service = self.services.get(str(peer))
        if service is None or peer in self.dead:
            raise ServerUnavailable(f"{peer} is not reachable")
        try:
            result = await send(service)
        except (WrongStage, NotServing, DecodeError) as exc:  # refused, as over the network
            raise ServerUnavailable(f"{peer}: {type(exc).__name__}: {exc}") from None
        if peer in self.dead:
            raise ServerUnavailable(f"{peer} died during the call")
        return result


class MemoryStageClient:
    """One peer's transport on a `MemoryStageNetwork`: the trainer's calls and a server's."""

    def __init__(self, network: MemoryStageNetwork, me: str) -> None:
        self.network, self.me = network, me

    async def forward(self, peer: PeerKey, *, stage: int, x: BoundaryTensor) -> BoundaryTensor:
        return await self.network.call(peer, lambda s: s.forward(stage, x))

    async def backward(
        self, peer: PeerKey, *, stage: int, x: BoundaryTensor, grad_out: BoundaryTensor
    ) -> BoundaryTensor | None:
        return await self.network.call(peer, lambda s: s.backward(stage, x, grad_out))

    async def loss_backward(
        self, peer: PeerKey, *, stage: int, x: BoundaryTensor, targets: torch.Tensor
    ) -> tuple[float, BoundaryTensor | None]:
        return await self.network.call(peer, lambda s: s.loss_backward(stage, x, targets))

    async def contribution(self, peer: PeerKey, *, stage: int, round_: int) -> StageContribution:
        got = await self.network.call(peer, lambda s: s.contribution(self.me, stage, round_))
        if got is None:
            raise ServerUnavailable(f"{peer}: no contribution for round {round_}")
        return got

    async def state(self, peer: PeerKey, *, stage: int) -> StageState:
        state = await self.network.call(peer, lambda s: s.export_state(stage))  # a copy already
        await trio.sleep(self.network.state_seconds)
        return state

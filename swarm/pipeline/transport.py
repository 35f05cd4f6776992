"""The interfaces between pipeline trainers and stage servers, and between a stage's servers.

Neither the trainer nor the stage service talks to sockets; each is given a transport. The
in-process one (testing/pipeline_memory.py) calls the peers' `StageService`s directly; the
network one (node/runs/pipeline_transport.py) sends the same requests over
`/peertrain/pipeline/1.0.0` (wire.py) to a daemon, whose stream handler calls its
`StageService` the same way.

A trainer's `StageTransport`, three calls:

    forward(peer, stage, x)                  -> y                  stage < S-1
    backward(peer, stage, x, grad_out)       -> grad_x or None     stage < S-1 (None for stage 0)
    loss_backward(peer, stage, x, targets)   -> (loss, grad_x)     stage S-1

`x`, `y`, `grad_out`, `grad_x` are `BoundaryTensor`s (codec, shape, block size, uint8 payload):
they map one-to-one onto a protocol TensorHeader + payload. `targets` is the microbatch's int64
label tensor. Every request carries `stage`, so a server that has just migrated to another stage
refuses it instead of computing with the wrong slice. Any failure of one server (connection
refused or reset, timeout, remote error, wrong stage, a payload that does not decode) must raise
`ServerUnavailable`: the trainer then excludes that peer and retries the call on another server of
the stage. Errors that are the trainer's own bugs should propagate.

Peers are opaque hashable ids (a libp2p peer id string in the network version). The set of servers
per stage reaches the trainer through `StageWiring.announce` / `exclude` (in the network version:
from RunState member records, re-announced periodically with measured throughput; membership.py).
"""

from __future__ import annotations

from typing import Protocol

import torch

from .averaging import StageContribution, StageState
from .boundary import BoundaryTensor
from .wiring import PeerKey


class StageTransport(Protocol):
    async def forward(self, peer: PeerKey, *, stage: int, x: BoundaryTensor) -> BoundaryTensor: ...

    async def backward(
        self, peer: PeerKey, *, stage: int, x: BoundaryTensor, grad_out: BoundaryTensor
    ) -> BoundaryTensor | None: ...

    async def loss_backward(
        self, peer: PeerKey, *, stage: int, x: BoundaryTensor, targets: torch.Tensor
    ) -> tuple[float, BoundaryTensor | None]: ...


class StagePeerTransport(StageTransport, Protocol):
    """A stage server's calls: the trainer's three, plus two to its stage's other servers."""

    async def contribution(
        self, peer: PeerKey, *, stage: int, round_: int
    ) -> StageContribution: ...

    async def state(self, peer: PeerKey, *, stage: int) -> StageState: ...

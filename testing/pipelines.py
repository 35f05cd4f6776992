"""One microbatch through a list of stage servers by hand: what a trainer does, without wiring.

Tests of stage slices compare a pipeline of `StageServer`s with the whole model; this is the
forward chain, the last stage's loss and the backward chain they all run.
"""

from __future__ import annotations

import torch
from peertrain.swarm.pipeline.boundary import pack
from peertrain.swarm.pipeline.stage import StageServer


def through_stages(servers: list[StageServer], x: torch.Tensor, y: torch.Tensor) -> float:
    """Forward `x` through every stage, the loss at the last, backward to the first; the loss.
    Labels go flat, as over the network."""
    inputs = [pack(x)]
    for server in servers[:-1]:
        inputs.append(server.forward(inputs[-1]))
    loss, grad = servers[-1].loss_backward(inputs[-1], y.reshape(-1))
    for server, stage_input in zip(reversed(servers[:-1]), reversed(inputs[:-1]), strict=True):
        assert grad is not None
        grad = server.backward(stage_input, grad)
    assert grad is None  # the first stage sends no gradient for the data
    return loss


def feed_random(server: StageServer, rows: int, seed: int, *, features: int = 32) -> None:
    """One seeded random microbatch (`rows` × `features`, ten classes) through the last stage
    `server`'s loss and backward: samples it counts toward its stage's next average."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=g)
    server.loss_backward(pack(x), torch.randint(10, (rows,), generator=g))


def flat_params(server: StageServer) -> torch.Tensor:
    """Every parameter of `server`'s slice in one flat tensor (to compare copies of a stage)."""
    return torch.cat([p.detach().reshape(-1) for p in server.module.parameters()])

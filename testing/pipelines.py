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

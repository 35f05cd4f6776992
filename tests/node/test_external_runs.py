"""Runs of a user-supplied model (`external:<fingerprint>`, what peertrain.DiLoCo creates): only a
process holding that model can take part; a plain daemon asked to join is refused, saying how."""

from __future__ import annotations

import pytest
import torch
import trio
from peertrain.node.errors import ControlError
from peertrain.swarm.diloco.member.external import StepHandshake, build_external_member
from peertrain.swarm.models import count_parameters, external_model_name
from peertrain.testing import open_test_swarm
from torch import nn


async def test_a_daemon_without_the_model_refuses_to_join_an_external_run():
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    handshake = StepHandshake()
    spec = {
        "model": external_model_name(model),
        "model_settings": {"params": count_parameters(model)},
        "dataset": "external",
        "inner_steps": 3,
    }
    async with open_test_swarm(2) as (holder, plain):
        holder.runs.member_factory = lambda run_spec, _peer: build_external_member(
            run_spec, model=model, optimizer=optimizer, handshake=handshake
        )
        try:
            session = await holder.runs.create(name="own-loop", mode="diloco", spec=spec)
            with pytest.raises(ControlError, match=r"user-supplied model.*peertrain\.DiLoCo"):
                await plain.runs.join(session.run_id, timeout=10)
            assert plain.runs.sessions == {}
            with pytest.raises(ControlError, match="user-supplied model"):
                await plain.runs.create(name="theirs", mode="diloco", spec=spec)
        finally:
            handshake.close()  # the holder's driver waits for a user loop that never steps
            await trio.lowlevel.checkpoint()

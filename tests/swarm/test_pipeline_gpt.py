"""The GPT cut into pipeline stages: embeddings with the first stage, final norm, head and loss
with the last; the slices compute what the whole model does, refuse misshapen input, and train
in an in-process swarm that loses a server."""

from __future__ import annotations

import pytest
import torch
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.models.gpt import GPTConfig
from peertrain.swarm.pipeline.boundary import pack
from peertrain.swarm.pipeline.run_spec import PipelineSpec
from peertrain.swarm.pipeline.slices import stage_slices
from peertrain.swarm.pipeline.stage import StageServer
from peertrain.testing import through_stages
from peertrain.testing.pipeline_harness import SwarmSpec, evaluate, open_in_process_swarm

CONFIG = GPTConfig(n_layer=3, n_embd=32, n_head=2, block_size=16)


def _servers(codec: str = "fp32") -> list[StageServer]:
    slices = stage_slices(CONFIG.build(seed=0).pipeline_parts(), 3)
    return [StageServer(m, stage=i, is_last=i == 2, codec=codec) for i, m in enumerate(slices)]


def _tokens(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    window = torch.randint(256, (rows, 17), generator=g)
    return window[:, :-1], window[:, 1:]


def test_three_gpt_stages_compute_the_whole_models_loss_and_gradients() -> None:
    x, y = _tokens(4, 0)
    model = CONFIG.build(seed=0)
    _, loss = model(x, y)
    loss.backward()
    servers = _servers()
    assert abs(through_stages(servers, x, y) - float(loss.detach())) < 1e-5
    # the blocks' gradients match the whole model's; the tied embedding is split in two (the
    # pipeline unties it): the model's gradient is the sum of the first and the last stage's
    block = dict(model.blocks[1].named_parameters())
    stage1 = servers[1].module.layers[0]
    for name, p in stage1.named_parameters():
        assert torch.allclose(
            servers[1]._grad_sum[_index(servers[1], p)] / 4, block[name].grad, atol=1e-6
        )
    wte = servers[0]._grad_sum[0] / 4 + servers[2]._grad_sum[-1] / 4
    assert torch.allclose(wte, model.wte.weight.grad, atol=1e-6)


def _index(server: StageServer, param: torch.nn.Parameter) -> int:
    return next(i for i, p in enumerate(server._params) if p is param)


def test_gpt_stages_refuse_what_they_cannot_take() -> None:
    first, middle, last = _servers()
    x, y = _tokens(2, 1)
    with pytest.raises(DecodeError, match="tokens"):
        first.forward(pack(x.float() + 0.5))  # not token ids
    with pytest.raises(DecodeError, match="tokens"):
        first.forward(pack(torch.full((2, 16), 256.0)))  # beyond the vocabulary
    with pytest.raises(DecodeError):
        first.forward(pack(torch.zeros(2, 17)))  # longer than block_size
    with pytest.raises(DecodeError):
        middle.forward(pack(torch.zeros(2, 16, 31)))  # wrong width
    with pytest.raises(DecodeError):
        middle.backward(pack(torch.zeros(2, 16, 32)), pack(torch.zeros(2, 15, 32)))
    with pytest.raises(DecodeError):
        last.loss_backward(pack(torch.zeros(2, 16, 32)), y.reshape(-1)[:-1])
    assert middle.pending_samples == 0 and last.pending_samples == 0


def test_a_pipeline_spec_cuts_the_gpt_by_its_blocks() -> None:
    spec = PipelineSpec.from_settings({"model": "gpt", "stages": 3})
    assert spec.model_settings["n_layer"] == 3 and spec.dataset == "text"
    assert spec.dataset_settings["block_size"] == 64
    with pytest.raises(ValueError, match="too few for 4 stages"):
        PipelineSpec(model="gpt", model_settings={"n_layer": 3}, dataset="text", stages=4)
    with pytest.raises(ValueError, match="dropout"):
        PipelineSpec(model="gpt", model_settings={"dropout": 0.1}, dataset="text", stages=2)


async def test_a_gpt_swarm_learns_and_a_dead_server_costs_no_microbatch() -> None:
    from peertrain.swarm.data.text import TextDatasetConfig

    data = TextDatasetConfig(block_size=16).build()
    batches = data.train_batches(0, 1, batch_size=8, seed=0)
    spec = SwarmSpec(speeds=((1.0, 1.0),) * 3, model=CONFIG, batch_size=8, target_batch=16)
    async with open_in_process_swarm(spec) as swarm:
        x, y = data.eval_batches(batch_size=32, max_batches=1)[0]
        initial, _ = evaluate(swarm, x, y)
        trainer = swarm.new_trainer(in_flight=4)
        await trainer.train(batches, steps=20)
        # the stage-1 server the wiring favours so far: it would be chosen again
        swarm.kill(max(swarm.members(1), key=lambda host: host.service.calls).peer)
        await trainer.train(batches, steps=40, start=20)
        await swarm.settle()
        final, _ = evaluate(swarm, x, y)
    stats = trainer.statistics()
    assert stats.lost == 0 and stats.completed == 60 and stats.retries >= 1
    assert initial > 5.0 and final < initial - 1.0, (initial, final)


def test_data_windows_longer_than_the_gpts_context_are_refused_at_creation() -> None:
    with pytest.raises(ValueError, match="exceed the model's block_size 16"):
        PipelineSpec.from_settings(
            {
                "model": "gpt",
                "model_settings": {"block_size": 16},
                "dataset_settings": {"block_size": 32},
            }
        )

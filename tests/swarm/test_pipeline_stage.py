"""Stage servers: a pipeline of slices computes what the whole model does; averaging is exact."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.models.mlp import MLPConfig
from peertrain.swarm.pipeline.boundary import pack, unpack
from peertrain.swarm.pipeline.slices import stage_slices
from peertrain.swarm.pipeline.stage import StageServer
from peertrain.testing import through_stages

CONFIG = MLPConfig(hidden=32, depth=2)


def _servers(codec: str = "fp32", seed: int = 0) -> list[StageServer]:
    modules = stage_slices(CONFIG.build(seed=seed).pipeline_parts(), 3)
    return [StageServer(m, stage=i, is_last=i == 2, codec=codec) for i, m in enumerate(modules)]


def _sum(servers: list[StageServer]) -> list[torch.Tensor]:
    grads = []

    def keep(flat: torch.Tensor, samples: int) -> tuple[torch.Tensor, int]:
        grads.append(flat / samples)
        return flat, 0  # samples 0: do not step

    for server in servers:
        server.step(keep)
    return grads


def _batch(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 64, generator=g), torch.randint(10, (n,), generator=g)


def test_pipeline_of_slices_matches_the_whole_model() -> None:
    x, y = _batch(24, 0)
    model = CONFIG.build(seed=0)
    _, loss = model(x, y)
    loss.backward()
    servers = _servers()
    assert abs(through_stages(servers, x, y) - float(loss.detach())) < 1e-6
    expected = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    got = torch.cat(_sum(servers))
    assert torch.allclose(got, expected, atol=1e-6)


def test_backward_may_run_on_another_server_of_the_stage() -> None:
    # Forward on server a, backward recomputed on server b: same gradients as both on a.
    x, _ = _batch(8, 1)
    a, b = _servers(seed=3)[0], _servers(seed=3)[0]
    out = a.forward(pack(x))
    grad_out = pack(torch.randn(out.shape, generator=torch.Generator().manual_seed(2)))
    a.backward(pack(x), grad_out)
    b.backward(pack(x), grad_out)
    assert unpack(out).shape == (8, 32)
    assert b.statistics().forwards == 0
    assert torch.equal(_sum([a])[0], _sum([b])[0])


def test_step_averages_by_samples_across_the_stage() -> None:
    # Two servers of one stage see 8 and 24 samples; one server sees all 32: same update.
    x, y = _batch(32, 4)
    split = [_servers(seed=5), _servers(seed=5)]
    whole = _servers(seed=5)
    through_stages(split[0], x[:8], y[:8])
    through_stages(split[1], x[8:], y[8:])
    through_stages(whole, x, y)
    for stage in range(3):
        pair = [split[0][stage], split[1][stage]]
        total = sum(s.pending_samples for s in pair)
        grad_sum = sum(torch.cat([g.reshape(-1) for g in s._grad_sum]) for s in pair)
        for server in pair:
            assert server.step(lambda _flat, _n, t=grad_sum, n=total: (t, n)) == 32
        assert whole[stage].step(lambda flat, n: (flat, n)) == 32
        for server in pair:
            pairs = zip(server.module.parameters(), whole[stage].module.parameters(), strict=True)
            for p, q in pairs:
                assert torch.allclose(p, q, atol=1e-6)


def test_int8_boundaries_approximate_fp32() -> None:
    x, y = _batch(32, 6)
    exact, int8 = _servers("fp32", seed=7), _servers("int8", seed=7)
    loss_exact, loss_int8 = through_stages(exact, x, y), through_stages(int8, x, y)
    assert abs(loss_exact - loss_int8) < 1e-2
    ge, gi = torch.cat(_sum(exact)), torch.cat(_sum(int8))
    assert not torch.equal(ge, gi)  # compression really happened
    assert F.cosine_similarity(ge, gi, dim=0) > 0.99


def test_migrating_server_downloads_state() -> None:
    veteran, newcomer = _servers(seed=9)[1], _servers(seed=10)[1]
    veteran.backward(pack(torch.rand(16, 32)), pack(torch.randn(16, 32)))
    veteran.step(lambda flat, n: (flat, n))
    assert any(
        not torch.equal(p, q)
        for p, q in zip(veteran.module.parameters(), newcomer.module.parameters(), strict=True)
    )
    newcomer.load_state(veteran.state())
    for p, q in zip(veteran.module.parameters(), newcomer.module.parameters(), strict=True):
        assert torch.equal(p, q)


def test_bad_input_is_refused_not_crashed() -> None:
    first, middle, last = _servers()
    with pytest.raises(DecodeError):
        middle.forward(pack(torch.rand(4, 64)))  # stage 1 takes 32 features
    with pytest.raises(DecodeError):
        middle.backward(pack(torch.rand(4, 32)), pack(torch.rand(5, 32)))  # rows differ
    with pytest.raises(DecodeError):
        last.loss_backward(pack(torch.rand(4, 32)), torch.tensor([0, 1, 2, 10]))
    garbled = pack(torch.rand(4, 64))
    garbled.payload[:4].fill_(255)  # a NaN where a float was
    with pytest.raises(DecodeError):
        first.forward(garbled)
    assert middle.statistics().backwards == 0 and middle.pending_samples == 0

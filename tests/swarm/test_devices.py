"""Devices and precision: an absent device fails clearly; bf16 autocast trains like fp32."""

from __future__ import annotations

import pytest
import torch
from peertrain.swarm.data import DigitsDataset, DigitsDatasetConfig
from peertrain.swarm.devices import autocast_dtype, resolve_device
from peertrain.swarm.diloco.member.config import InnerConfig
from peertrain.swarm.diloco.member.inner_loop import InnerLoop, evaluate
from peertrain.swarm.models import ConfigError, MLPConfig

BF16_TOLERANCE = 0.02  # relative: bf16 keeps 8 bits of mantissa in matmuls; fp32 master weights


def test_auto_is_the_cpu_on_a_machine_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: auto picks it")
    assert resolve_device("auto") == torch.device("cpu")


def test_cuda_on_a_machine_without_cuda_fails_with_what_is_available():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match=r"--device cuda:1: torch sees no CUDA device.*cpu"):
        resolve_device("cuda:1")
    with pytest.raises(ConfigError, match="use auto, cpu, cuda, cuda:N or mps"):
        resolve_device("tpu")


def test_fp16_autocast_is_refused_on_the_cpu():
    with pytest.raises(ConfigError, match="use bf16 on the CPU"):
        autocast_dtype(torch.device("cpu"), "fp16")


def _train(precision: str, accumulation: int = 1, steps: int = 60) -> tuple[float, float]:
    data = DigitsDataset(DigitsDatasetConfig())
    model = MLPConfig().build(seed=0)
    batch = 32 // accumulation
    config = InnerConfig(
        steps=steps,
        batch_size=batch,
        lr=3e-3,
        warmup_steps=5,
        precision=precision,
        accumulation=accumulation,
    )
    loop = InnerLoop(model, data.train_batches(0, 1, batch_size=batch, seed=0), config)
    report = loop.run(steps)
    return report.first_loss, evaluate(model, data.eval_batches(batch_size=64, max_batches=4))


def test_bf16_autocast_on_the_cpu_reaches_the_fp32_loss_within_tolerance():
    first32, final32 = _train("fp32")
    first16, final16 = _train("bf16")
    assert final32 < 0.5 * first32  # it learned
    assert abs(final16 - final32) <= BF16_TOLERANCE * final32 + 0.01


def test_gradient_accumulation_counts_every_micro_batch():
    _, final = _train("fp32", accumulation=4)
    first, _ = _train("fp32", accumulation=1, steps=1)
    assert final < 0.5 * first


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]


def _spec(**changes):
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec

    return DiLoCoSpec(
        model="mlp", dataset="digits", inner_steps=4, batch_size=16, num_shards=2, **changes
    )


def test_a_member_takes_the_runs_accumulation_and_its_own_device_and_precision():
    from peertrain.swarm.diloco.member.build import build_member

    built = build_member(_spec(accumulation=3), "peer-a", device="cpu", precision="bf16")
    inner = built.member.inner
    assert (inner.config.accumulation, inner.config.precision) == (3, "bf16")
    report = inner.run(2)
    assert report.samples == 2 * 16 * 3
    with pytest.raises(ConfigError, match="accumulation"):
        _spec(accumulation=0)


@pytest.mark.parametrize("device", DEVICES)
def test_members_on_any_device_keep_the_outer_state_on_the_host_and_agree(device):
    """θ_global, momentum and the codec live on the host (ParamLayout.flatten): a member
    training on a GPU ends a round with the same state checksum as one on the CPU."""
    from peertrain.swarm.diloco.member.build import build_member
    from peertrain.testing import LocalGroup

    built = [build_member(_spec(), p, device=d) for p, d in (("a", device), ("b", "cpu"))]
    members = [b.member for b in built]
    assert next(members[0].model.parameters()).device.type == device
    reports = LocalGroup(members, names=["a", "b"]).run_round()
    assert members[0].global_params.device.type == "cpu"
    assert reports[0].state_hash == reports[1].state_hash
    assert built[0].eval_loss() == pytest.approx(built[1].eval_loss(), rel=1e-4)


@CUDA
def test_batches_reach_a_cuda_device_through_pinned_memory():
    from peertrain.swarm.devices import to_device

    x = torch.arange(12).reshape(3, 4)
    moved = to_device(x, torch.device("cuda"))
    assert moved.device.type == "cuda" and torch.equal(moved.cpu(), x)
    assert not x.is_pinned()  # the caller's tensor is left as it was; a pinned copy travels

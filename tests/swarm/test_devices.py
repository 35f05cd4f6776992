"""Devices and precision: an absent device fails clearly; bf16 autocast trains like fp32."""

from __future__ import annotations

import pytest
import torch
from peertrain.swarm.data import DigitsDataset, DigitsDatasetConfig
from peertrain.swarm.devices import autocast_dtype, resolve_device
from peertrain.swarm.diloco.config import InnerConfig
from peertrain.swarm.diloco.inner_loop import InnerLoop, evaluate
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

"""`--device` and `--precision` are the node's own choice, checked before the daemon starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


def start(home, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "peertrain", "node", "start", "--home", str(home)]
    command += ["--listen", "/ip4/127.0.0.1/tcp/0", *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})  # fmt: skip


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_cuda_device_on_a_machine_without_cuda_fails_before_the_daemon_starts(tmp_path):
    done = start(tmp_path, "--device", "cuda")
    assert done.returncode != 0
    assert "--device cuda: torch sees no CUDA device here (available: cpu" in done.stderr
    assert "Traceback" not in done.stderr
    # the same from the environment (flag > env > config.toml > default)
    done = start(tmp_path, env={"PEERTRAIN_DEVICE": "cuda:0"})
    assert done.returncode != 0 and "--device cuda:0: torch sees no CUDA" in done.stderr
    assert not (tmp_path / "control.sock").exists()


def test_fp16_on_the_cpu_is_refused_with_what_to_use(tmp_path):
    done = start(tmp_path, "--device", "cpu", "--precision", "fp16")
    assert done.returncode != 0 and "use bf16 on the CPU" in done.stderr

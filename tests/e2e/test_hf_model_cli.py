"""A tiny transformers causal LM, built from a config file (no download), trained in a 3-daemon
DiLoCo run through the CLI and exported twice: as a `save_pretrained` folder that transformers'
`from_pretrained` loads, and as plain safetensors that load into the architecture transformers
builds from the config; both in a fresh `python -I` process without peertrain, computing what
the group's model computes (issue 17)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.swarm.diloco.member.checkpoint import CheckpointStore
from peertrain.swarm.models import model_config
from peertrain.testing import wait_until_sync
from peertrain.testing.processes import peertrain_cli, run_status

pytest.importorskip("transformers", reason="transformers is not installed (peertrain[hf])")
pytestmark = pytest.mark.slow

TINY_GPT2 = {"model_type": "gpt2", "vocab_size": 256, "n_positions": 32, "n_embd": 32,
             "n_layer": 2, "n_head": 2, "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip
ENV = {**DAEMON_ENV, "HF_HUB_OFFLINE": "1"}
RUN_FLAGS = ["--dataset", "text", "--batch-size", "8", "--lr", "0.003", "--codec", "int8"]
RUN_FLAGS += ["--inner-steps", "10", "--rounds", "2", "--min-members", "3", "--round-timeout", "30"]
RUN_FLAGS += ["--set", "num_shards=3", "--set", "dataset_settings.block_size=32"]
RUN_FLAGS += ["--set", 'dataset_settings.sources=["pydoc"]', "--set", "warmup_steps=5"]

LOAD_EXPORTS = """
import json, sys
import torch
from safetensors.torch import load_model
from transformers import AutoConfig, AutoModelForCausalLM
x = torch.tensor(json.loads(sys.argv[3]))
pretrained = AutoModelForCausalLM.from_pretrained(sys.argv[1], local_files_only=True).eval()
sidecar = json.load(open(sys.argv[2] + "/export.json"))
config = AutoConfig.for_model(sidecar["model"].removeprefix("hf:"), **sidecar["model_settings"])
plain = AutoModelForCausalLM.from_config(config).eval()
load_model(plain, sys.argv[2] + "/model.safetensors")  # the tied head is stored once
with torch.no_grad():
    out = [m(input_ids=x).logits.tolist() for m in (pretrained, plain)]
    text = pretrained.generate(x[:1, :4], max_new_tokens=8, do_sample=False, pad_token_id=0)
print(json.dumps({"hf": out[0], "safetensors": out[1], "generated": text.shape[1],
                  "peertrain": "peertrain" in sys.modules}))
"""


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return peertrain_cli(*args, "--home", str(home), env=ENV, timeout=300)


def start_three(tmp_path: Path) -> list[DaemonProcess]:
    """n0 creates the run from a config file; n1 and n2 join it by name, naming no model."""
    config = tmp_path / "tiny-gpt2.json"
    config.write_text(json.dumps(TINY_GPT2))
    first = DaemonProcess(tmp_path / "n0", node_args(), ENV).start()
    addr = first.wait_ready()["share"]
    cli(first.home, "run", "create", "--name", "hf", "--model", f"hf:{config}", *RUN_FLAGS)
    join = ["join", addr, "--run", "hf", "--listen", "/ip4/127.0.0.1/tcp/0"]
    others = [DaemonProcess(tmp_path / f"n{i}", join, ENV).start() for i in (1, 2)]
    for daemon in others:
        daemon.wait_ready()
    return [first, *others]


def group_logits(home: Path, run: dict, x: torch.Tensor) -> torch.Tensor:
    """The group's agreed model (the member's newest checkpoint) of the run's spec."""
    info, state = CheckpointStore(home / "runs" / run["run_id"] / "checkpoints").latest()
    assert state.round == run["round"]
    model = model_config("hf:gpt2", {k: v for k, v in TINY_GPT2.items() if k != "model_type"})
    model = model.build().eval()
    # checkpoints hold parameters once; the head is tied to the token embedding
    missing, unexpected = model.load_state_dict(dict(state.params), strict=False)
    assert missing == ["hf_model.lm_head.weight"] and not unexpected
    with torch.no_grad():
        return model(x)[0]


def test_a_transformers_model_from_a_config_trains_and_exports_for_transformers(tmp_path):
    daemons = start_three(tmp_path)
    hf_out, plain_out = tmp_path / "export-hf", tmp_path / "export-st"
    try:
        wait_until_sync(
            lambda: all(run_status(d).get("finished") for d in daemons), timeout=240, interval=1
        )
        runs = [run_status(d) for d in daemons]
        cli(daemons[0].home, "run", "export", "--run", "hf", "--out", str(hf_out), "--format", "hf")
        cli(daemons[1].home, "run", "export", "--run", "hf", "--out", str(plain_out))
    finally:
        stop_all(daemons)
    assert len({r["state_checksum"] for r in runs}) == 1 and runs[0]["round"] == 2
    assert runs[0]["loss"] < runs[0]["initial_loss"]
    sidecar = json.loads((hf_out / "export.json").read_text())
    assert sidecar["format"] == "hf" and "model.safetensors" in sidecar["files"]
    assert "/" not in json.dumps(sidecar["model_settings"])  # no local path left the creator

    x = torch.randint(0, 256, (3, 16), generator=torch.Generator().manual_seed(1))
    loaded = subprocess.run(
        [sys.executable, "-I", "-c", LOAD_EXPORTS, str(hf_out), str(plain_out),
         json.dumps(x.tolist())],
        capture_output=True, text=True, timeout=120, check=True, env={**os.environ, **ENV},
    )  # fmt: skip
    fresh = json.loads(loaded.stdout)
    assert fresh["peertrain"] is False and fresh["generated"] == 4 + 8  # `generate` works
    expected = group_logits(daemons[0].home, runs[0], x)
    assert torch.equal(torch.tensor(fresh["hf"]), expected)
    assert torch.equal(torch.tensor(fresh["safetensors"]), expected)

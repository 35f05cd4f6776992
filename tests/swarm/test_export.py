"""An exported model loads in a fresh process with plain torch + safetensors, same outputs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from peertrain.swarm.export import export_model, verify_export
from peertrain.swarm.models import ConfigError, GPTConfig

LOADER = """
import json, sys, torch
from safetensors.torch import load_file
sys.path.insert(0, sys.argv[2])
import own_model
state = load_file(sys.argv[1] + "/model.safetensors")
model = own_model.build(channels=4)
model.load_state_dict(state)
x = torch.arange(3 * 64, dtype=torch.float32).view(3, 64) / 100
print(json.dumps(model(x)[0].tolist()))
assert "peertrain" not in sys.modules
"""


def test_a_safetensors_export_loads_without_peertrain_and_gives_the_same_outputs(tmp_path):
    fixtures = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures"
    sys.path.insert(0, str(fixtures))
    try:
        import own_model

        torch.manual_seed(1)
        model = own_model.build(channels=4)
    finally:
        sys.path.remove(str(fixtures))
        sys.modules.pop("own_model", None)
    sidecar = export_model(model, tmp_path / "out", about={"run": "r1", "round": 7})
    assert sidecar["run"] == "r1" and set(sidecar["files"]) == {"model.safetensors"}
    out = subprocess.run(
        [sys.executable, "-I", "-c", LOADER, str(tmp_path / "out"), str(fixtures)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    x = torch.arange(3 * 64, dtype=torch.float32).view(3, 64) / 100
    assert torch.equal(torch.tensor(json.loads(out)), model(x)[0].detach())


def test_tied_weights_export_as_plain_tensors_and_the_sidecar_catches_tampering(tmp_path):
    model = GPTConfig(n_layer=1, n_embd=16, n_head=2, block_size=16).build(seed=0)
    export_model(model, tmp_path, fmt="safetensors")
    assert verify_export(tmp_path)["format"] == "safetensors"
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    with pytest.raises(ValueError, match="does not match its checksum"):
        verify_export(tmp_path)


def test_hf_export_of_a_model_without_save_pretrained_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="export it as safetensors"):
        export_model(GPTConfig(n_layer=1, n_embd=16, n_head=2).build(), tmp_path, fmt="hf")

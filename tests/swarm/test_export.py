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


def test_a_tied_head_is_written_once_and_loads_back_tied(tmp_path):
    """The GPT's head is its token embedding: the file held it twice (a second copy of the
    largest tensor); now once, the alias named in the sidecar and the file's metadata."""
    from safetensors import safe_open
    from safetensors.torch import load_model

    model = GPTConfig(n_layer=1, n_embd=16, n_head=2, block_size=16).build(seed=0)
    sidecar = export_model(model, tmp_path / "st", about={"run": "r1", "round": 3})
    assert sidecar["tied"] == {"lm_head.weight": "wte.weight"}
    with safe_open(tmp_path / "st" / "model.safetensors", "pt") as f:
        assert "lm_head.weight" not in f.keys() and "wte.weight" in f.keys()
        assert json.loads(f.metadata()["tied"]) == sidecar["tied"]
    fresh = GPTConfig(n_layer=1, n_embd=16, n_head=2, block_size=16).build(seed=1)
    load_model(fresh, tmp_path / "st" / "model.safetensors")  # strict: nothing else missing
    assert fresh.lm_head.weight is fresh.wte.weight
    x = torch.randint(0, 256, (2, 16))
    assert torch.equal(fresh(x)[0], model(x)[0])
    export_model(model, tmp_path / "pt", fmt="torch")  # torch.save keeps one storage, two names
    state = torch.load(tmp_path / "pt" / "model.pt")
    assert state["lm_head.weight"].data_ptr() == state["wte.weight"].data_ptr()


def test_the_safetensors_file_names_its_run_round_checksum_and_model(tmp_path):
    from safetensors import safe_open

    about = {"run": "lm", "run_id": "ab" * 32, "round": 7, "state_checksum": "c0ffee",
             "model": "mlp", "model_settings": {"hidden": 16}}  # fmt: skip
    export_model(GPTConfig(n_layer=1, n_embd=16, n_head=2).build(), tmp_path, about=about)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        metadata = f.metadata()
    assert metadata["run"] == "lm" and metadata["run_id"] == "ab" * 32
    assert metadata["round"] == "7" and metadata["state_checksum"] == "c0ffee"
    assert metadata["model"] == "mlp" and json.loads(metadata["model_settings"]) == {"hidden": 16}


def test_one_state_exported_again_is_the_same_bytes(tmp_path):
    """Two members exporting the group's model must write the same file: safetensors keeps
    metadata in a hash map whose order changes with every map, so the export sorts it."""
    about = {"run": "lm", "run_id": "ab" * 32, "round": 7, "state_checksum": "c0ffee",
             "model": "mlp", "model_settings": {"hidden": 16}}  # fmt: skip
    torch.manual_seed(0)
    model = GPTConfig(n_layer=1, n_embd=16, n_head=2).build()
    files = {export_model(model, tmp_path / str(i), about=about)["files"]["model.safetensors"]
             for i in range(6)}  # fmt: skip
    assert len(files) == 1
    from safetensors.torch import load_file

    loaded = load_file(tmp_path / "0" / "model.safetensors")  # the rewritten header still reads
    assert all(torch.equal(t, model.state_dict()[name]) for name, t in loaded.items())


def test_the_sidecar_catches_tampering(tmp_path):
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

"""`run.export` writes the group's θ_global as a plain state_dict (issue 17, item 4), and a
node trusts exactly the model import paths its own user listed (`trusted_models`)."""

from __future__ import annotations

import pytest
import torch
from peertrain.node.api.control_methods import control_methods
from peertrain.node.config import load_config
from peertrain.node.errors import ControlError
from peertrain.swarm.export import verify_export
from peertrain.swarm.models import MLPConfig, config_to_dict
from peertrain.testing import open_test_swarm, wait_until
from safetensors import safe_open
from safetensors.torch import load_file

SPEC = {
    "model": "mlp",
    "model_settings": {"hidden": 16, "depth": 1},
    "dataset": "digits",
    "inner_steps": 3,
    "rounds": 2,
    "batch_size": 16,
}


async def test_an_export_holds_the_groups_model_of_the_round_it_names(tmp_path):
    async with open_test_swarm(1) as (node,):
        session = await node.runs.create(name="tiny", mode="diloco", spec=SPEC)
        await wait_until(lambda: session.status()["finished"], timeout=60, what="two rounds")
        export = control_methods(node)["run.export"]
        sidecar = await export({"run": "tiny", "out": str(tmp_path / "out")})
        driver = session.driver
        expected = driver.member.layout.named(driver.member.global_params)

        with pytest.raises(ControlError, match="absolute"):
            await export({"run": "tiny", "out": "relative/dir"})
        with pytest.raises(ControlError, match="no run 'other'.*tiny"):
            await export({"run": "other", "out": str(tmp_path / "x")})
        with pytest.raises(ControlError, match="safetensors"):
            await export({"out": str(tmp_path / "y"), "format": "onnx"})
    assert sidecar["round"] == 2 and sidecar["run"] == "tiny"
    # every setting, defaults included: rebuilding needs no peertrain defaults
    assert sidecar["model_settings"] == config_to_dict(MLPConfig(hidden=16, depth=1))
    assert set(sidecar["model_settings"]) > {"hidden", "depth"}
    with safe_open(tmp_path / "out" / "model.safetensors", "pt") as weights:
        metadata = weights.metadata()  # the weights name their run without the sidecar
    assert metadata["run_id"] == session.run_id and metadata["round"] == "2"
    assert metadata["model"] == "mlp" and metadata["state_checksum"] == sidecar["state_checksum"]
    assert verify_export(tmp_path / "out")["files"] == sidecar["files"]
    model = MLPConfig(hidden=16, depth=1).build()
    model.load_state_dict(load_file(tmp_path / "out" / "model.safetensors"))
    for name, param in model.named_parameters():
        assert torch.equal(param, expected[name]), name


def test_trusted_models_come_from_the_config_file_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PEERTRAIN_TRUSTED_MODELS", "my_pkg.models:build,other.m:make")
    assert load_config(tmp_path).trusted_models == ("my_pkg.models:build", "other.m:make")
    monkeypatch.delenv("PEERTRAIN_TRUSTED_MODELS")
    (tmp_path / "config.toml").write_text('trusted_models = ["my_pkg.models:build"]\n')
    assert load_config(tmp_path).trusted_models == ("my_pkg.models:build",)

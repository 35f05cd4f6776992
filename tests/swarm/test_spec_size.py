"""A spec's model size from its config alone matches the model it builds; datasets never name
local files; the budget refuses what is over it."""

from __future__ import annotations

import pytest
import torch
from peertrain.protocol.errors import DecodeError
from peertrain.protocol.packing import pack
from peertrain.swarm.budget import RunBudget, SpecOverBudget, check_budget, spec_size
from peertrain.swarm.data import TextDatasetConfig, dataset_config, file_digest
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.models import GPTConfig, MLPConfig, count_parameters
from peertrain.swarm.models.config import ConfigError
from peertrain.swarm.models.registry import FactoryModelConfig
from peertrain.swarm.models.size import parameter_count
from peertrain.swarm.run_spec import canonical


@pytest.mark.parametrize(
    "config",
    [
        GPTConfig(),
        GPTConfig(n_layer=3, n_embd=48, n_head=6, block_size=32, vocab_size=100),
        MLPConfig(),
        MLPConfig(in_features=10, hidden=7, depth=4, num_classes=3),
    ],
)
def test_the_counted_parameters_are_those_of_the_built_model(config):
    assert parameter_count(config) == count_parameters(config.build(seed=0))


def test_a_factory_model_is_sized_on_the_meta_device_without_storage():
    made = []

    def factory(width: int):
        layer = torch.nn.Linear(width, width)
        made.append(layer.weight.device.type)
        return layer

    config = FactoryModelConfig(source="t:f", factory=factory, settings={"width": 20_000})
    assert parameter_count(config) == 20_000 * 20_000 + 20_000
    assert made == ["meta"]  # 1.6 GB of weights were never allocated


def test_a_spec_naming_files_does_not_decode():
    with pytest.raises(ConfigError, match="may not name local files"):
        dataset_config("text", {"files": ["~/.ssh/id_ed25519"]})
    spec = canonical({"dataset": "text", "dataset_settings": {"files": ["/etc/passwd"]}})
    with pytest.raises(DecodeError, match="may not name local files"):
        DiLoCoSpec.from_bytes(pack(spec))


def test_user_data_must_have_the_digest_the_config_names(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"hello world, " * 2000)
    config = TextDatasetConfig(
        sources=(), data_digest=file_digest(path), chunk_bytes=256, block_size=16, eval_chunks=8
    )
    assert config.build(path).digest  # trains on the file
    other = tmp_path / "other.txt"
    other.write_bytes(b"goodbye world " * 2000)
    with pytest.raises(ConfigError) as refused:
        config.build(other)
    assert file_digest(path) in str(refused.value) and file_digest(other) in str(refused.value)
    with pytest.raises(ConfigError, match="--data PATH"):
        config.build()


def test_the_budget_refuses_a_model_or_dataset_over_it():
    spec = DiLoCoSpec(model="gpt", model_settings={"n_layer": 2, "n_embd": 64, "n_head": 4})
    size = spec_size(spec)
    assert size.params == parameter_count(spec.model_config())
    assert check_budget(spec, RunBudget(max_params=size.params)) == size
    with pytest.raises(SpecOverBudget, match="--max-params"):
        check_budget(spec, RunBudget(max_params=size.params - 1))
    with pytest.raises(SpecOverBudget, match="--max-memory"):
        check_budget(spec, RunBudget(max_memory=size.memory - 1))

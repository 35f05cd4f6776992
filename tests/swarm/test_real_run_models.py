"""The models of the real run (issue 30): `--model gpt-25m` and `hf:examples/llama-25m.json`,
each about 30 M parameters, sized from their configs without training them."""

from __future__ import annotations

from pathlib import Path

import pytest
from peertrain.swarm.models import GPT25MConfig, count_parameters, model_config, resolve_hf
from peertrain.swarm.models.size import parameter_count

LLAMA = Path(__file__).resolve().parents[2] / "examples" / "llama-25m.json"
GPT_25M = 29_545_472


def test_gpt_25m_by_name_is_the_gpt_at_29_5_million_parameters():
    config = model_config("gpt-25m")
    assert isinstance(config, GPT25MConfig) and parameter_count(config) == GPT_25M
    assert count_parameters(config.build(seed=0)) == GPT_25M  # the formula, on the built model
    shape = {"vocab_size": 8192, "block_size": 256, "n_layer": 8, "n_head": 8, "n_embd": 512}
    assert parameter_count(model_config("gpt", shape)) == GPT_25M  # the same by --set
    assert parameter_count(model_config("gpt-25m", {"n_layer": 1})) < 10_000_000  # still --set


def test_the_llama_style_config_is_of_the_same_size():
    pytest.importorskip("transformers", reason="transformers is not installed (peertrain[hf])")
    name, settings = resolve_hf(f"hf:{LLAMA}")
    params = parameter_count(model_config(name, settings))  # on the meta device
    assert name == "hf:llama" and params == 29_893_120
    assert abs(params / GPT_25M - 1) < 0.02

"""Models by name, by installed plugin, and by a trusted import path — never by a stranger's say."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from peertrain.protocol.errors import DecodeError
from peertrain.protocol.packing import pack, unpack
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.models import ConfigError, model_config, registry

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def own_models(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setattr(registry, "_trusted", set())
    monkeypatch.delenv(registry.TRUSTED_ENV, raising=False)
    sys.modules.pop("own_model", None)  # another test may have imported it already
    yield
    sys.modules.pop("own_model", None)


def test_an_untrusted_import_path_is_refused_before_anything_is_imported(own_models):
    with pytest.raises(ConfigError, match="pass --model own_model:build yourself"):
        model_config("own_model:build")
    assert "own_model" not in sys.modules


def test_a_remote_spec_naming_an_import_path_cannot_make_a_joiner_run_code(own_models):
    fields = unpack(DiLoCoSpec(model="gpt", dataset="digits").to_bytes(), max_size=1 << 16)
    raw = pack({**fields, "model": "own_model:build"})  # what a peer's manifest may carry
    with pytest.raises(DecodeError, match="import path"):
        DiLoCoSpec.from_bytes(raw)
    assert "own_model" not in sys.modules


def test_a_trusted_import_path_builds_the_same_weights_from_the_same_seed(own_models):
    registry.trust_import("own_model:build")
    config = model_config("own_model:build", {"channels": 4})
    a, b = config.build(seed=3), config.build(seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    logits, loss = a(torch.randn(5, 64), torch.randint(0, 10, (5,)))
    assert logits.shape == (5, 10) and loss.ndim == 0


def test_the_environment_can_trust_an_import_path(own_models, monkeypatch):
    monkeypatch.setenv(registry.TRUSTED_ENV, "own_model:build")
    assert model_config("own_model:build").build().__class__.__name__ == "TinyConvNet"


def test_a_factory_that_returns_no_module_or_takes_no_such_setting_says_what_to_do(own_models):
    registry.trust_import("own_model:not_a_module")
    registry.trust_import("own_model:build")
    with pytest.raises(ConfigError, match="must return a torch.nn.Module"):
        model_config("own_model:not_a_module").build()
    with pytest.raises(ConfigError, match="unexpected keyword argument 'width'"):
        model_config("own_model:build", {"width": 3}).build()


def test_unknown_names_list_the_ways_to_name_a_model():
    with pytest.raises(ConfigError, match="installed plugin"):
        model_config("no-such-model")

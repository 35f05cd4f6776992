"""The built-in models: deterministic initialisation from a seed, the (logits, loss) contract, and
config errors that say what to do."""

from __future__ import annotations

import math

import pytest
import torch
from peertrain.swarm.models import (
    ConfigError,
    GPTConfig,
    MLPConfig,
    config_to_dict,
    count_parameters,
    model_config,
    sample_text,
)

TINY_GPT = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16)


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_same_seed_builds_identical_weights_and_another_seed_does_not():
    a, b, c = TINY_GPT.build(seed=3), TINY_GPT.build(seed=3), TINY_GPT.build(seed=4)
    assert all(torch.equal(x, y) for x, y in zip(_params(a), _params(b), strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(_params(a), _params(c), strict=True))


def test_building_does_not_touch_the_global_rng():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    TINY_GPT.build(seed=1)
    MLPConfig().build(seed=1)
    assert torch.equal(torch.rand(3), expected)


def test_gpt_forward_shapes_and_initial_loss_near_uniform():
    model = GPTConfig().build(seed=0)
    idx = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(0))
    targets = torch.roll(idx, 1, dims=1)
    logits, loss = model(idx, targets)
    assert logits.shape == (4, 64, 256)
    assert abs(loss.item() - math.log(256)) < 0.3  # small init: close to a uniform guess
    assert model(idx)[1] is None
    assert 100_000 < count_parameters(model) < 300_000  # trains on a CPU in minutes


def test_gpt_rejects_sequences_longer_than_its_block():
    with pytest.raises(ValueError, match="block_size"):
        TINY_GPT.build()(torch.zeros(1, 17, dtype=torch.long))


def test_tied_embedding_is_one_parameter():
    model = TINY_GPT.build()
    assert model.lm_head.weight is model.wte.weight
    names = [n for n, _ in model.named_parameters()]
    assert "lm_head.weight" not in names and "wte.weight" in names


def test_sample_text_continues_the_prompt_deterministically():
    model = TINY_GPT.build(seed=0)
    first = sample_text(model, "def ", max_new_tokens=20, seed=5)
    assert first.startswith("def ") and first == sample_text(
        model, "def ", max_new_tokens=20, seed=5
    )
    assert model.training  # restored after sampling


def test_a_gpt_over_bpe_ids_samples_through_its_tokenizer_and_refuses_without_one():
    pytest.importorskip("tokenizers", reason="pip install peertrain[corpus]")
    from peertrain.swarm.data.prepare import CorpusSettings, train_tokenizer

    texts = ["the kernel schedules tasks on every core", "def main(): return the answer"] * 50
    tokenizer = train_tokenizer(texts, CorpusSettings(vocab_size=320, min_frequency=1))
    model = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16, vocab_size=320).build()
    text = sample_text(model, "the kernel", max_new_tokens=8, seed=1, tokenizer=tokenizer)
    assert text.startswith("the kernel") and len(text) > len("the kernel")
    with pytest.raises(TypeError, match="tokenizer.json beside the token file"):
        sample_text(model, "the kernel", max_new_tokens=8)


def test_mlp_classifier_contract():
    model = MLPConfig(hidden=8).build(seed=0)
    x, y = torch.rand(5, 64), torch.tensor([0, 1, 2, 3, 9])
    logits, loss = model(x, y)
    assert logits.shape == (5, 10) and loss.item() > 0


def test_model_config_from_manifest_settings():
    config = model_config("gpt", {"n_layer": 3, "n_embd": 32, "n_head": 4})
    assert config == GPTConfig(n_layer=3, n_embd=32, n_head=4)
    assert model_config("gpt", config_to_dict(config)) == config


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("gpt", {"n_layers": 3}, "valid settings are: .*n_layer"),
        ("gpt", {"n_embd": 30, "n_head": 4}, "multiple of n_head"),
        ("resnet", {}, "choose one of gpt, gpt-25m, mlp"),
    ],
)
def test_bad_model_settings_say_what_to_do(name, settings, message):
    with pytest.raises(ConfigError, match=message):
        model_config(name, settings)

"""`--model hf:…`: transformers causal LMs from a config or a local folder, never the hub."""

from __future__ import annotations

import json

import pytest
import torch
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.export import export_model
from peertrain.swarm.models import ConfigError, model_config, resolve_hf
from peertrain.swarm.models.size import parameter_count

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

TINY = {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        "max_position_embeddings": 16}  # fmt: skip


def tiny(**changes):
    name, settings = resolve_hf("hf:" + json.dumps({**TINY, **changes}))
    return name, settings, model_config(name, settings)


def test_a_config_inline_in_a_file_or_in_a_folder_becomes_the_same_plain_spec(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "config.json").write_text(json.dumps({**TINY, "_name_or_path": "/x"}))
    (tmp_path / "c.json").write_text(json.dumps(TINY))
    inline = resolve_hf("hf:" + json.dumps(TINY))
    assert resolve_hf(f"hf:{tmp_path / 'c.json'}") == inline
    assert resolve_hf(f"hf:{tmp_path / 'dir'}") == inline  # file noise and paths dropped
    assert inline[0] == "hf:llama" and "model_type" not in inline[1]
    assert resolve_hf("hf:gpt2", {"n_layer": 1}) == ("hf:gpt2", {"n_layer": 1})
    spec = DiLoCoSpec(model=inline[0], model_settings=inline[1])
    assert DiLoCoSpec.from_bytes(spec.to_bytes()) == spec


def test_typos_unknown_architectures_and_remote_code_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="no config field hiden_size"):
        model_config("hf:llama", {"hiden_size": 8})
    with pytest.raises(ConfigError, match="no causal LM"):
        model_config("hf:no_such_arch", {})
    with pytest.raises(ConfigError, match="no auto_map"):
        model_config("hf:llama", {"auto_map": {"AutoModelForCausalLM": "evil.Model"}})
    with pytest.raises(ConfigError, match="not a model_type"):
        resolve_hf(f"hf:{tmp_path / 'missing.json'}")
    with pytest.raises(ConfigError, match="no config.json"):
        resolve_hf(f"hf:{tmp_path}")


def test_the_model_keeps_our_contract_and_every_member_builds_the_same_weights():
    _, _, config = tiny()
    a, b = config.build(seed=3), config.build(seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert parameter_count(config) == sum(p.numel() for p in a.parameters())
    tokens = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    x, y = tokens[:, :-1], tokens[:, 1:]
    logits, loss = a(x, y)
    # transformers shifts labels itself: our (x, y) pairs are already shifted
    theirs = a.hf_model(input_ids=tokens, labels=tokens).loss
    assert logits.shape == (2, 8, 64) and torch.allclose(loss, theirs, atol=1e-5)


def test_a_folder_with_weights_starts_every_member_from_them(tmp_path):
    _, _, config = tiny()
    trained = config.build(seed=0)
    with torch.no_grad():
        trained.hf_model.lm_head.weight.add_(1.0)
    export_model(trained, tmp_path / "ckpt", fmt="hf")
    name, settings = resolve_hf(f"hf:{tmp_path / 'ckpt'}")
    assert len(settings["pretrained"]) == 32  # named by digest, not by path
    built = model_config(name, settings).build(seed=5)
    for p, q in zip(built.parameters(), trained.parameters(), strict=True):
        assert torch.equal(p, q)


def test_weights_the_member_does_not_hold_are_refused_naming_their_digest():
    _, settings, _ = tiny()
    config = model_config("hf:llama", {**settings, "pretrained": "ab" * 16})
    with pytest.raises(ConfigError, match=f"digest {'ab' * 16}: name your copy"):
        config.build()


def test_hf_export_is_a_save_pretrained_folder_that_transformers_loads(tmp_path):
    _, _, config = tiny()
    model = config.build(seed=1).eval()
    sidecar = export_model(model, tmp_path / "out", fmt="hf")
    assert {"config.json", "model.safetensors"} <= set(sidecar["files"])
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    x = torch.arange(8).reshape(1, 8)
    assert torch.equal(again(input_ids=x).logits, model(x)[0])


def test_a_joiner_offers_its_copy_of_the_folder_with_its_model_option(tmp_path):
    """`join --model hf:DIR` reaches the daemon as a trusted model; the folder's weights are then
    what this process builds the run's model from (node/runs/spec_check.py)."""
    from peertrain.node.runs.spec_check import trust_models
    from peertrain.swarm.models import hf

    _, _, config = tiny()
    export_model(config.build(seed=7), tmp_path / "ckpt", fmt="hf")
    name, settings = resolve_hf(f"hf:{tmp_path / 'ckpt'}")
    hf._pretrained.clear()  # a fresh daemon: nobody offered the folder yet
    with pytest.raises(ConfigError, match="name your copy"):
        model_config(name, settings).build()
    trust_models([f"hf:{tmp_path / 'ckpt'}"])
    built = model_config(name, settings).build(seed=0)
    assert torch.equal(built.hf_model.lm_head.weight, config.build(seed=7).hf_model.lm_head.weight)

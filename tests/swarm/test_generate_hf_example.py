"""examples/generate_hf.py: a model peertrain exported in transformers' format writes text in a
plain Python process, loaded by `AutoModelForCausalLM` and decoded by the corpus's tokenizer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from peertrain.swarm.export import export_model
from peertrain.swarm.models import model_config
from peertrain.swarm.models.hf import resolve_hf

pytest.importorskip("transformers", reason="transformers is not installed (peertrain[hf])")
tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is not installed")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "generate_hf.py"
LLAMA = {"model_type": "llama", "vocab_size": 320, "hidden_size": 32, "intermediate_size": 64,
         "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
         "max_position_embeddings": 64, "tie_word_embeddings": True}  # fmt: skip


def tokenizer_file(path: Path) -> Path:
    """A byte-level BPE of 320 tokens, as `peertrain data prepare-corpus` trains one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = ["The kernel schedules tasks.", "Memory is mapped in pages."] * 50
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=320, show_progress=False))
    tok.save(str(path))
    return path


def test_an_hf_export_generates_text_with_transformers_alone(tmp_path):
    name, settings = resolve_hf("hf:" + json.dumps(LLAMA))
    model = model_config(name, settings).build(seed=0)
    export_model(model, tmp_path / "export", fmt="hf", about={"run": "r1", "round": 2})
    tokenizer = tokenizer_file(tmp_path / "tokenizer.json")
    out = subprocess.run(
        [sys.executable, "-I", str(EXAMPLE), str(tmp_path / "export"), "--tokenizer",
         str(tokenizer), "--prompt", "The kernel", "--max-new-tokens", "12"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    *text, last = out.stdout.splitlines()
    figures = json.loads(last)
    assert figures["model_type"] == "llama" and figures["params"] == sum(
        p.numel() for p in model.parameters()
    )
    assert figures["generated_tokens"] == 12 and figures["peertrain_imported"] is False
    assert "\n".join(text).startswith("The kernel")

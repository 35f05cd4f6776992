"""The real run's recipe (issue 30) scaled down, through the commands a user types: a corpus
prepared by `peertrain data prepare-corpus` (a BPE tokenizer trained here, a token file split
99/1), then `peertrain swarm local` training a GPT on that token file with 4 daemons as a DiLoCo
group (int8, flag), ending with one model on every member."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow
pytest.importorskip(
    "tokenizers", reason="tokenizers is not installed: pip install peertrain[corpus]"
)

VOCAB = "512"  # the real run's 8192 needs more text than the pydoc topics' 466 kB
ROUNDS = 4


def peertrain(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "peertrain", *args], capture_output=True, text=True, timeout=timeout
    )


def test_a_prepared_corpus_trains_four_daemons_to_one_model(tmp_path):
    prepare = ["data", "prepare-corpus", "--source", "pydoc", "--vocab-size", VOCAB]
    prepared = peertrain(*prepare, "--out", str(tmp_path / "corpora"), "--json", timeout=120)
    assert prepared.returncode == 0, prepared.stderr
    corpus = json.loads(prepared.stdout)
    run = peertrain(
        *("swarm", "local", "--nodes", "4", "--mode", "diloco"),
        *("--model", "gpt", "--set", f"model_settings.vocab_size={VOCAB}"),
        *("--dataset", "tokens", "--data", corpus["train"]),
        *("--codec", "int8", "--aggregator", "flag"),
        *("--rounds", str(ROUNDS), "--inner-steps", "10"),
        *("--report", str(tmp_path / "report.json")),
        timeout=170,  # with the preparation, under the 3 minutes
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["rounds_completed"] == ROUNDS and report["died"] == []
    assert len(report["state_hashes"]) == 4 and len(set(report["state_hashes"])) == 1
    assert report["final_loss"] < report["initial_loss"] < 6.5  # ln 512 = 6.24 at the start
    assert report["bytes_sent"] < report["ddp_bytes"] / 10  # int8, once per 10 steps
    assert "models identical on all nodes: yes" in run.stdout

"""`peertrain data prepare-corpus`: installed English text, cleaned, a byte-level BPE trained
here, token files split 99/1, cached by the digest of inputs and settings. At a small scale: the
pydoc topics every Python has (466 kB), so no package is needed."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from peertrain.swarm.data import dataset_config
from peertrain.swarm.data.doc_corpus import clean, documents
from peertrain.swarm.data.prepare import CorpusSettings, prepare_corpus
from peertrain.swarm.models import ConfigError

pytest.importorskip(
    "tokenizers", reason="tokenizers is not installed: pip install peertrain[corpus]"
)

SMALL = CorpusSettings(vocab_size=512, chunk_tokens=128)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepare_corpus("pydoc", tmp_path_factory.mktemp("corpora"), SMALL)


def test_the_token_file_is_what_the_tokens_dataset_trains_on(prepared):
    meta = prepared.meta
    assert not prepared.cached and meta["documents"] == 79 and meta["clean_bytes"] > 400_000
    assert meta["vocab_learned"] == 512 and meta["train_digest"] and meta["settings"]["dtype"]
    dataset = dataset_config(
        "tokens", {"data_digest": meta["train_digest"], "chunk_tokens": 256, "block_size": 64}
    ).build(prepared.train)
    assert dataset.num_tokens > 200_000
    x, y = dataset.train_batches(0, 4, batch_size=8, seed=0).batch(0)
    assert x.shape == (8, 64) and int(x.max()) < 512 and (x[:, 1:] == y[:, :-1]).all()


def test_one_percent_is_held_out_in_whole_chunks_and_decodes_to_the_text(prepared):
    train = np.fromfile(prepared.train, dtype=np.uint16)
    val = np.fromfile(prepared.val, dtype=np.uint16)
    assert len(val) == prepared.meta["tokens_val"] and len(val) % 128 == 0
    assert abs(len(val) / (len(train) + len(val)) - 0.01) < 0.001  # 99/1 to within a chunk
    from tokenizers import Tokenizer

    text = Tokenizer.from_file(str(prepared.tokenizer)).decode(train[:400].tolist())
    assert text.startswith(clean(documents("pydoc")[1][0].raw)[:200])  # byte-level: exact


def test_a_second_run_is_a_cache_hit_and_another_machine_gets_the_same_bytes(prepared, tmp_path):
    started = time.monotonic()
    again = prepare_corpus("pydoc", prepared.folder.parent, SMALL)
    assert again.cached and again.folder == prepared.folder and again.meta == prepared.meta
    assert time.monotonic() - started < 0.5
    elsewhere = prepare_corpus("pydoc", tmp_path, SMALL)  # a member preparing its own copy
    assert not elsewhere.cached and elsewhere.folder.name == prepared.folder.name
    assert elsewhere.meta["train_digest"] == prepared.meta["train_digest"]
    other = prepare_corpus("pydoc", tmp_path, CorpusSettings(vocab_size=576, chunk_tokens=128))
    assert other.folder != elsewhere.folder  # other settings, another folder
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [other.folder.name, elsewhere.folder.name]
    )


def test_cleaning_drops_markup_lines_and_keeps_prose():
    raw = b"Title\n=====\n\n.. code-block:: c\n\n  x = 1;   \n\n\n\n+---+\nSome prose.\n"
    assert clean(raw) == "Title\n\n  x = 1;\n\n+---+\nSome prose."


def test_a_missing_package_a_bad_vocabulary_or_too_little_text_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="apt-get install linux-doc"):
        prepare_corpus("linux-doc", tmp_path, SMALL, doc_root=tmp_path)
    with pytest.raises(ConfigError, match="multiple of 64"):
        CorpusSettings(vocab_size=8100)
    (tmp_path / "a.txt").write_text("a few words " * 100)
    with pytest.raises(ConfigError, match="too few to hold out"):
        prepare_corpus(str(tmp_path / "a.txt"), tmp_path / "out", SMALL)


def test_the_command_names_the_package_to_install_and_prints_the_folder(tmp_path):
    command = [sys.executable, "-m", "peertrain", "data", "prepare-corpus", "--out", str(tmp_path)]
    missing = subprocess.run(
        [*command, "--doc-root", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip().count("\n") == 0 and "apt-get install linux-doc" in missing.stderr
    small = [*command, "--source", "pydoc", "--vocab-size", "512", "--chunk-tokens", "128"]
    first = json.loads(subprocess.run([*small, "--json"], capture_output=True, check=True).stdout)
    quiet = subprocess.run([*small, "--quiet"], capture_output=True, text=True, check=True)
    assert not first["cached"] and quiet.stdout.strip() == first["folder"]
    assert first["train"].endswith("train.bin") and first["tokens_val"] > 0

"""Datasets without downloads, deterministic disjoint shards, step-addressed batches."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from peertrain.swarm.data import (
    ConcatBatches,
    DigitsDatasetConfig,
    InterleavedBatches,
    TextDatasetConfig,
    assign_shards,
    dataset_config,
    load_corpus,
    shard_indices,
    split_eval,
    stdlib_source_files,
)
from peertrain.swarm.models import ConfigError

SMALL_TEXT = TextDatasetConfig(max_bytes=60_000, chunk_bytes=256, block_size=16, eval_chunks=8)


@pytest.fixture(scope="module")
def text():
    return SMALL_TEXT.build()


def test_stdlib_corpus_is_deterministic_capped_and_python_source():
    a = load_corpus(("stdlib",), max_bytes=20_000)
    assert a == load_corpus(("stdlib",), max_bytes=20_000)
    assert len(a) == 20_000
    files = stdlib_source_files()
    assert files and all(f.suffix == ".py" for f in files)
    assert not any("site-packages" in f.parts or "test" in f.parts for f in files)
    assert files[0].read_bytes()[:100] in a  # first file in sorted order comes first


def test_pydoc_and_user_files_sources(tmp_path):
    pydoc = load_corpus(("pydoc",), max_bytes=5_000)
    assert len(pydoc) == 5_000 and b"\n" in pydoc
    (tmp_path / "a.txt").write_bytes(b"alpha " * 100)
    (tmp_path / "b.txt").write_bytes(b"beta " * 100)
    files = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    both = load_corpus((), files, max_bytes=10_000)
    assert both.startswith(b"alpha") and both.endswith(b"beta ")
    with pytest.raises(ConfigError, match="does not exist"):
        load_corpus((), [str(tmp_path / "missing.txt")], max_bytes=10)
    with pytest.raises(ConfigError, match="unknown text source"):
        load_corpus(("wikipedia",), max_bytes=10)


def test_shards_are_deterministic_disjoint_and_cover_the_training_items():
    _, train = split_eval(100, 10, split_seed=0)
    shards = [shard_indices(train, k, 4, seed=7) for k in range(4)]
    again = [shard_indices(train, k, 4, seed=7) for k in range(4)]
    assert all(torch.equal(a, b) for a, b in zip(shards, again, strict=True))
    joined = torch.cat(shards)
    assert len(set(joined.tolist())) == len(joined) == 90
    assert set(joined.tolist()) == set(train.tolist())
    other_seed = [shard_indices(train, k, 4, seed=8) for k in range(4)]
    assert not all(torch.equal(a, b) for a, b in zip(shards, other_seed, strict=True))


def test_eval_split_is_disjoint_from_training():
    evals, train = split_eval(50, 5, split_seed=1)
    assert len(evals) == 5 and not set(evals.tolist()) & set(train.tolist())
    with pytest.raises(ConfigError):
        split_eval(5, 5, split_seed=1)


def test_peer_ids_map_to_disjoint_shards_independent_of_listing_order():
    peers = [f"12D3KooW{i:04d}" for i in range(5)]
    mapping = assign_shards(3, peers, num_shards=8)
    assert mapping == assign_shards(3, list(reversed(peers)), num_shards=8)
    assert len(set(mapping.values())) == 5
    assert mapping != assign_shards(4, peers, num_shards=8)


def test_text_shards_draw_windows_only_from_their_own_chunks(text):
    shard0 = text.train_batches(0, 2, batch_size=16, seed=1)
    shard1 = text.train_batches(1, 2, batch_size=16, seed=1)
    own0 = {bytes(row.tolist()) for row in shard0.chunks}
    own1 = {bytes(row.tolist()) for row in shard1.chunks}
    assert not own0 & own1
    x, y = shard0.batch(5)
    assert x.shape == y.shape == (16, 16) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one
    for row in torch.cat([x, y[:, -1:]], dim=1):
        window = bytes(row.tolist())
        assert any(window in chunk for chunk in own0)
    evals = {bytes(row.tolist()) for row in text.chunks[text.eval_index]}
    assert not evals & (own0 | own1)


def test_batches_are_a_function_of_the_step(text):
    a = text.train_batches(0, 2, batch_size=4, seed=1)
    b = text.train_batches(0, 2, batch_size=4, seed=1)
    assert torch.equal(a.batch(3)[0], b.batch(3)[0])
    assert not torch.equal(a.batch(3)[0], a.batch(4)[0])


def test_data_parallel_and_single_worker_compositions_see_the_same_batches(text):
    parts = [text.train_batches(k, 3, batch_size=2, seed=0) for k in range(3)]
    concat, walk = ConcatBatches(parts), InterleavedBatches(parts)
    assert concat.batch_size == 6
    x, _ = concat.batch(4)
    walked = torch.cat([walk.batch(4 * 3 + k)[0] for k in range(3)])
    assert torch.equal(x, walked)


def test_eval_batches_are_fixed_and_cover_eval_chunks(text):
    batches = text.eval_batches(batch_size=32)
    again = text.eval_batches(batch_size=32)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again, strict=True))
    assert sum(len(x) for x, _ in batches) == 8 * (255 // 16)


def test_digits_dataset_shards_and_batches():
    digits = DigitsDatasetConfig().build()
    assert digits.x.shape == (1797, 64) and float(digits.x.max()) == 1.0
    shards = [digits.train_batches(k, 3, batch_size=10, seed=2) for k in range(3)]
    rows = [{tuple(r.tolist()) for r in s.x} for s in shards]
    assert sum(len(r) for r in rows) <= 1797 - 360
    x, y = shards[1].batch(0)
    assert x.shape == (10, 64) and y.dtype == torch.long
    assert sum(len(x) for x, _ in digits.eval_batches(batch_size=100)) == 360


def test_dataset_config_rejects_unknown_settings():
    assert dataset_config("text", {"max_bytes": 1000}).max_bytes == 1000
    with pytest.raises(ConfigError, match="valid settings"):
        dataset_config("text", {"maxbytes": 1000})
    with pytest.raises(ConfigError, match="exceed block_size"):
        TextDatasetConfig(chunk_bytes=16, block_size=16)


def test_digits_are_sklearns_digits_read_without_importing_sklearn():
    # sklearn's import was most of a digits member's start; the table must be the same
    code = (
        "import sys, numpy as np\n"
        "from peertrain.swarm.data.digits import load_digits_arrays\n"
        "from peertrain.swarm.diffusion.data import load_digits_images\n"
        "pixels, labels = load_digits_arrays()\n"
        "images = load_digits_images()\n"
        "assert 'sklearn' not in sys.modules, 'sklearn was imported'\n"
        "from sklearn.datasets import load_digits\n"
        "bunch = load_digits()\n"
        "assert pixels.dtype == bunch.data.dtype and np.array_equal(pixels, bunch.data)\n"
        "assert np.array_equal(labels, bunch.target)\n"
        "import blake3\n"  # the digest names a diffusion run's data: it must not change
        "old = (bunch.images / 16.0).tobytes() + np.asarray(bunch.target).tobytes()\n"
        "assert images.digest == blake3.blake3(old).hexdigest()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

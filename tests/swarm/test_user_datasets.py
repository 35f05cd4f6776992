"""Token files (memory-mapped, nanoGPT's .bin) and image folders: user data named by digest."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from peertrain.swarm.data import (
    ImageFolderConfig,
    TokenDatasetConfig,
    data_digest,
    dataset_config,
    folder_digest,
)
from peertrain.swarm.diloco.member.build import build_member
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.models import ConfigError


def token_file(path, n=100_000, dtype=np.uint16, high=300):
    """A nanoGPT-style .bin: token ids as raw little-endian integers, nothing else."""
    np.random.default_rng(0).integers(0, high, n).astype(dtype).tofile(path)
    return path


def tokens(path, **settings):
    config = TokenDatasetConfig(data_digest=data_digest("tokens", str(path)), **settings)
    return config.build(path)


def test_token_windows_are_slices_of_the_memory_mapped_file(tmp_path):
    path = token_file(tmp_path / "train.bin")
    dataset = tokens(path, chunk_tokens=256, block_size=32, eval_chunks=8)
    assert isinstance(dataset.chunks, np.memmap)  # read on demand, never loaded whole
    flat = np.fromfile(path, dtype=np.uint16).astype(np.int64)
    x, y = dataset.train_batches(0, 2, batch_size=4, seed=1).batch(7)
    assert x.shape == y.shape == (4, 32) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row in x.numpy():  # every window occurs in the file
        starts = np.flatnonzero(flat[: len(flat) - 32] == row[0])
        assert any((flat[s : s + 32] == row).all() for s in starts)
    ex, ey = dataset.eval_batches(batch_size=16)[0]
    assert ex.shape == (16, 32) and torch.equal(ex[:, 1:], ey[:, :-1])


def test_token_shards_draw_from_disjoint_chunks(tmp_path):
    dataset = tokens(token_file(tmp_path / "t.bin"), chunk_tokens=200, block_size=16)
    seen = []
    for shard in (0, 1):
        batches = dataset.train_batches(shard, 2, batch_size=8, seed=3)
        seen.append({int(r) for r in batches.rows})
        assert set(batches.rows.tolist()).isdisjoint(dataset.eval_index.tolist())
    assert seen[0].isdisjoint(seen[1])


def test_uint32_token_files_hold_ids_past_65535(tmp_path):
    path = token_file(tmp_path / "big.bin", dtype=np.uint32, high=100_000)
    x, _ = tokens(path, dtype="uint32").train_batches(0, 1, batch_size=64, seed=0).batch(0)
    assert int(x.max()) > 65_535


def test_a_token_file_with_other_contents_is_refused_naming_both_digests(tmp_path):
    path = token_file(tmp_path / "a.bin")
    config = TokenDatasetConfig(data_digest=data_digest("tokens", str(path)))
    other = token_file(tmp_path / "b.bin", n=100_001)
    found = data_digest("tokens", str(other))
    with pytest.raises(ConfigError, match=f"has digest {found}.*digest {config.data_digest}"):
        config.build(other)
    with pytest.raises(ConfigError, match="--dataset tokens --data FILE.bin"):
        dataset_config("tokens", {})
    (tmp_path / "odd.bin").write_bytes(b"\x00" * 40_001)
    odd = TokenDatasetConfig(data_digest=data_digest("tokens", str(tmp_path / "odd.bin")))
    with pytest.raises(ConfigError, match="not a whole number of uint16"):
        odd.build(tmp_path / "odd.bin")


def test_a_gpt_trains_on_a_token_file_through_the_run_spec(tmp_path):
    path = token_file(tmp_path / "train.bin", high=64)
    settings = {"data_digest": data_digest("tokens", str(path)), "block_size": 32}
    spec = DiLoCoSpec(
        model="gpt",
        model_settings={"vocab_size": 64, "block_size": 32, "n_layer": 1, "n_embd": 32},
        dataset="tokens",
        dataset_settings=settings,
        inner_steps=2,
        batch_size=4,
    )
    built = build_member(spec, "peer", data=str(path), eval_batches=1)
    report = built.member.inner.run(2)
    assert report.steps == 2 and np.isfinite(report.last_loss)


try:
    from PIL import Image
except ImportError:  # the image tests skip; the token tests above still run
    Image = None
needs_pillow = pytest.mark.skipif(
    Image is None, reason="Pillow is not installed (peertrain[images])"
)


def image_folder(root, per_class=12):
    rng = np.random.default_rng(0)
    for label, shade in (("cat", 40), ("dog", 200)):
        (root / label).mkdir(parents=True)
        for i in range(per_class):
            pixels = np.clip(rng.normal(shade, 20, (10, 12, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i:03d}.png")
    return root


def images(root, **settings):
    return ImageFolderConfig(data_digest=folder_digest(root), **settings).build(root)


@needs_pillow
def test_an_image_folder_gives_float_images_and_class_labels(tmp_path):
    dataset = images(image_folder(tmp_path / "pets"), image_size=8, eval_items=4)
    assert dataset.classes == ["cat", "dog"] and dataset.x.dtype == torch.uint8
    x, y = dataset.train_batches(0, 1, batch_size=16, seed=0).batch(0)
    assert x.shape == (16, 3, 8, 8) and x.dtype == torch.float32
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    # the classes are told apart by shade: dark cats, light dogs
    means = x.mean(dim=(1, 2, 3))
    assert (means[y == 0] < 0.4).all() and (means[y == 1] > 0.6).all()
    grey = images(tmp_path / "pets", image_size=4, channels=1, eval_items=4)
    assert grey.eval_batches(batch_size=4)[0][0].shape == (4, 1, 4, 4)


@needs_pillow
def test_a_folder_digest_covers_every_image_and_nothing_else(tmp_path):
    root = image_folder(tmp_path / "pets")
    before = folder_digest(root)
    (root / ".DS_Store").write_bytes(b"junk")
    (root / "cat" / "notes.txt").write_text("not an image")
    assert folder_digest(root) == before
    (root / "dog" / "000.png").rename(root / "cat" / "999.png")  # a relabelled image
    assert folder_digest(root) != before


@needs_pillow
def test_another_image_folder_is_refused_naming_both_digests(tmp_path):
    root = image_folder(tmp_path / "a")
    config = ImageFolderConfig(data_digest=folder_digest(root), eval_items=4)
    other = image_folder(tmp_path / "b", per_class=11)
    found = folder_digest(other)
    with pytest.raises(ConfigError, match=f"has digest {found}.*digest {config.data_digest}"):
        config.build(other)
    with pytest.raises(ConfigError, match="not a folder"):
        config.build(root / "cat" / "000.png")
    (root / "cat" / "000.png").write_bytes(b"not a png")
    broken = ImageFolderConfig(data_digest=folder_digest(root), eval_items=4)
    with pytest.raises(ConfigError, match="000.png: not an image Pillow can read"):
        broken.build(root)


@needs_pillow
def test_the_creators_spec_names_a_token_file_or_an_image_folder_by_digest(tmp_path):
    from peertrain.node.errors import ControlError
    from peertrain.node.runs.spec_check import with_data_digest

    path = token_file(tmp_path / "train.bin")
    spec = with_data_digest({"dataset": "tokens"}, str(path))
    assert spec["dataset_settings"] == {"data_digest": data_digest("tokens", str(path))}
    root = image_folder(tmp_path / "pets")
    spec = with_data_digest({"dataset": "images"}, str(root))
    assert spec["dataset_settings"]["data_digest"] == folder_digest(root)
    with pytest.raises(ControlError, match="is not a folder"):
        with_data_digest({"dataset": "images"}, str(path))

"""Checkpoints: exact round trip, atomic commit, corruption detected, content addresses, last K."""

from __future__ import annotations

import json

import pytest
import torch
from peertrain.swarm.data import DigitsDatasetConfig
from peertrain.swarm.diloco import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointStore,
    DiLoCoMember,
    InnerConfig,
    ProtocolCodec,
)
from peertrain.swarm.diloco.member.checkpoint import content_hash
from peertrain.swarm.models import MLPConfig
from peertrain.testing.diloco_group import LocalGroup

INNER = InnerConfig(steps=3, batch_size=16, lr=1e-2, warmup_steps=2)


@pytest.fixture(scope="module")
def digits():
    return DigitsDatasetConfig().build()


def trained_group(digits, rounds: int, *, model_seed: int = 0) -> LocalGroup:
    members = [
        DiLoCoMember(
            MLPConfig(hidden=16, depth=1).build(seed=model_seed),
            digits.train_batches(k, 2, batch_size=16, seed=1),
            inner=INNER,
            codec=ProtocolCodec("int8"),
        )
        for k in range(2)
    ]
    group = LocalGroup(members)
    for _ in range(rounds):
        group.run_round()
    return group


def test_round_trip_restores_the_member_exactly(tmp_path, digits):
    group = trained_group(digits, 2)
    store = CheckpointStore(tmp_path)
    info = store.save(group.members[0].snapshot(), manifest_hash="m" * 8)
    assert info.round == 2 and info.manifest_hash == "m" * 8
    assert info.state_hash == group.members[0].state_hash()

    state = store.load(info.id)
    original = group.members[0].snapshot()
    assert state.round == original.round and state.inner_step == original.inner_step
    assert all(torch.equal(state.params[k], v) for k, v in original.params.items())
    assert torch.equal(state.momentum, original.momentum)
    assert torch.equal(state.residual, original.residual)
    for index, slots in original.inner_optimizer["state"].items():
        for key, value in slots.items():
            assert torch.equal(state.inner_optimizer["state"][index][key], value)

    # Members restored from disk continue exactly as the ones that never stopped.
    resumed = trained_group(digits, 0, model_seed=7)
    for k, (member, source) in enumerate(zip(resumed.members, group.members, strict=True)):
        own_store = CheckpointStore(tmp_path / f"member-{k}")
        member.restore(own_store.load(own_store.save(source.snapshot()).id))
    expected = group.run_round()[0].state_hash
    assert resumed.run_round()[0].state_hash == expected


def test_files_are_content_addressed_safetensors_and_json(tmp_path, digits):
    store = CheckpointStore(tmp_path)
    info = store.save(trained_group(digits, 1).members[0].snapshot())
    sidecar = (tmp_path / f"{info.id}.json").read_bytes()
    tensors = (tmp_path / f"{info.tensors_digest}.safetensors").read_bytes()
    assert content_hash(sidecar) == info.id and content_hash(tensors) == info.tensors_digest
    assert json.loads(sidecar)["tensors_digest"] == info.tensors_digest
    header_len = int.from_bytes(tensors[:8], "little")  # safetensors: u64 length + JSON header
    assert "outer/momentum" in json.loads(tensors[8 : 8 + header_len])
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".safetensors"]


def test_a_partial_temporary_file_is_ignored_and_cleaned(tmp_path, digits):
    store = CheckpointStore(tmp_path)
    info = store.save(trained_group(digits, 1).members[0].snapshot())
    # a crash mid-write leaves a temporary file, and perhaps tensors whose sidecar never landed
    (tmp_path / ".tmp-0123-deadbeef.json").write_bytes(b'{"format": "peertr')
    (tmp_path / f"{'ab' * 32}.safetensors").write_bytes(b"\x00" * 10)
    assert [i.id for i in store.list()] == [info.id]
    latest = store.latest()
    assert latest is not None and latest[0].id == info.id
    reopened = CheckpointStore(tmp_path)
    assert not list(tmp_path.glob(".tmp-*"))
    reopened.prune()  # unreferenced tensor files go with pruning
    assert not (tmp_path / f"{'ab' * 32}.safetensors").exists()


@pytest.mark.parametrize("target", ["tensors", "sidecar"])
def test_corruption_is_detected_and_latest_falls_back(tmp_path, digits, target):
    group = trained_group(digits, 1)
    store = CheckpointStore(tmp_path, keep=3)
    older = store.save(group.members[0].snapshot())
    group.run_round()
    newer = store.save(group.members[0].snapshot())
    path = (
        tmp_path / f"{newer.tensors_digest}.safetensors"
        if target == "tensors"
        else tmp_path / f"{newer.id}.json"
    )
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # one flipped bit
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorrupt):
        store.load(newer.id)
    latest = store.latest()
    assert latest is not None and latest[0].id == older.id


def test_tensors_that_do_not_match_the_recorded_state_hash_are_rejected(tmp_path, digits):
    from peertrain.swarm.diloco.member.checkpoint import decode_checkpoint, encode_checkpoint

    member = trained_group(digits, 1).members[0]
    good = encode_checkpoint(member.snapshot())
    sidecar = json.loads(good.sidecar)
    sidecar["state_hash"] = "0" * 64  # a consistent file pair that lies about the state
    forged = json.dumps(sidecar, sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(CheckpointCorrupt, match="state hash"):
        decode_checkpoint(content_hash(forged), forged, good.tensors)


def test_only_the_last_k_checkpoints_are_kept(tmp_path, digits):
    group = trained_group(digits, 0)
    store = CheckpointStore(tmp_path, keep=2)
    infos = []
    for _ in range(4):
        group.run_round()
        infos.append(store.save(group.members[0].snapshot()))
    assert [i.round for i in store.list()] == [3, 4]
    assert len(list(tmp_path.glob("*.safetensors"))) == 2
    with pytest.raises(CheckpointError):
        store.load(infos[0].id)


def test_missing_checkpoint_and_bad_names_are_clear_errors(tmp_path):
    store = CheckpointStore(tmp_path)
    with pytest.raises(CheckpointError, match="missing"):
        store.load("0" * 64)
    with pytest.raises(CheckpointError, match="not a checkpoint hash"):
        store.load("../../etc/passwd")
    assert store.latest() is None


def test_a_checkpoint_over_the_disk_budget_is_refused_before_anything_is_written(tmp_path, digits):
    from peertrain.node.net.budget import BudgetLimits, ResourceBudget

    budget = ResourceBudget(BudgetLimits(disk=4096), home=tmp_path)  # the node's runs/ folder
    store = CheckpointStore(tmp_path / "runs" / "r" / "checkpoints", room=budget.check_disk)
    with pytest.raises(CheckpointError, match="no room"):
        store.save(trained_group(digits, 1).members[0].snapshot())
    assert list(store.directory.iterdir()) == [] and budget.refused["disk"] == 1
    roomy = ResourceBudget(BudgetLimits(disk=1 << 30), home=tmp_path)
    store.room = roomy.check_disk
    assert store.save(trained_group(digits, 1).members[0].snapshot()).round == 1

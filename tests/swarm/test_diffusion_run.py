"""A diffusion run's policy without a network: its spec, its partition artifact, which group a
joiner takes, what a sampler fetches, and the group member inside the DiLoCo machinery."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from peertrain.crdt.records import MEMBER, MemberInfo
from peertrain.crdt.runstate import RunState
from peertrain.crdt.writer import RunWriter
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.diffusion.errors import DiffusionError, PartitionCorrupt
from peertrain.swarm.diffusion.group_member import (
    build_group_member,
    group_data,
    member_state_of,
    model_from_state,
)
from peertrain.swarm.diffusion.groups import (
    choose_group,
    group_progress,
    newest_states,
    seed_state,
)
from peertrain.swarm.diffusion.run_partition import (
    images_of,
    open_partition,
    partition_address,
    with_partition,
)
from peertrain.swarm.diffusion.run_spec import DiffusionSpec
from peertrain.swarm.diffusion.sampling_job import draw
from peertrain.swarm.errors import ConfigError

SETTINGS = {"experts": 2, "inner_steps": 2, "batch_size": 8, "fine_clusters": 16}


@pytest.fixture(scope="module")
def run():
    spec, artifact = with_partition(SETTINGS)
    return spec, artifact, open_partition(spec, artifact)


def test_the_spec_round_trips_and_names_its_partition_and_cluster_sizes(run):
    spec, artifact, partition = run
    assert DiffusionSpec.from_bytes(spec.to_bytes()) == spec
    assert spec.partition == partition_address(artifact)
    assert spec.cluster_sizes == tuple(partition.sizes().tolist())
    assert sum(spec.cluster_sizes) == len(images_of(spec).images)
    assert len(artifact) % 8 == 0  # carried by the tensor service as float32 words
    assert spec.groups() == ["expert-0", "expert-1", "router"]
    assert len({spec.group_spec(g).seed for g in spec.groups()}) == 3


@pytest.mark.parametrize(
    "bad",
    [
        {"experts": 1},
        {"dataset": "text"},
        {"model": "gpt"},
        {"partition": "zz" * 32},
        {"cluster_sizes": [5]},
        {"dataset_settings": {"path": "/etc/passwd"}},
    ],
)
def test_bad_specs_are_refused(bad):
    with pytest.raises(ConfigError):
        DiffusionSpec(**{**SETTINGS, **bad})


def test_a_remote_spec_with_unknown_fields_is_a_decode_error(run):
    spec = run[0]
    raw = dataclasses.replace(spec, experts=3, cluster_sizes=()).to_bytes()
    assert DiffusionSpec.from_bytes(raw).experts == 3
    with pytest.raises(DecodeError):
        DiffusionSpec.from_bytes(raw.replace(b"experts", b"expertz"))


def test_a_partition_that_is_not_the_named_one_is_refused(run):
    spec, artifact, _ = run
    tampered = bytearray(artifact)
    tampered[-1] ^= 1
    with pytest.raises(PartitionCorrupt):
        open_partition(spec, bytes(tampered))
    other, other_artifact = with_partition({**SETTINGS, "seed": 1})
    with pytest.raises(PartitionCorrupt):
        open_partition(spec, other_artifact)


def _state_with(members: dict[str, str], spec: DiffusionSpec, checkpoints=()) -> RunState:
    state = RunState("r" * 64)
    writers = {p: RunWriter(state, p) for p in members}
    for peer, group in members.items():
        writers[peer].announce(role=group, addrs=[], lease_ms=60_000, loss=0.5)
    for peer, round_, checksum in checkpoints:
        writers[peer].provide_checkpoint(round_, checksum)
    return state


def test_joiners_take_the_group_with_the_fewest_members_per_image():
    spec = DiffusionSpec(**SETTINGS, cluster_sizes=(1000, 500))
    sizes = list(spec.cluster_sizes)
    state = _state_with({}, spec)
    assert choose_group(state, spec, sizes, "me") == "expert-0"  # all empty: the biggest
    state = _state_with({"a": "expert-0"}, spec)
    assert choose_group(state, spec, sizes, "me") == "router"  # 750 images' worth, empty
    state = _state_with({"a": "expert-0", "b": "router"}, spec)
    assert choose_group(state, spec, sizes, "me") == "expert-1"
    state = _state_with({"a": "expert-0", "b": "router", "c": "expert-1"}, spec)
    assert choose_group(state, spec, sizes, "me") == "expert-0"  # 1/1000 < 1/750 < 1/500
    # our own record does not count against the group we are in
    state = _state_with({"me": "expert-1", "b": "router", "c": "expert-0"}, spec)
    assert choose_group(state, spec, sizes, "me") == "expert-1"


def test_a_sampler_takes_each_groups_newest_state_announced_by_its_own_members():
    spec = DiffusionSpec(**SETTINGS)
    members = {"a": "expert-0", "b": "expert-0", "c": "expert-1", "d": "router", "x": "other"}
    checkpoints = [
        ("a", 3, b"A3"), ("b", 3, b"B3"), ("a", 2, b"A2"),
        ("c", 1, b"C1"), ("d", 4, b"D4"), ("x", 9, b"X9"),
    ]  # fmt: skip
    state = _state_with(members, spec, checkpoints)
    newest = newest_states(state, spec)
    assert newest["expert-0"].round == 3 and newest["expert-0"].checksum == b"B3"  # tie: larger
    assert newest["expert-1"].checksum == b"C1" and newest["expert-1"].providers == {"c"}
    assert newest["router"].checksum == b"D4"  # x's round 9 belongs to no group
    progress = group_progress(state, spec)
    assert progress["expert-0"]["members"] == ["a", "b"] and progress["router"]["round"] == 4
    assert progress["expert-1"]["loss"] == 0.5


def test_a_member_of_a_group_without_a_trusted_signer_starts_from_its_members_newest_state():
    spec = DiffusionSpec(**SETTINGS, anchors=("z",))
    members = {"me": "expert-1", "c": "expert-1", "e": "expert-1", "a": "expert-0", "z": "router"}
    checkpoints = [("c", 5, b"C5"), ("e", 4, b"E4"), ("me", 9, b"M9"), ("a", 7, b"A7")]
    state = _state_with(members, spec, checkpoints)
    seed = seed_state(state, spec, "expert-1", "me", creator="a")
    # the others' newest, never our own announcement (a restarted member's old view of itself)
    assert (seed.round, seed.checksum, seed.providers) == (5, b"C5", {"c"})
    # where the creator or an anchor trains, DiLoCo's trusted catch-up decides instead
    assert seed_state(state, spec, "expert-0", "me", creator="a") is None
    assert seed_state(state, spec, "router", "me", creator="a") is None
    assert (
        seed_state(_state_with({"me": "expert-1"}, spec), spec, "expert-1", "me", creator="a")
        is None
    )


def test_a_fetched_state_becomes_a_checkpoint_only_when_it_fits_and_is_finite(run):
    spec, _, partition = run
    built = build_group_member(spec, "router", "p", images_of(spec).images, partition.assignments)
    numel = built.member.layout.numel
    flat = torch.cat([built.member.global_params + 1, torch.full((numel,), 0.5)])
    state = member_state_of(spec, "router", flat, 7)
    fresh = build_group_member(spec, "router", "q", images_of(spec).images, partition.assignments)
    fresh.member.restore(state)
    assert fresh.member.round == 7
    assert torch.equal(fresh.member.global_params, built.member.global_params + 1)
    assert torch.equal(fresh.member.outer.momentum_buffer, torch.full((numel,), 0.5))
    with pytest.raises(DiffusionError, match="NaN"):
        member_state_of(spec, "router", torch.full_like(flat, float("nan")), 7)
    with pytest.raises(DiffusionError, match="needs"):
        member_state_of(spec, "expert-0", flat, 7)


def test_a_lone_member_trains_on_all_of_its_groups_images_and_members_draw_apart(run):
    # dealt in fixed eighths, a router of one member saw 1/8 of the images and collapsed to
    # the cluster prior after ~30 rounds (accuracy 0.697 at t = 0.1, as in a churn run)
    spec, _, partition = run
    images = images_of(spec).images
    for group in ("router", "expert-1"):
        data = group_data(images, partition.assignments, group)
        lone = data.train_batches(0, spec.num_shards, batch_size=8, seed=3)
        assert len(lone.images) == len(data.images)  # every image of the group
        other = data.train_batches(1, spec.num_shards, batch_size=8, seed=3)
        assert not torch.equal(lone.batch(0)[0], other.batch(0)[0])  # their own batches
        assert torch.equal(lone.batch(5)[1], lone.batch(5)[1])  # addressed by step


def test_member_records_carry_a_loss_and_old_records_still_decode():
    with_loss = MemberInfo(
        role="router", addrs=("a",), throughput=1.0, lease_expiry_ms=5, loss=0.25
    )
    assert MEMBER.decode(MEMBER.encode(with_loss)) == with_loss
    plain = dataclasses.replace(with_loss, loss=None)
    assert len(MEMBER.encode(plain)) == 4 and MEMBER.decode(MEMBER.encode(plain)) == plain
    with pytest.raises(DecodeError):
        MEMBER.decode(["router", ["a"], 1.0, 5, b""])  # an empty certificate is left out
    with pytest.raises(DecodeError):
        MEMBER.decode(["router", ["a"], 1.0, 5, b"", float("nan")])


def test_group_members_train_inside_diloco_and_samplers_rebuild_their_models(run):
    spec, _, partition = run
    images = images_of(spec).images
    a = build_group_member(spec, "expert-0", "peer-a", images, partition.assignments)
    b = build_group_member(spec, "expert-0", "peer-b", images, partition.assignments)
    router = build_group_member(spec, "router", "peer-c", images, partition.assignments)
    assert torch.equal(a.member.global_params, b.member.global_params)  # one start per group
    before = a.eval_loss()
    a.member.inner.run(20)
    a.member.global_params.copy_(a.member.layout.flatten())
    assert a.eval_loss() < before
    states = {}
    for group, built in (("expert-0", a), ("expert-1", b), ("router", router)):
        numel = built.member.layout.numel
        states[group] = torch.cat([built.member.global_params, torch.zeros(numel)])
    x, t = torch.randn(3, 1, 8, 8), torch.full((3,), 0.5)
    with torch.no_grad():
        rebuilt = model_from_state(spec, "expert-0", states["expert-0"])
        assert torch.allclose(rebuilt(x, t), a.member.model.dit(x, t), atol=1e-6)
    first = draw(spec, states, n=4, steps=3, strategy="sample1", seed=5)
    assert first.shape == (4, 1, 8, 8) and torch.equal(
        first, draw(spec, states, n=4, steps=3, strategy="sample1", seed=5)
    )
    with pytest.raises(Exception, match="needs"):
        model_from_state(spec, "router", states["expert-0"])

"""Streaming DiLoCo: fragments cover the model once with layers interleaved, the staggered schedule
names each exchange by (round, fragment), members end with equal per-fragment checksums, and
P=1, τ=0 is plain DiLoCo bit for bit."""

from __future__ import annotations

import pytest
import torch
from peertrain.swarm.data import TextDatasetConfig
from peertrain.swarm.diloco import (
    Contribution,
    DiLoCoError,
    DiLoCoMember,
    InnerConfig,
    ParamLayout,
    ProtocolCodec,
    StreamingConfig,
    StreamingMember,
    evaluate,
)
from peertrain.swarm.diloco.member.fragments import FragmentSchedule, block_index, split_fragments
from peertrain.swarm.models import ConfigError, GPTConfig
from peertrain.testing import LocalGroup, StreamingGroup

MODEL = GPTConfig(block_size=16, n_layer=4, n_head=2, n_embd=16)
INNER = InnerConfig(steps=8, batch_size=8, lr=3e-3, warmup_steps=4)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def text():
    return TextDatasetConfig(max_bytes=100_000, block_size=MODEL.block_size).build()


def streaming_members(text, n: int, config: StreamingConfig, *, codec: str = "int8"):
    return [
        StreamingMember(
            MODEL.build(seed=0),
            text.train_batches(k, n, batch_size=INNER.batch_size, seed=0),
            inner=INNER,
            streaming=config,
            codec=ProtocolCodec(codec),
        )
        for k in range(n)
    ]


def test_fragments_cover_every_parameter_once_with_layers_interleaved():
    layout = ParamLayout(MODEL.build(seed=0))
    for count in (1, 2, 4):
        fragments = split_fragments(layout, count)
        ranges = sorted(r for f in fragments for r in f.ranges)
        assert [a for a, _ in ranges] == [0] + [b for _, b in ranges[:-1]]  # no gap, no overlap
        assert ranges[-1][1] == layout.numel == sum(f.numel for f in fragments)
        assert {n for f in fragments for n in f.names} == set(layout.names)
        for f in fragments:
            blocks = {block_index(n) for n in f.names} - {None}
            assert blocks == {b for b in range(4) if b % count == f.index}
    # embeddings and the final norm fill the lightest fragments up to 1/P of the model, split
    # where one does not fit whole, so an exchange carries 1/P (the quality benchmark's model,
    # whose embedding is larger than a block)
    for width in (32, 48):
        wider = ParamLayout(GPTConfig(n_layer=4, n_embd=width).build(seed=0))
        sizes = [f.numel for f in split_fragments(wider, 4)]
        assert max(sizes) <= -(-wider.numel // 4), (width, sizes)
    with pytest.raises(ConfigError, match="cannot fill 12 fragments"):
        split_fragments(layout, 12)


def test_gather_and_scatter_are_inverse_on_the_flat_layout():
    model = MODEL.build(seed=0)
    layout = ParamLayout(model)
    flat = torch.randn(layout.numel)
    out = torch.zeros(layout.numel)
    fragments = split_fragments(layout, 4)
    assert any("[" in label for f in fragments for label in f.labels)  # a tensor split in parts
    for f in fragments:
        assert f.gather(flat).numel() == f.numel
        f.scatter(out, f.gather(flat))
    assert torch.equal(out, flat)
    # the model's values at a fragment's ranges, read and written in place, parts included
    for f in fragments:
        layout.load_ranges(f.ranges, f.gather(flat))
    assert torch.equal(layout.flatten(), flat)
    assert torch.equal(layout.flatten_ranges(fragments[1].ranges), fragments[1].gather(flat))


def test_schedule_staggers_fragments_by_h_over_p():
    s = FragmentSchedule(inner_steps=12, fragments=4)
    due = {t: s.due(t) for t in range(1, 25) if s.due(t) is not None}
    assert list(due) == [3, 6, 9, 12, 15, 18, 21, 24]
    # fragment p syncs when (t − p·H/P) mod H == 0
    for t, slot in due.items():
        p = s.fragment(slot)
        assert (t - p * 3) % 12 == 0
        assert s.slot(p, s.fragment_round(slot)) == slot and s.step(slot) == t
    assert [(s.fragment(x), s.fragment_round(x)) for x in due.values()] == [
        (1, 0), (2, 0), (3, 0), (0, 0), (1, 1), (2, 1), (3, 1), (0, 1)
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="multiple of fragments"):
        FragmentSchedule(inner_steps=10, fragments=4)


def test_one_fragment_without_overlap_is_plain_diloco_bit_for_bit(text):
    diloco = [
        DiLoCoMember(
            MODEL.build(seed=0),
            text.train_batches(k, 3, batch_size=INNER.batch_size, seed=0),
            inner=INNER,
            codec=ProtocolCodec("int8"),
        )
        for k in range(3)
    ]
    local = LocalGroup(diloco)
    for _ in range(3):
        local.run_round()
    streaming = StreamingGroup(streaming_members(text, 3, StreamingConfig()))
    streaming.run(3 * INNER.steps)
    assert streaming.members[0].fragment_hashes() == [diloco[0].state_hash()]
    assert torch.equal(streaming.members[0].global_params, diloco[0].global_params)


@pytest.mark.parametrize(
    "config",
    [
        StreamingConfig(fragments=2, overlap=0),
        StreamingConfig(fragments=4, overlap=1, mix=0.5),
        StreamingConfig(fragments=4, overlap=3, mix=0.5, eager=True),
    ],
    ids=["P2", "P4-tau1-mix", "P4-tau3-eager"],
)
def test_members_end_with_equal_checksums_per_fragment_and_learn(text, config):
    group = StreamingGroup(streaming_members(text, 3, config))
    evalset = text.eval_batches(batch_size=64, max_batches=2)
    before = evaluate(group.members[0].model, evalset)
    group.run(5 * INNER.steps)
    group.finish()
    hashes = [m.fragment_hashes() for m in group.members]
    assert hashes[0] == hashes[1] == hashes[2]
    assert len(set(hashes[0])) == config.fragments  # each fragment has its own state
    assert group.members[0].rounds == [5] * config.fragments
    for reports in group.reports:  # every exchange: all three updates counted, no rejection
        assert all(len(r.accepted) == 3 and not r.rejected for r in reports)
    assert evaluate(group.members[0].model, evalset) < before - 0.5
    # each exchange carries one fragment (int8: a byte per value and the block scales)
    largest = max(f.numel for f in group.members[0].fragments)
    assert largest <= group.peak_exchange_bytes <= 1.05 * largest + 64
    assert group.peak_exchange_bytes < (1 / config.fragments + 0.2) * group.members[0].layout.numel


def test_a_bad_update_is_refused_in_its_fragment_only(text):
    members = streaming_members(text, 3, StreamingConfig(fragments=2))
    slot = None
    for m in members:
        m.train(INNER.steps // 2)
        slot = m.due()
    assert slot == 1
    payloads = [bytes(m.prepare_fragment(slot)) for m in members]
    forged = payloads[2][:8] + bytes([0xFF]) * 8 + payloads[2][16:]  # NaN block scales
    contributions = [
        Contribution(sender="a", payload=payloads[0]),
        Contribution(sender="b", payload=payloads[1]),
        Contribution(sender="c", payload=forged),
    ]
    reports = [m.apply_fragment(slot, contributions) for m in members]
    assert all(r.accepted == ("a", "b") and r.rejected[0][0] == "c" for r in reports)
    assert len({r.state_hash for r in reports}) == 1
    assert [m.rounds for m in members] == [[0, 1]] * 3
    with pytest.raises(DiLoCoError, match="round 0 of fragment 1, which is at round 1"):
        members[0].apply_fragment(slot, contributions)


def test_updates_count_by_their_sample_claims_clipped_to_the_runs_pace(text):
    members = streaming_members(text, 3, StreamingConfig(fragments=2))
    for m, steps in zip(members, (4, 4, 2), strict=True):  # the third is half as fast
        m.train(steps)
    payloads = [bytes(m.prepare_fragment(1)) for m in members]
    per_step = INNER.batch_size
    assert [int.from_bytes(p[:8], "little") for p in payloads] == [4 * per_step] * 2 + [
        2 * per_step
    ]
    boasted = (2**40).to_bytes(8, "little") + payloads[1][8:]  # clipped to H steps' samples
    contributions = [
        Contribution(sender=s, payload=p)
        for s, p in zip("abc", (payloads[0], boasted, payloads[2]), strict=True)
    ]
    reports = [m.apply_fragment(1, contributions) for m in members]
    assert reports[0].weights == pytest.approx((32 / 112, 64 / 112, 16 / 112))
    assert len({r.state_hash for r in reports}) == 1
    short = [Contribution(sender="d", payload=b"1234")]
    other = streaming_members(text, 1, StreamingConfig(fragments=2))[0]
    other.train(4)
    assert other.apply_fragment(1, short).rejected == (
        ("d", "payload too short for its sample count"),
    )


def test_the_run_must_fit_its_schedule():
    with pytest.raises(ConfigError, match="multiple of fragments"):
        StreamingConfig(fragments=3).check(8)
    with pytest.raises(ConfigError, match="below inner steps"):
        StreamingConfig(overlap=8).check(8)
    with pytest.raises(ConfigError, match="mix"):
        StreamingConfig(mix=1.0)

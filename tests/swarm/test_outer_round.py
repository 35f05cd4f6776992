"""A round's compute after the exchange (`apply_contributions`): int8 updates read in place, chunk
by chunk, give the aggregate and outer step of decoding them whole, bit for bit, and every check
on a remote update still holds (sizes, finite scales, norm bound)."""

from __future__ import annotations

import math

import pytest
import torch
from peertrain.protocol import int8_blockwise, int8_fused
from peertrain.swarm.aggregation import AGGREGATORS, build_aggregator
from peertrain.swarm.diloco.member import outer_step
from peertrain.swarm.diloco.member.config import OuterConfig
from peertrain.swarm.diloco.member.member import (
    apply_contributions,
    decode_contributions,
    rejection_kind,
)
from peertrain.swarm.diloco.member.outer_step import NesterovOuterOptimizer
from peertrain.swarm.exchange.codec import ProtocolCodec
from peertrain.swarm.exchange.interface import Contribution
from peertrain.swarm.exchange.payload_source import QuantizedSource

pytestmark = pytest.mark.skipif(not int8_fused.available(), reason="numba is not installed")

D = 150_001  # a partial last block, and several aggregation chunks of the sizes below
OPTIONS = {"trimmed-mean": {"f": 1}, "multi-krum": {"f": 1}, "flag": {"r": None}}


@pytest.fixture
def in_place(monkeypatch):
    """Small updates take the large-model path (read in place through the compiled kernel)."""
    monkeypatch.setattr(int8_blockwise, "FUSED_MIN_NUMEL", 1 << 10)


def _payloads(p: int = 6, scale_last: float = 1.0) -> list[Contribution]:
    gen = torch.Generator().manual_seed(11)
    base = torch.randn(D, generator=gen) * 1e-3
    codec = ProtocolCodec("int8")
    out = []
    for k in range(p):
        delta = base + torch.randn(D, generator=gen) * 1e-3 * (1 + k / 4)
        if k == p - 1:
            delta *= scale_last
        out.append(Contribution(sender=f"peer{k}", payload=bytes(codec.encode(delta))))
    return out


def _reference(contributions, aggregator, outer_config, params):
    """The old path: each payload decoded whole, the rule on tensors, one-pass outer step."""
    codec = ProtocolCodec("int8")
    deltas = [codec.decode(c.payload, D) for c in contributions]
    result = aggregator.aggregate(deltas, numel=D)
    momentum = torch.zeros(D)
    lr, m = outer_config.lr, outer_config.momentum
    momentum.mul_(m).add_(result.update)
    params = params.clone()
    params.sub_(result.update.add(momentum, alpha=m), alpha=lr)
    return result, params, momentum


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_in_place_reads_give_the_decoded_aggregate_and_step_bit_for_bit(
    in_place, monkeypatch, name
):
    contributions = _payloads(scale_last=40.0)  # the last one is refused for its norm
    aggregator = build_aggregator(name, max_norm_ratio=4.0, **OPTIONS.get(name, {}))
    start = torch.randn(D, generator=torch.Generator().manual_seed(2))
    expected, expected_params, expected_momentum = _reference(
        contributions, aggregator, OuterConfig(), start
    )
    assert isinstance(ProtocolCodec("int8").source(contributions[0].payload, D), QuantizedSource)
    before = torch.get_num_threads()
    try:
        for threads, chunk in ((1, 1 << 20), (2, 777), (2, 1 << 18)):
            torch.set_num_threads(threads)
            monkeypatch.setattr(outer_step, "CHUNK", chunk)
            rule = build_aggregator(
                name, max_norm_ratio=4.0, chunk_size=chunk, **OPTIONS.get(name, {})
            )
            outer, params = NesterovOuterOptimizer(D, OuterConfig()), start.clone()
            accepted, rejected, norm = apply_contributions(
                contributions, codec=ProtocolCodec("int8"), aggregator=rule, outer=outer,
                params=params, out=torch.empty(D),
            )  # fmt: skip
            assert accepted == [f"peer{k}" for k in expected.accepted]
            assert [s for s, _ in rejected] == ["peer5"] and "norm" in rejected[0][1]
            assert torch.equal(params, expected_params), (threads, chunk)
            assert torch.equal(outer.momentum_buffer, expected_momentum), (threads, chunk)
            assert math.isclose(norm, float(expected.update.norm()), rel_tol=1e-6)
    finally:
        torch.set_num_threads(before)


def test_the_outer_step_in_chunks_is_the_one_pass_step_bit_for_bit(monkeypatch):
    gen = torch.Generator().manual_seed(5)
    start, grads = torch.randn(D, generator=gen), [torch.randn(D, generator=gen) for _ in range(3)]
    for nesterov in (True, False):
        config = OuterConfig(nesterov=nesterov)
        results = []
        for chunk in (1 << 30, 1000, 4096):
            monkeypatch.setattr(outer_step, "CHUNK", chunk)
            outer, params = NesterovOuterOptimizer(D, config), start.clone()
            for g in grads:
                outer.step(params, g)
            results.append((params, outer.momentum_buffer))
        assert all(torch.equal(p, results[0][0]) for p, _ in results)
        assert all(torch.equal(m, results[0][1]) for _, m in results)


def test_remote_updates_read_in_place_are_still_checked_before_aggregation(in_place):
    good = _payloads(p=3)
    nan_scale = bytearray(good[0].payload)
    nan_scale[0:4] = b"\x00\x00\xc0\x7f"  # the first block's scale: NaN
    negative = bytearray(good[0].payload)
    negative[4:8] = b"\x00\x00\x80\xbf"  # -1.0
    bad = [
        Contribution(sender="x-nan", payload=bytes(nan_scale)),
        Contribution(sender="y-negative", payload=bytes(negative)),
        Contribution(sender="z-short", payload=good[0].payload[:-1]),
    ]
    outer, params = NesterovOuterOptimizer(D, OuterConfig()), torch.zeros(D)
    accepted, rejected, norm = apply_contributions(
        good + bad, codec=ProtocolCodec("int8"), aggregator=build_aggregator("mean"),
        outer=outer, params=params,
    )  # fmt: skip
    assert accepted == ["peer0", "peer1", "peer2"]
    assert [s for s, _ in rejected] == ["x-nan", "y-negative", "z-short"]
    assert {rejection_kind(why) for _, why in rejected} == {"undecodable"}
    assert math.isfinite(norm) and torch.isfinite(params).all()


def test_payloads_admitted_as_they_arrive_aggregate_as_if_checked_at_the_end(in_place):
    """A member checks and measures each payload as it arrives (DiLoCoMember.admit); the
    round then skips that work and ends in the same state, bit for bit. An admitted entry
    counts only for the very payload admitted, and an undecodable one is left to be refused."""
    from peertrain.swarm.exchange.payload_source import Admissions

    contributions = _payloads(p=4)
    codec, rule = ProtocolCodec("int8"), build_aggregator("mean", max_norm_ratio=4.0)
    results = []
    for admit in (False, True):
        admissions = Admissions()
        if admit:
            for c in contributions[:3]:
                admissions.admit(codec, D, c.sender, c.payload)
            admissions.admit(
                codec, D, "peer3", bytes(bytearray(contributions[3].payload))
            )  # a copy
            admissions.admit(codec, D, "broken", b"junk")
            taken = admissions.take()
            assert sorted(taken) == ["peer0", "peer1", "peer2", "peer3"]
            assert all(source.known_sq_norm is not None for _, source in taken.values())
            _, _, sources = decode_contributions(
                codec, D, contributions, as_sources=True, admitted=taken
            )
            assert [s is taken[f"peer{k}"][1] for k, s in enumerate(sources)] == [
                True, True, True, False  # peer3: another object than the one admitted
            ]  # fmt: skip
        else:
            taken = admissions.take()
        outer, params = NesterovOuterOptimizer(D, OuterConfig()), torch.zeros(D)
        report = apply_contributions(
            [*contributions, Contribution(sender="broken", payload=b"junk")],
            codec=codec, aggregator=rule, outer=outer, params=params, admitted=taken,
        )  # fmt: skip
        results.append((report, params))
    (plain, plain_params), (admitted, admitted_params) = results
    assert plain[:2] == admitted[:2] and [s for s, _ in admitted[1]] == ["broken"]
    assert plain[2] == admitted[2] and torch.equal(plain_params, admitted_params)

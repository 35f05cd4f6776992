"""Inputs are judged before any rule sees them; rejected inputs are reported, never fatal."""

from __future__ import annotations

import pytest
import torch
from peertrain.swarm.aggregation import AGGREGATORS, RejectReason, build_aggregator


def _honest(p: int = 7, d: int = 64) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    centre = torch.randn(d, generator=gen)
    return [centre + 0.3 * torch.randn(d, generator=gen) for _ in range(p)]


def _with_nan() -> torch.Tensor:
    bad = _honest()[0].clone()
    bad[5] = float("nan")
    return bad


def _with_inf(sign: float) -> torch.Tensor:
    bad = _honest()[0].clone()
    bad[-1] = sign * float("inf")
    return bad


BAD_INPUTS = {
    "nan": (_with_nan, RejectReason.NON_FINITE),
    "+inf": (lambda: _with_inf(1.0), RejectReason.NON_FINITE),
    "-inf": (lambda: _with_inf(-1.0), RejectReason.NON_FINITE),
    "overflowing norm": (lambda: torch.full((64,), 1e30), RejectReason.NON_FINITE),
    "float64": (lambda: _honest()[0].double(), RejectReason.DTYPE),
    "float16": (lambda: _honest()[0].half(), RejectReason.DTYPE),
    "int": (lambda: torch.ones(64, dtype=torch.int32), RejectReason.DTYPE),
    "2-D": (lambda: _honest()[0].reshape(8, 8), RejectReason.SHAPE),
    "too short": (lambda: _honest()[0][:63], RejectReason.SHAPE),
    "too long": (lambda: torch.zeros(65), RejectReason.SHAPE),
    "not a tensor": (lambda: [0.0] * 64, RejectReason.NOT_A_TENSOR),
    "absurd norm": (lambda: _honest()[0] * 1e5, RejectReason.NORM),
}


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
@pytest.mark.parametrize("bad", sorted(BAD_INPUTS))
def test_bad_input_is_rejected_with_a_reason_and_ignored(name, bad):
    make, reason = BAD_INPUTS[bad]
    honest = _honest()
    inputs: list[object] = honest[:3] + [make()] + honest[3:]
    rule = build_aggregator(name)

    result = rule.aggregate(inputs)

    assert [v.index for v in result.rejected] == [3]
    assert result.verdicts[3].reason is reason and result.verdicts[3].detail
    assert [v.index for v in result.verdicts] == list(range(8))
    assert torch.isfinite(result.update).all()
    assert torch.allclose(result.update, rule.aggregate(honest).update, atol=1e-6)
    if result.weights is not None:
        assert result.weights[3] == 0.0


def test_norm_limit_is_relative_to_the_median_and_configurable():
    honest = _honest()
    loud = honest[0] * 50
    assert not build_aggregator("mean").aggregate(honest + [loud]).rejected  # 50x < 1000x
    strict = build_aggregator("mean", max_norm_ratio=10).aggregate(honest + [loud])
    assert [(v.index, v.reason) for v in strict.rejected] == [(7, RejectReason.NORM)]
    off = build_aggregator("mean", max_norm_ratio=None).aggregate(honest + [loud * 1e6])
    assert not off.rejected


def test_norms_are_reported_on_accepted_verdicts():
    honest = _honest()
    result = build_aggregator("median").aggregate(honest)
    assert [v.norm for v in result.verdicts] == pytest.approx([float(u.norm()) for u in honest])


def test_all_zero_median_disables_the_norm_test_instead_of_rejecting_everything():
    inputs = [torch.zeros(16)] * 4 + [torch.ones(16)]
    assert not build_aggregator("mean").aggregate(inputs).rejected


def test_explicit_length_rejects_every_input_of_another_length():
    from peertrain.swarm.aggregation import NotEnoughUpdates

    with pytest.raises(NotEnoughUpdates) as caught:
        build_aggregator("mean").aggregate(_honest(), numel=32)
    assert {v.reason for v in caught.value.verdicts} == {RejectReason.SHAPE}


def test_no_inputs_at_all_is_not_enough():
    from peertrain.swarm.aggregation import NotEnoughUpdates

    with pytest.raises(NotEnoughUpdates, match="0 of 0"):
        build_aggregator("flag").aggregate([])

"""Attack hooks: each forges what its paper describes, reproducibly, and none crashes a rule."""

from __future__ import annotations

import math

import pytest
import torch
from peertrain.swarm.aggregation import AGGREGATORS, RejectReason, build_aggregator
from peertrain.swarm.attacks import ATTACKS, AttackContext, UnknownAttack, alie_z, build_attack

D = 4000


def _round(n: int = 15, f: int = 3, seed: int = 0) -> tuple[list[torch.Tensor], AttackContext]:
    gen = torch.Generator().manual_seed(seed)
    centre = torch.randn(D, generator=gen)
    honest = [centre + 0.5 * torch.randn(D, generator=gen) for _ in range(n - f)]
    context = AttackContext(
        num_workers=n, num_byzantine=f, honest=honest, generator=torch.Generator().manual_seed(1)
    )
    return honest, context


def test_the_cli_names_are_all_there():
    assert set(ATTACKS) == {
        "sign-flip",
        "sign-flip-10",
        "noise",
        "alie",
        "ipm",
        "random",
        "nan",
        "scaled",
    }
    with pytest.raises(UnknownAttack, match="choose one of"):
        build_attack("flip")
    with pytest.raises(UnknownAttack, match="attack 'noise'"):
        build_attack("noise", sigma=3)


def test_sign_flips():
    honest, context = _round()
    g = honest[0]
    assert torch.equal(build_attack("sign-flip")(g, context), -g)
    assert torch.equal(build_attack("sign-flip-10")(g, context), -10 * g)
    assert torch.equal(build_attack("sign-flip-10", scale=3.0)(g, context), -3 * g)


def test_noise_is_scaled_to_the_update_and_reproducible():
    honest, context = _round()
    g = honest[0]
    sent = build_attack("noise", scale=30.0)(g, context)
    rms = g.norm() / math.sqrt(D)
    assert float((sent - g).std() / rms) == pytest.approx(30.0, rel=0.05)
    again = build_attack("noise", scale=30.0)(g, _round()[1])
    assert torch.equal(sent, again)


def test_alie_z_matches_the_papers_formula():
    # n = 15, f = 3: s = ⌊15/2 + 1⌋ − 3 = 5, z = Φ⁻¹(10/15) = 0.4307
    assert alie_z(15, 3) == pytest.approx(0.4307, abs=1e-4)
    # n = 50, f = 12: s = 14, z = Φ⁻¹(36/50) = 0.5828
    assert alie_z(50, 12) == pytest.approx(0.5828, abs=1e-4)
    assert math.isfinite(alie_z(4, 3))


def test_alie_sends_mean_minus_z_std_of_the_honest_updates():
    honest, context = _round()
    stack = torch.stack(honest)
    sent = build_attack("alie")(honest[0], context)
    expected = stack.mean(0) - alie_z(15, 3) * stack.std(0)
    assert torch.allclose(sent, expected)
    # blind (no honest updates seen): falls back to the node's own update
    blind = AttackContext(num_workers=15, num_byzantine=3)
    sent = build_attack("alie", z=1.0)(honest[0], blind)
    assert torch.allclose(sent, honest[0] - honest[0].abs())


def test_ipm_sends_minus_epsilon_times_the_honest_mean():
    honest, context = _round()
    sent = build_attack("ipm", epsilon=0.5)(honest[0], context)
    assert torch.allclose(sent, -0.5 * torch.stack(honest).mean(0))
    assert float(sent @ torch.stack(honest).mean(0)) < 0


def test_random_keeps_the_norm_and_loses_the_direction():
    honest, context = _round()
    sent = build_attack("random")(honest[0], context)
    assert float(sent.norm()) == pytest.approx(float(honest[0].norm()), rel=1e-5)
    assert abs(float(torch.nn.functional.cosine_similarity(sent, honest[0], dim=0))) < 0.1


def test_nan_is_rejected_by_validation():
    honest, context = _round()
    forged = [build_attack("nan")(g, context) for g in honest[:3]]
    result = build_aggregator("flag").aggregate(honest + forged)
    assert [v.reason for v in result.rejected] == [RejectReason.NON_FINITE] * 3


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("rule", sorted(AGGREGATORS))
def test_every_attack_through_every_rule_yields_a_finite_update(attack, rule):
    honest, context = _round()
    forged = [build_attack(attack)(g, context) for g in honest[:3]]
    options = {"f": 3} if rule in ("trimmed-mean", "multi-krum") else {}
    result = build_aggregator(rule, **options).aggregate(honest + forged)
    assert result.update.shape == (D,) and torch.isfinite(result.update).all()


@pytest.mark.parametrize("attack", ["sign-flip-10", "noise", "random", "ipm"])
def test_flag_stays_with_the_honest_mean_where_the_mean_is_dragged_off(attack):
    honest, context = _round()
    forged = [build_attack(attack)(g, context) for g in honest[:3]]
    target = torch.stack(honest).mean(0)

    def angle(update: torch.Tensor) -> float:
        cos = float(torch.nn.functional.cosine_similarity(update, target, dim=0))
        return math.degrees(math.acos(max(-1.0, min(1.0, cos))))

    assert angle(build_aggregator("flag").aggregate(honest + forged).update) < 15
    if attack in ("sign-flip-10", "noise"):
        assert angle(build_aggregator("mean").aggregate(honest + forged).update) > 45

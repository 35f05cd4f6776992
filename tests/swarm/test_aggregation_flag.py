"""Flag Aggregator: the Gram-space computation against the authors' algorithm done directly in
R^d, and the properties the issue pins (fixed point, scale invariance, monotone objective,
robustness to sign flips)."""

from __future__ import annotations

import math

import pytest
import torch
from peertrain.swarm.aggregation import FlagAggregator, build_aggregator
from peertrain.swarm.aggregation.flag import flag_irls, unit_gram


def _angle_deg(a: torch.Tensor, b: torch.Tensor) -> float:
    cos = torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0)
    return math.degrees(math.acos(max(-1.0, min(1.0, float(cos)))))


def _honest(
    p: int, d: int, seed: int, spread: float = 1.0
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    centre = torch.randn(d, generator=gen)
    return centre, [centre + spread * torch.randn(d, generator=gen) for _ in range(p)]


def _direct_flag(
    updates: list[torch.Tensor], r: int, lam: float, iterations: int, eps: float = 1e-7
) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """The authors' algorithm in R^d (float64): explicit Y, SVD of the weighted column matrix.
    Initial Y: random orthonormal in the orthogonal complement of the inputs' span, the
    high-dimensional situation our Gram-space start reproduces (see flag.py)."""
    x = torch.stack([u.double() / u.double().norm() for u in updates], dim=1)  # d×p
    d, p = x.shape
    gen = torch.Generator().manual_seed(5)
    q, _ = torch.linalg.qr(x)
    raw = torch.randn(d, r, dtype=torch.float64, generator=gen)
    y = torch.linalg.qr(raw - q @ (q.T @ raw))[0][:, :r]

    def objective(y: torch.Tensor) -> float:
        return float((1 - ((y.T @ x) ** 2).sum(0)).clamp_min(0).sqrt().sum())

    errs = [objective(y)]
    for _ in range(iterations):
        cols = [
            ((1 - (y.T @ x[:, i]).square().sum()).abs() + eps) ** -0.25 * x[:, i] for i in range(p)
        ]
        if lam > 0:
            for i in range(p):
                for j in range(p):
                    if i != j:
                        diff = x[:, i] - x[:, j]
                        w = ((1 - (y.T @ diff).square().sum()).abs() + eps) ** -0.25
                        cols.append(w * lam / (p * (p - 1)) * diff)
        new_y = torch.linalg.svd(torch.stack(cols, dim=1), full_matrices=False)[0][:, :r]
        value = objective(new_y)
        if value >= errs[-1]:
            break
        y = new_y
        errs.append(value)
        if errs[-2] - errs[-1] <= 1e-10:
            break
    output = (y @ (y.T @ x.sum(dim=1))) / r
    return output, ((y.T @ x) ** 2).sum(0), errs


@pytest.mark.parametrize(
    ("r", "lam", "iterations"), [(3, 0.0, 1), (3, 0.0, 6), (2, 0.7, 4), (4, 25.0, 3)]
)
def test_gram_space_matches_the_direct_algorithm(r, lam, iterations):
    _, updates = _honest(p=7, d=60, seed=r + iterations, spread=1.5)
    updates[0] = -4 * updates[0]  # an outlier, so the weights matter
    expected, explained, errs = _direct_flag(updates, r, lam, iterations)

    agg = FlagAggregator(r=r, lam=lam, iterations=iterations, rescale="none")
    result = agg.aggregate(updates)

    assert torch.allclose(result.update.double(), expected, atol=1e-5, rtol=1e-4)
    assert torch.allclose(torch.tensor(result.scores, dtype=torch.float64), explained, atol=1e-6)
    assert result.objective == pytest.approx(errs, abs=1e-6)


@pytest.mark.parametrize("options", [{}, {"r": 1}, {"r": 4, "lam": 1.0, "iterations": 5}])
def test_identical_inputs_give_that_input_back(options):
    g = torch.randn(5000, generator=torch.Generator().manual_seed(1))
    result = build_aggregator("flag", **options).aggregate([g.clone() for _ in range(9)])
    assert torch.allclose(result.update, g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("index", [0, 3, 6])
@pytest.mark.parametrize("factor", [1e-3, 0.5, 40.0])
def test_output_is_invariant_to_rescaling_any_one_input(index, factor):
    _, updates = _honest(p=7, d=400, seed=2, spread=2.0)
    scaled = list(updates)
    scaled[index] = updates[index] * factor

    raw = FlagAggregator(rescale="none", r=3, iterations=4)
    assert torch.allclose(raw.aggregate(scaled).update, raw.aggregate(updates).update, atol=1e-5)
    # rescaled to the median norm, the direction cannot move (the length may, with the median)
    default = FlagAggregator(r=3, iterations=4)
    assert _angle_deg(default.aggregate(scaled).update, default.aggregate(updates).update) < 1e-2


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lam", [0.0, 2.0])
def test_objective_never_increases_across_iterations(seed, lam):
    _, updates = _honest(p=10, d=200, seed=seed, spread=3.0)
    updates[1] = -10 * updates[1]
    updates[2] = torch.randn(200, generator=torch.Generator().manual_seed(99)) * 50
    result = FlagAggregator(r=3, lam=lam, iterations=30).aggregate(updates)
    history = result.objective
    assert len(history) >= 3, "IRLS should take several improving steps on this data"
    assert all(b < a for a, b in zip(history, history[1:], strict=False))


@pytest.mark.parametrize("seed", range(3))
def test_irls_steps_themselves_descend_without_the_guard(seed):
    """The keep-if-better guard makes the accepted history monotone by construction; this checks
    the IRLS iterate itself (a majorise-minimise step) descends, i.e. the weights are right."""
    _, updates = _honest(p=12, d=300, seed=seed, spread=3.0)
    gram = torch.stack(updates).double() @ torch.stack(updates).double().T
    solution = flag_irls(unit_gram(gram), r=4, iterations=40)
    values = (float(len(updates)),) + solution.candidates
    assert all(b <= a + 1e-9 for a, b in zip(values, values[1:], strict=False))
    assert values[-1] < values[1] - 1e-3  # and iterating past the first step helps


@pytest.mark.parametrize("scale", [1.0, 10.0])
@pytest.mark.parametrize("byzantine", [1, 3, 4])
def test_sign_flipped_minority_leaves_output_near_honest_mean(scale, byzantine):
    centre, honest = _honest(p=15 - byzantine, d=2000, seed=byzantine, spread=1.0)
    flipped = [-scale * u for u in honest[:byzantine]]
    honest_mean = torch.stack(honest).mean(0)

    flag = build_aggregator("flag").aggregate(honest + flipped).update
    assert _angle_deg(flag, honest_mean) < 15.0
    # the same inputs do move the mean far off when the attackers shout: the test can tell
    if scale == 10.0:
        assert _angle_deg(torch.stack(honest + flipped).mean(0), honest_mean) > 60.0


def test_fewer_inputs_than_r_and_a_zero_input():
    _, updates = _honest(p=3, d=100, seed=4)
    with_zero = updates + [torch.zeros(100)]
    result = FlagAggregator(r=8, rescale="none").aggregate(with_zero)
    alone = FlagAggregator(r=8, rescale="none").aggregate(updates)
    # r ≥ p: Y spans all inputs, so (1/r) Σ Y Yᵀ x_i is (1/r) Σ x_i; the zero input adds nothing
    units = torch.stack([u / u.norm() for u in updates]).sum(0) / 8
    assert torch.allclose(result.update, units, atol=1e-5)
    assert torch.allclose(alone.update, units, atol=1e-5)
    assert result.weights[3] == 0.0


def test_outlier_gets_low_explained_fraction():
    _, updates = _honest(p=9, d=500, seed=6, spread=0.3)
    updates.append(torch.randn(500, generator=torch.Generator().manual_seed(7)))
    scores = FlagAggregator(r=1, iterations=5).aggregate(updates).scores
    assert scores[-1] < 0.2 < min(scores[:-1])


def test_a_rank_from_the_group_size_keeps_an_orthogonal_outlier_out():
    # p <= r makes Flag a normalised mean: r = 8 with five inputs takes the outlier in
    g = torch.Generator().manual_seed(1)
    base = torch.randn(2000, generator=g)
    honest = [base + 0.3 * torch.randn(2000, generator=g) for _ in range(4)]
    outlier = torch.randn(2000, generator=g)
    outlier = outlier * honest[0].norm() / outlier.norm()  # a norm bound cannot tell it apart

    def cosine_with_outlier(r):
        update = FlagAggregator(r=r).aggregate([*honest, outlier]).update
        return float(torch.nn.functional.cosine_similarity(update, outlier, dim=0))

    assert cosine_with_outlier(8) > 0.2
    assert cosine_with_outlier(None) < 0.05

"""Flag Aggregator (Almasi et al., ICLR 2024), computed in the p×p Gram space.

The rule, as its authors implement it (hamidralmasi/FlagAggregator, aggregators/flag.py):
normalise each input to x_i = g_i/‖g_i‖; find an r-dimensional subspace Y ∈ R^{d×r} (orthonormal)
minimising the sine-median objective Σ_i √(1 − ‖Yᵀx_i‖²) by IRLS:

    w_i  = (|1 − ‖Yᵀx_i‖²| + ε)^(−1/4)
    w_ij = λ/(p(p−1)) · (|1 − ‖Yᵀ(x_i − x_j)‖²| + ε)^(−1/4)        (ordered pairs i ≠ j)
    Y   ← top-r left singular vectors of [w_i x_i …, w_ij (x_i − x_j) …]
    keep the new Y only if the objective decreased (stop otherwise)

and output (1/r) Σ_i Y Yᵀ x_i. Each IRLS step is a majorise-minimise step of the concave √, so
the (ε-smoothed) objective does not increase; the keep-only-if-better guard makes that exact.

Gram space. Write X = [x_1 … x_p] (d×p) and G = XᵀX (p×p, from one chunked pass over the data).
The weighted column matrix is M = X·A, and M Mᵀ = X B Xᵀ with B = A Aᵀ = diag(w²) +
2·(diag(Ω𝟙) − Ω), Ω_ij = w_ij² (each unordered pair appears twice). With L = B^{1/2}, M has the
same left singular vectors as X L, whose Gram is Lᵀ G L = V Λ Vᵀ, so

    Y = X C,   C = L V_r Λ_r^{−1/2}   (p×r, and CᵀGC = I)

Y stays in span(X) and is carried as its coefficient matrix C: ‖Yᵀx_i‖² is the squared norm of
column i of P = Cᵀ G, the pairwise terms come from PᵀP, and the output is X·c with
c = (1/r) C Cᵀ G 𝟙. The d-dimensional data are touched only to build G and once to write Σ a_i g_i
(a_i = c_i/‖g_i‖, times the rescale factor), both chunk by chunk: O(d·p²) time, O(p·chunk) memory.

Initial Y. The authors draw a seeded random orthonormal Y ∈ R^{d×r}. For the d of a model update
(10⁵…10⁹) such a Y captures about r/d of any fixed unit vector, so ‖Yᵀx_i‖² ≈ 0 for every input:
the first weights are all equal and the first iterate is the plain flag mean (the top-r
eigenvectors of the unweighted Gram), while the random Y itself never survives (its objective, ≈ p,
is beaten by the first iterate whenever any input is non-zero). We therefore start from the
d → ∞ limit of their initialisation, a Y with Yᵀx_i = 0 for all i: deterministic without a seed,
free (no d×r random matrix, no extra pass), and equal to theirs up to O(r/d).

Rescaling. The rule discards magnitudes (unit inputs; output norm ≈ p/r). Before an outer step we
rescale the output to the median of the accepted inputs' norms: like the direction, the median is
robust to fewer than half the inputs being Byzantine (a −10·g attacker cannot inflate it), and for
identical inputs it gives that input back exactly. `rescale="none"` returns the authors' raw
(1/r) Σ Y Yᵀ x_i in unit-input scale.

Rank. When fewer than r directions carry energy (p < r, or near-parallel inputs), eigen-directions
with Λ ≤ 1e-9·Λ_max are dropped: their coefficients would be rounding noise divided by √Λ.
Scores reported per input are the explained fractions ‖Yᵀx_i‖² ∈ [0, 1] (higher = fits the
consensus subspace better); inputs of zero norm are kept but contribute nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from peertrain.swarm.aggregation.base import Aggregator, RuleOutput
from peertrain.swarm.aggregation.errors import AggregatorConfigError
from peertrain.swarm.aggregation.streaming import (
    InputStatistics,
    UpdateSource,
    write_linear_combination,
)

_RANK_TOL = 1e-9
_STOP_TOL = 1e-10  # as the authors: stop once the objective improves by less than this


@dataclass(frozen=True, slots=True, kw_only=True)
class FlagSolution:
    """IRLS result in Gram space, for unit inputs x_i (zero inputs: x_i = 0)."""

    coefficients: torch.Tensor  # (p,) float64: (1/r) Σ Y Yᵀ x_i = Σ_i coefficients[i] · x_i
    explained: torch.Tensor  # (p,) float64: ‖Yᵀx_i‖² for the final Y
    objective: tuple[float, ...]  # at the initial Y, then after each accepted iteration
    candidates: tuple[float, ...]  # objective of every IRLS iterate, accepted or not


def unit_gram(gram: torch.Tensor) -> torch.Tensor:
    """Gram of the normalised inputs; rows and columns of zero inputs stay zero."""
    norms = gram.diagonal().clamp_min(0).sqrt()
    inv = torch.where(norms > 0, 1.0 / norms, torch.zeros_like(norms))
    return gram * inv[:, None] * inv[None, :]


def _objective(explained: torch.Tensor, active: torch.Tensor) -> float:
    return float(((1 - explained).clamp_min(0).sqrt() * active).sum())


def _weight_matrix(
    explained: torch.Tensor, inner: torch.Tensor, active: torch.Tensor, lam: float, eps: float
) -> torch.Tensor:
    """B = A Aᵀ for the weighted columns (see the module docstring), from ‖Yᵀx_i‖² and PᵀP."""
    p = explained.shape[0]
    weights_sq = (((1 - explained).abs() + eps) ** -0.5) * active
    b = torch.diag(weights_sq)
    if lam > 0 and p > 1:
        pair_sq = explained[:, None] + explained[None, :] - 2 * inner  # ‖Yᵀ(x_i − x_j)‖²
        scale = lam / (p * (p - 1))
        omega = scale**2 * (((1 - pair_sq).abs() + eps) ** -0.5)
        omega = omega * (active[:, None] * active[None, :])
        omega.fill_diagonal_(0)
        b += 2 * (torch.diag(omega.sum(dim=1)) - omega)
    return b


def _psd_sqrt(b: torch.Tensor) -> torch.Tensor:
    if torch.count_nonzero(b - torch.diag(b.diagonal())) == 0:
        return torch.diag(b.diagonal().clamp_min(0).sqrt())
    values, vectors = torch.linalg.eigh(b)
    return (vectors * values.clamp_min(0).sqrt()) @ vectors.T


def _subspace(g: torch.Tensor, b: torch.Tensor, r: int) -> torch.Tensor | None:
    """Coefficients C (p×k, k ≤ r) of the top-r left singular vectors of X·B^{1/2}."""
    root = _psd_sqrt(b)
    values, vectors = torch.linalg.eigh(root @ g @ root)
    order = values.argsort(descending=True)[:r]
    values, vectors = values[order], vectors[:, order]
    if values.numel() == 0 or values[0] <= 0:
        return None
    keep = values > _RANK_TOL * values[0]
    return root @ vectors[:, keep] / values[keep].sqrt()


def flag_irls(
    g: torch.Tensor, *, r: int, lam: float = 0.0, iterations: int = 1, eps: float = 1e-7
) -> FlagSolution:
    """Run Flag IRLS on a unit Gram matrix `g` (float64, p×p). See the module docstring."""
    p = g.shape[0]
    active = (g.diagonal() > 0.5).to(g.dtype)
    explained = torch.zeros(p, dtype=g.dtype)
    inner = torch.zeros(p, p, dtype=g.dtype)
    coeffs: torch.Tensor | None = None
    objective = [_objective(explained, active)]
    candidates: list[float] = []
    for _ in range(iterations):
        c = _subspace(g, _weight_matrix(explained, inner, active, lam, eps), r)
        if c is None:
            break
        projections = c.T @ g  # column i = Yᵀx_i
        new_explained = (projections**2).sum(dim=0)
        value = _objective(new_explained, active)
        candidates.append(value)
        if value >= objective[-1]:
            break
        improvement = objective[-1] - value
        coeffs, explained, inner = c, new_explained, projections.T @ projections
        objective.append(value)
        if improvement <= _STOP_TOL or value <= _STOP_TOL:
            break
    if coeffs is None:
        output = torch.zeros(p, dtype=g.dtype)
    else:
        output = coeffs @ (coeffs.T @ (g @ active)) / r
    return FlagSolution(
        coefficients=output,
        explained=explained,
        objective=tuple(objective),
        candidates=tuple(candidates),
    )


def group_rank(p: int) -> int:
    """r for p inputs: one direction per 8 inputs (at least 1). Honest outer updates of one
    round point mostly one way, while each Byzantine input can bring a direction of its own,
    which the subspace takes in as soon as r exceeds what the honest inputs need: with 4 honest
    inputs and one orthogonal outlier, r = 1 keeps the outlier's share of the output at a cosine
    of 0.03, r ≥ 2 lets it reach 0.28 (tests/swarm/test_aggregation_flag.py)."""
    return max(1, p // 8)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlagAggregator(Aggregator):
    """Flag Aggregator with subspace dimension `r`, pairwise weight `lam` and IRLS `iterations`.

    Defaults follow the authors: r = 8, λ = 0, one iteration, ε = 1e-7. The output is rescaled to
    the median accepted input norm unless `rescale="none"`. `r=None` picks r from the number p of
    accepted inputs, `group_rank(p)`: with r ≥ p the subspace holds every input, every weight is
    equal and the rule degenerates to a normalised mean (what a run of a few members would get
    from r = 8), so runs use this.
    """

    name: ClassVar[str] = "flag"
    needs_gram: ClassVar[bool] = True
    r: int | None = 8
    lam: float = 0.0
    iterations: int = 1
    eps: float = 1e-7
    rescale: Literal["median", "none"] = "median"

    def __post_init__(self) -> None:
        super(FlagAggregator, self).__post_init__()
        problems = []
        if self.r is not None and self.r < 1:
            problems.append(f"r must be >= 1, got {self.r}")
        if self.lam < 0:
            problems.append(f"lam must be >= 0, got {self.lam}")
        if self.iterations < 1:
            problems.append(f"iterations must be >= 1, got {self.iterations}")
        if not self.eps > 0:
            problems.append(f"eps must be > 0, got {self.eps}")
        if self.rescale not in ("median", "none"):
            problems.append(f"rescale must be 'median' or 'none', got {self.rescale!r}")
        if problems:
            raise AggregatorConfigError("flag: " + "; ".join(problems))

    def solve(self, gram: torch.Tensor) -> tuple[torch.Tensor, FlagSolution]:
        """Per-input weights a (update = Σ a_i g_i) and the IRLS solution, from a raw Gram."""
        g = unit_gram(gram)
        r = self.r if self.r is not None else group_rank(g.shape[0])
        solution = flag_irls(g, r=r, lam=self.lam, iterations=self.iterations, eps=self.eps)
        norms = gram.diagonal().clamp_min(0).sqrt()
        inv = torch.where(norms > 0, 1.0 / norms, torch.zeros_like(norms))
        weights = solution.coefficients * inv
        if self.rescale == "median":
            c = solution.coefficients
            length = max(float(c @ g @ c), 0.0) ** 0.5
            target = statistics.median(norms.tolist())
            weights = weights * (target / length) if length > 0 else torch.zeros_like(weights)
        return weights, solution

    def _combine(
        self, sources: list[UpdateSource], stats: InputStatistics, out: torch.Tensor
    ) -> RuleOutput:
        assert stats.gram is not None
        weights, solution = self.solve(stats.gram)
        write_linear_combination(sources, weights, out, chunk_size=self.chunk_size)
        return RuleOutput(
            weights=tuple(weights.tolist()),
            scores=tuple(solution.explained.tolist()),
            objective=solution.objective,
        )

"""Checks every member runs on what owners claim, from numbers senders signed about their own
shards. A linear rule writes out_k = Σ_i a_i g_i[k] on every shard k with weights a that come
from the summed statistics alone, so three cheap facts pin an owner down:

- ‖g_i[k]‖², signed by sender i, must be the diagonal of owner k's partial Gram G_k;
- ⟨g_i[k], out_k⟩, signed by sender i once out_k is public, must be (G_k a)_i: the Gram is
  checked in the direction the round used it;
- ⟨ρ_k, out_k⟩ must be Σ_i a_i ⟨ρ_k, g_i[k]⟩ for a random ±1 vector ρ_k drawn from nonces the
  senders committed to before any output existed, so no owner can aim a lie at ρ.

Outputs travel quantized (int8, like hivemind's 8-bit all-reduce), so the last two hold within
the quantization's own error: `slack` bounds it per shard, and a lie below it is no larger than
the noise the codec adds anyway. A check that fails makes the shard disputed (round.py
recomputes it from the committed inputs and blames whoever signed the false number).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from peertrain.protocol import codecs
from peertrain.swarm.aggregation.base import Aggregator
from peertrain.swarm.aggregation.streaming import TensorSource, iter_chunks

from ..codec import payload_tensor

RELATIVE = 1e-6  # float64 sums of float32 values in other orders
BLOCK = 1024  # values per block of ρ (see `projection`)
FLOAT_EPSILON = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
SIGMAS = 6.0  # a ±1 projection of independent rounding errors: this many standard deviations
_DOT_SPAN = 1 << 14  # values per float32 partial sum of ⟨g, out⟩ (its error ~ √span · 2⁻²⁴)


def projection(seed: bytes, shard: int, x: torch.Tensor) -> float:
    """⟨ρ_k, x⟩ for ρ_k ∈ {±1}ⁿ drawn from the round's seed, the same on every member.

    ρ is a sign per block of `BLOCK` values times a sign pattern shared by the blocks:
    ρ[b·B + j] = s_b · t_j. For any error e, E⟨ρ, e⟩² = Σ_b E⟨t, e_b⟩² = ‖e‖², as for
    independent signs, and an owner that commits before the nonces are revealed cannot aim at
    s or t; drawing n/B + B signs and one matrix-vector product instead of n signs makes it
    about ten times cheaper. Float32: its rounding is far below the int8 output's."""
    digest = hashlib.blake2b(seed + shard.to_bytes(4, "big"), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest, "big") >> 1)
    n = x.numel()
    rows = -(-n // BLOCK)
    t = _signs(BLOCK, generator)
    s = _signs(rows, generator)
    full = n // BLOCK * BLOCK
    total = torch.dot(x[:full].view(-1, BLOCK) @ t, s[: full // BLOCK]) if full else 0.0
    if full < n:
        total = total + s[-1] * torch.dot(x[full:], t[: n - full])
    return float(total)


def sender_facts(
    rule: Aggregator, seed: bytes, k: int, g: torch.Tensor, out: torch.Tensor | None
) -> tuple[float, float, float]:
    """What a sender signs about its slice g of shard k: ⟨ρ_k, g⟩, ‖g‖², ⟨g, out_k⟩ (0 without
    an output). The judge of a dispute recomputes them from the committed bytes with this same
    function, so an honest sender's numbers come out bit for bit: ‖g‖² as the owners'
    statistics take it (float64 sums of windows), ⟨g, out⟩ in float64 sums of float32 spans.
    A float32 dot of a 6M-value shard strays from those by 1e-4, and once made every member of
    a 25M run find every honest sender's checks false in a dispute and ban it."""
    sq_norm = float(rule.statistics([TensorSource(g)]).sq_norms[0])
    row = 0.0 if out is None else _dot(g, out)
    return projection(seed, k, g), sq_norm, row


def _dot(a: torch.Tensor, b: torch.Tensor) -> float:
    total = 0.0
    for start, stop in iter_chunks(a.numel(), _DOT_SPAN):
        total += float(torch.dot(a[start:stop], b[start:stop]).double())
    return total


def _signs(n: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 2, (n,), generator=generator, dtype=torch.int8).mul_(2).sub_(1).float()


def draw_seed(round_: int, attempt: int, nonces: Sequence[bytes]) -> bytes:
    h = hashlib.blake2b(round_.to_bytes(8, "big") + attempt.to_bytes(2, "big"), digest_size=32)
    for nonce in nonces:
        h.update(nonce)
    return h.digest()


def quantization_slack(payload: bytes, decoded: torch.Tensor, codec: str, block_size: int) -> float:
    """The standard deviation bound of ⟨ρ, e⟩ for the rounding errors e of an encoded output,
    read from the payload itself: a blockwise int codec rounds each value by at most half its
    block's step (the stored scale), uniformly; a float codec by its relative precision."""
    parts = codecs.checked_parts(
        payload_tensor(payload),
        codec,
        shape=(decoded.numel(),),
        block_size=block_size,
    )
    scales, numel = parts[1], decoded.numel()
    if scales is None:  # fp32, fp16, bf16: relative rounding of each value
        return float(decoded.norm()) * FLOAT_EPSILON.get(codec, 2.0**-8)
    steps = scales.to(torch.float64)
    counts = torch.full_like(steps, float(block_size))
    counts[-1] = numel - block_size * (steps.numel() - 1)
    return math.sqrt(float((counts * (steps / 2) ** 2).sum()) / 3.0)  # uniform rounding


@dataclass(frozen=True, slots=True)
class ShardClaims:
    """Shard k as every member sees it: the owner's numbers and the accepted senders'."""

    gram_diagonal: torch.Tensor  # owner's G_k[i, i] for the accepted senders, float64
    gram_times_weights: torch.Tensor | None  # owner's (G_k a)_i; None: the rule has no Gram
    out_projection: float  # ⟨ρ_k, out_k⟩ on the decoded output
    out_sq_norm: float  # ‖out_k‖² of the decoded output
    out_slack: float  # quantization_slack of the decoded output
    sender_projections: torch.Tensor  # ⟨ρ_k, g_i[k]⟩, signed by each sender
    sender_sq_norms: torch.Tensor  # ‖g_i[k]‖²
    sender_rows: torch.Tensor  # ⟨g_i[k], out_k⟩
    weights: torch.Tensor  # a


def failed_check(claims: ShardClaims) -> str | None:
    """None when shard k is as claimed; else which check failed."""
    c = claims
    norms = c.sender_sq_norms.clamp_min(0).sqrt()
    if not torch.allclose(c.gram_diagonal, c.sender_sq_norms, rtol=RELATIVE, atol=1e-30):
        return "the partial Gram's diagonal is not the senders' squared norms"
    expected = float((c.weights * c.sender_projections).sum())
    spread = float((c.weights.abs() * norms).sum())
    if abs(c.out_projection - expected) > SIGMAS * c.out_slack + RELATIVE * spread * 10:
        return f"⟨ρ, out⟩ = {c.out_projection:.6g}, the senders' projections give {expected:.6g}"
    # Σ a_i ⟨g_i, out⟩ = ⟨Σ a_i g_i, out⟩ = ‖out‖², but for the output's own rounding q
    # (|⟨q, out⟩| ≤ ‖q‖ ‖out‖, ‖q‖ about the slack). One random projection misses a lie whose
    # error is near-orthogonal to ρ (an output scaled 1.5x: about 1 round in 20); this check
    # needs no Gram, so it holds every linear rule's owner to the senders' own rows.
    along, out_norm = float((c.weights * c.sender_rows).sum()), math.sqrt(c.out_sq_norm)
    if abs(along - c.out_sq_norm) > 2 * c.out_slack * out_norm + RELATIVE * 10 * (
        spread * out_norm + c.out_sq_norm
    ):
        return f"‖out‖² = {c.out_sq_norm:.6g}, the senders' ⟨g_i, out⟩ give {along:.6g}"
    if c.gram_times_weights is None:
        return None
    row_slack = norms * (SIGMAS * c.out_slack) + RELATIVE * norms * spread * 10
    if ((c.sender_rows - c.gram_times_weights).abs() > row_slack).any():
        return "the partial Gram does not match ⟨g_i, out⟩ in the weights' direction"
    return None

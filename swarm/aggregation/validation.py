"""Input validation: every update is judged before any rule sees it.

Two stages, so a malformed input costs nothing and a well-formed one is read once:

1. `check_structure` (no data pass): a torch tensor, float32, 1-D, the expected length, on the
   same device as the others.
2. `judge_values` (after the statistics pass): no NaN/Inf (a NaN/Inf value, or a sum of squares
   beyond fp32 range, makes the squared norm non-finite) and a norm at most `max_norm_ratio` times
   the median norm of the finite inputs.

The result is one `Verdict` per input, in input order, so the caller can penalise exactly the
senders whose updates were rejected. Rejection is not an exception: the honest majority's update
should still be produced. A median norm of zero disables the norm test for that call (the ratio
is undefined), and the norm test never rejects a majority, because the median is one of them.

Two bounds. `DEFAULT_MAX_NORM_RATIO` (1000×) is the rules' own default: it only catches absurd
inputs and leaves robustness to the rule, which is what the rule benchmarks measure. Runs use
the tight `RUN_MAX_NORM_RATIO` = 4× the median unless their manifest says otherwise
(diloco/member/run_spec.py). Honest DiLoCo updates of one round differ in norm by well under 2×
(same model, same steps, other shards), so 4× leaves room for an unlucky shard while an attacker
who scales its update is held to a few honest updates' worth; with fewer than half the inputs
Byzantine the median is an honest norm. (Runs used 1000× too, which let one update at 990× the
median dominate a mean.) The pipeline's gradient averaging applies the same bound
(swarm/pipeline/averaging.py).

The median of everyone is an honest norm only while fewer than half the inputs are Byzantine.
A caller that knows whose word it trusts passes `reference` (inputs whose norms set the scale:
an open run's anchors, diloco/member/member.py); the median is then taken over those alone, and
any number of scaled inputs is held to `max_norm_ratio` × a trusted norm. With no finite
reference input present, the median of all stands in.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

DEFAULT_MAX_NORM_RATIO = 1000.0
RUN_MAX_NORM_RATIO = 4.0
_FLOAT32_MAX = torch.finfo(torch.float32).max


class RejectReason(enum.StrEnum):
    NOT_A_TENSOR = "not-a-tensor"
    DTYPE = "dtype"
    SHAPE = "shape"
    DEVICE = "device"
    NON_FINITE = "non-finite"
    NORM = "norm"


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What validation decided about input `index`; `reason` is None when it was accepted."""

    index: int
    reason: RejectReason | None = None
    detail: str = ""
    norm: float | None = None  # L2 norm, when the statistics pass reached this input

    @property
    def accepted(self) -> bool:
        return self.reason is None


def check_structure(
    updates: Sequence[object], *, numel: int | None, device: torch.device | None = None
) -> list[Verdict]:
    """Type, dtype, shape and device checks; `numel=None` takes the most common length."""
    if numel is None:
        lengths = [u.numel() for u in updates if isinstance(u, torch.Tensor) and u.dim() == 1]
        numel = max(set(lengths), key=lengths.count) if lengths else 0
    tensors = [u for u in updates if isinstance(u, torch.Tensor)]
    if device is None and tensors:
        device = tensors[0].device
    return [_structure_verdict(i, u, numel, device) for i, u in enumerate(updates)]


def _structure_verdict(
    index: int, update: object, numel: int, device: torch.device | None
) -> Verdict:
    if not isinstance(update, torch.Tensor):
        return Verdict(index=index, reason=RejectReason.NOT_A_TENSOR, detail=type(update).__name__)
    if update.dtype != torch.float32:
        return Verdict(index=index, reason=RejectReason.DTYPE, detail=str(update.dtype))
    if update.dim() != 1 or update.numel() != numel:
        detail = f"shape {tuple(update.shape)}, expected ({numel},)"
        return Verdict(index=index, reason=RejectReason.SHAPE, detail=detail)
    if device is not None and update.device != device:
        return Verdict(index=index, reason=RejectReason.DEVICE, detail=str(update.device))
    return Verdict(index=index)


def judge_values(
    indices: Sequence[int],
    sq_norms: torch.Tensor,
    *,
    max_norm_ratio: float | None,
    reference: Collection[int] = (),
) -> list[Verdict]:
    """Verdicts for inputs `indices` (structurally sound) from their squared norms; the norm
    bound is relative to the median of the `reference` inputs' norms (of all, without any)."""
    # past float32 range the rules' fp32 arithmetic would overflow: treat as non-finite
    sq_norms = torch.where(sq_norms > _FLOAT32_MAX, float("inf"), sq_norms)
    norms = sq_norms.sqrt().tolist()
    finite = [n for n in norms if math.isfinite(n)]
    trusted = [n for i, n in zip(indices, norms, strict=True) if i in reference]
    trusted = [n for n in trusted if math.isfinite(n)]
    median = statistics.median(trusted or finite) if finite else 0.0
    verdicts = []
    for index, norm in zip(indices, norms, strict=True):
        if not math.isfinite(norm):
            detail = "NaN or Inf values (or a norm beyond float32 range)"
            verdicts.append(Verdict(index=index, reason=RejectReason.NON_FINITE, detail=detail))
        elif max_norm_ratio is not None and median > 0 and norm > max_norm_ratio * median:
            detail = f"norm {norm:.3g} is {norm / median:.3g}x the median {median:.3g}"
            reason = RejectReason.NORM
            verdicts.append(Verdict(index=index, reason=reason, detail=detail, norm=norm))
        else:
            verdicts.append(Verdict(index=index, norm=norm))
    return verdicts

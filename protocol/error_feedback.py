"""Error feedback for int8 updates: what quantization dropped is sent with the next update.

Each call quantizes `update + residual` and keeps `(update + residual) - decoded` as the new
residual, so over many rounds the receiver's sum of decoded updates tracks the true sum to
within one step's quantization error instead of drifting by a random walk of them. The
residual never leaves this node. It is fused into the quantizer's tile loop
(`int8_blockwise.quantize_into`), so error feedback costs no extra pass over the update.

One residual per tensor name (e.g. per parameter); the table is bounded by `max_tensors` and
its memory is one fp32 copy of each tensor. A name whose shape changes is a bug: ValueError.
Not thread-safe for concurrent calls on the *same* name; different names may run in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import codecs, int8_blockwise

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorFeedbackStatistics:
    tensors: int
    residual_bytes: int


class ErrorFeedback:
    def __init__(
        self,
        *,
        codec: str = "int8",
        block_size: int = int8_blockwise.DEFAULT_BLOCK_SIZE,
        max_tensors: int = 65_536,
    ) -> None:
        if not codecs.CODECS[codec].scale_bytes:
            raise ValueError(f"error feedback needs an int8 codec, not {codec!r}")
        self.codec = codec
        self.block_size = block_size
        self._max_tensors = max_tensors
        self._residuals: dict[str, torch.Tensor] = {}

    def encode(
        self, name: str, update: torch.Tensor, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The payload for `update` plus the carried residual; the residual is updated."""
        residual = self._residual_for(name, update)
        return codecs.encode(
            update, self.codec, block_size=self.block_size, out=out, residual=residual
        )

    def _residual_for(self, name: str, update: torch.Tensor) -> torch.Tensor:
        import torch

        residual = self._residuals.get(name)
        if residual is None:
            if len(self._residuals) >= self._max_tensors:
                raise ValueError(f"error feedback already tracks {self._max_tensors} tensors")
            residual = torch.zeros(update.numel(), dtype=torch.float32)
            self._residuals[name] = residual
        elif residual.numel() != update.numel():
            raise ValueError(
                f"{name}: update has {update.numel()} values, residual {residual.numel()}"
            )
        return residual

    def residual(self, name: str) -> torch.Tensor | None:
        """The residual carried for `name` (flat fp32), if any."""
        return self._residuals.get(name)

    def reset(self, name: str | None = None) -> None:
        """Forget one residual, or all (e.g. after re-syncing from peers)."""
        if name is None:
            self._residuals.clear()
        else:
            self._residuals.pop(name, None)

    def statistics(self) -> ErrorFeedbackStatistics:
        return ErrorFeedbackStatistics(
            tensors=len(self._residuals),
            residual_bytes=sum(r.numel() * 4 for r in self._residuals.values()),
        )

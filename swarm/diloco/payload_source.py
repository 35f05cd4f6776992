"""A received int8 update as an aggregation `UpdateSource`: dequantized a slice at a time.

Decoding each of p peers' 100M-value updates into its own fp32 tensor wrote (and faulted in)
400 MB per update, only for the aggregation to read it back twice in chunks. Kept as received,
an update costs nothing until a chunk is read; then the compiled kernel dequantizes that chunk
into a small buffer that stays in cache, one fp32 multiply per value, exactly as a full decode
would (so the aggregate is bit-identical to aggregating the decoded tensors).
"""

from __future__ import annotations

import torch
from peertrain.protocol import codecs, int8_blockwise, int8_fused


class QuantizedSource:
    """One int8 (fp32-scale) payload, checked up front; `read` dequantizes [start, stop).

    Construction runs every check a full decode runs before its pass over the values (size,
    finite and bounded scales: `codecs.checked_parts`), so an undecodable payload is refused
    before the aggregation starts; every value of an accepted one decodes to a finite float.
    """

    def __init__(self, payload: torch.Tensor, numel: int, *, block_size: int) -> None:
        _, scales, values = codecs.checked_parts(
            payload, "int8", shape=(numel,), block_size=block_size
        )
        assert scales is not None  # int8 always has scales
        self._scales, self._values, self._block_size = scales, values, block_size
        self._numel = numel
        self._scratch = torch.empty(0)

    @property
    def numel(self) -> int:
        return self._numel

    def read(self, start: int, stop: int) -> torch.Tensor:
        """Values [start, stop) in this source's own buffer: valid until its next `read`."""
        if self._scratch.numel() < stop - start:
            self._scratch = torch.empty(stop - start)
        out = self._scratch[: stop - start]
        int8_fused.dequantize_fp32(
            self._scales, self._values, start, out, block_size=self._block_size
        )
        return out


def applies(codec_name: str, numel: int) -> bool:
    """Whether payloads of this codec and size are read through `QuantizedSource`: int8 with
    fp32 scales, as large as the encoder's compiled kernel is for (small models never load
    numba); others are decoded whole, as before."""
    return (
        codec_name == "int8" and numel >= int8_blockwise.FUSED_MIN_NUMEL and int8_fused.available()
    )

"""A received int8 update as an aggregation `UpdateSource`: dequantized a slice at a time.

Decoding each of p peers' 100M-value updates into its own fp32 tensor wrote (and faulted in)
400 MB per update, only for the aggregation to read it back twice in chunks. Kept as received,
an update costs nothing until a chunk is read; then the compiled kernel dequantizes that chunk
into a small buffer that stays in cache, one fp32 multiply per value, exactly as a full decode
would (so the aggregate is bit-identical to aggregating the decoded tensors).

`Admissions` checks and measures (norm) each payload as it arrives, in the member's torch
thread, while the next one is still on the wire; the round's aggregation then starts at its
write pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch
from peertrain.protocol import codecs, int8_blockwise, int8_fused
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.aggregation.streaming import DEFAULT_CHUNK_SIZE, UpdateSource, source_sq_norm


class SourceCodec(Protocol):
    """What admitting a payload needs of its codec (codec.py's `UpdateCodec`)."""

    def source(self, payload: Any, numel: int) -> UpdateSource: ...


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
        self.known_sq_norm: float | None = None  # `measure()`d ahead of the aggregation

    def measure(self) -> None:
        """Take the squared norm now (the statistics pass will not read this source again),
        then let go of the read buffer: a measured source waiting for its round holds none."""
        self.known_sq_norm = source_sq_norm(self, chunk_size=DEFAULT_CHUNK_SIZE)
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


class Admissions:
    """Payloads of the round in progress, checked and measured as they arrive (`admit`, in the
    member's torch thread); `take()` hands them to the round's aggregation and starts afresh.

    Keyed by sender, and used only for the very payload object admitted (`payload is`), so
    an entry left from an abandoned round or a sender's second payload is never mistaken for
    another. At most one entry per sender that the update gossip pulled (bounded there).
    """

    def __init__(self) -> None:
        self._sources: dict[str, tuple[Any, UpdateSource]] = {}

    def admit(self, codec: SourceCodec, numel: int, sender: str, payload: Any) -> None:
        try:
            source = codec.source(payload, numel)
        except DecodeError:
            return  # refused (and counted) with its reason when the round aggregates
        if isinstance(source, QuantizedSource):
            source.measure()
        self._sources[sender] = (payload, source)

    def take(self) -> Mapping[str, tuple[Any, UpdateSource]]:
        taken, self._sources = self._sources, {}
        return taken

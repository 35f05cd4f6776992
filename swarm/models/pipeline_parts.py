"""A model as a SWARM pipeline cuts it: a stem, an ordered list of blocks, a head.

A model that offers `pipeline_parts()` can be cut into stages of contiguous blocks
(swarm/pipeline/slices.py): the stem (embeddings) goes with the first stage, the head (final
norm, output layer) with the last. The boundaries say what crosses each cut, per row, so a
stage server can refuse a tensor of the wrong shape from the network before torch sees it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

SEQ = -1  # a sequence dimension in a boundary's shape: any length from 1 to `max_seq`


@dataclass(frozen=True, slots=True, kw_only=True)
class Boundary:
    """What crosses a cut, per row: `tail` is the shape after the batch dimension (SEQ marks
    the sequence dimension); `tokens` > 0: integer token ids below it (a language model's input,
    carried as exact small floats)."""

    tail: tuple[int, ...]
    tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineParts:
    """`boundaries[i]` enters `blocks[i]` (`boundaries[-1]` leaves the last block); `input`
    enters the stem and `output` (logits: classes last) leaves the head. A missing stem or head
    means the first or last boundary is the model's input or output."""

    stem: nn.Module | None
    blocks: list[nn.Module]
    head: nn.Module | None
    input: Boundary
    boundaries: list[Boundary]
    output: Boundary
    max_seq: int = 0  # longest sequence a SEQ dimension may have (0: none has one)

    def __post_init__(self) -> None:
        if len(self.boundaries) != len(self.blocks) + 1:
            raise ValueError("a model of n blocks has n + 1 boundaries")

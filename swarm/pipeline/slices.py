"""Cutting a model into pipeline stages: contiguous blocks, the stem first, the head last.

Any model that offers `pipeline_parts()` (swarm/models/pipeline_parts.py: a stem, an ordered list
of blocks, a head, and what crosses each cut) is cut the same way; the GPT and the digits MLP do.
Every server of a stage builds its slice from the same config and seed, so all of them start with
identical parameters without downloading anything; the full model is built once and sliced, so a
pipeline of S stages starts from exactly the weights a single-process model with that seed has.
A `StageSlice` knows what may enter it and what leaves it, so a stage server refuses a misshapen
tensor from the network (DecodeError: the sender is to blame) instead of failing inside torch.
"""

from __future__ import annotations

from typing import Any

import torch
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.models.config import ConfigError
from peertrain.swarm.models.pipeline_parts import SEQ, Boundary, PipelineParts
from torch import nn


class StageSlice(nn.Module):
    """One stage's layers, with the boundaries on either side of it."""

    def __init__(
        self, layers: list[nn.Module], *, input: Boundary, output: Boundary, max_seq: int = 0
    ) -> None:
        super().__init__()
        self.layers = nn.Sequential(*layers)
        self.input, self.output, self.max_seq = input, output, max_seq

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x.long() if self.input.tokens else x)

    @property
    def classes(self) -> int:
        """The width of the last dimension of the output (the logits' classes)."""
        return self.output.tail[-1]

    def check_input(self, x: torch.Tensor, max_rows: int) -> int:
        """The input's sequence length (0: none); DecodeError if it cannot enter this slice."""
        seq = _sequence(self.input, tuple(x.shape), self.max_seq, max_rows)
        if seq is None:
            raise DecodeError(f"input of shape {tuple(x.shape)} does not fit {_shown(self.input)}")
        tokens = self.input.tokens
        if tokens and x.numel():
            whole = bool((x == x.floor()).all())  # NaN is never equal: refused too
            if not whole or not 0 <= float(x.min()) <= float(x.max()) < tokens:
                raise DecodeError(f"input tokens must be integers in [0, {tokens})")
        return seq

    def output_shape(self, rows: int, seq: int) -> tuple[int, ...]:
        return (rows, *(seq if d == SEQ else d for d in self.output.tail))

    def example_input(self, rows: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Random input of `rows` rows at the longest sequence (for a first throughput figure)."""
        shape = (rows, *(self.max_seq if d == SEQ else d for d in self.input.tail))
        if self.input.tokens:
            return torch.randint(self.input.tokens, shape, generator=generator).float()
        return torch.randn(shape, generator=generator)


def stage_slices(parts: PipelineParts, num_stages: int) -> list[StageSlice]:
    """The model of `parts` as `num_stages` slices of contiguous blocks."""
    blocks = parts.blocks
    if not 1 <= num_stages <= len(blocks):
        raise ValueError(f"a model of {len(blocks)} blocks cannot be cut into {num_stages} stages")
    bounds = [round(i * len(blocks) / num_stages) for i in range(num_stages + 1)]
    out = []
    for stage, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        first, last = stage == 0, stage == num_stages - 1
        layers = [
            *([parts.stem] if first and parts.stem is not None else []),
            *blocks[a:b],
            *([parts.head] if last and parts.head is not None else []),
        ]
        out.append(
            StageSlice(
                layers,
                input=parts.input if first else parts.boundaries[a],
                output=parts.output if last else parts.boundaries[b],
                max_seq=parts.max_seq,
            )
        )
    return out


def pipeline_blocks(config: Any) -> int:
    """How many blocks the model of `config` has for a pipeline; ConfigError if it cannot be cut."""
    blocks = getattr(config, "pipeline_blocks", None)
    if not isinstance(blocks, int):
        raise ConfigError(
            f"{type(config).__name__} cannot be cut into pipeline stages: its model offers no "
            "pipeline_parts() (swarm/models/pipeline_parts.py)"
        )
    return blocks


def stage_slice(config: Any, num_stages: int, stage: int, *, seed: int = 0) -> StageSlice:
    """One stage's slice (what a server builds when it joins or moves to `stage`)."""
    return stage_slices(config.build(seed=seed).pipeline_parts(), num_stages)[stage]


def _sequence(
    boundary: Boundary, shape: tuple[int, ...], max_seq: int, max_rows: int
) -> int | None:
    """The sequence length of `shape` if it fits `boundary` (0: no sequence dimension)."""
    if len(shape) != 1 + len(boundary.tail) or not 0 < shape[0] <= max_rows:
        return None
    dims = list(zip(shape[1:], boundary.tail, strict=True))
    seqs = {got for got, want in dims if want == SEQ}
    fixed = all(got == want for got, want in dims if want != SEQ)
    if not fixed or len(seqs) > 1 or any(not 0 < s <= max_seq for s in seqs):
        return None
    return next(iter(seqs), 0)


def _shown(boundary: Boundary) -> str:
    return "(rows, " + ", ".join("seq" if d == SEQ else str(d) for d in boundary.tail) + ")"

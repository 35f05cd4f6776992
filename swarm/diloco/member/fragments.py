"""Streaming DiLoCo's fragments: the model's parameters in P groups that sync on staggered steps.

Layers are dealt out interleaved (block i → fragment i mod P), as in Douillard et al. 2025
(arXiv 2501.18512): each fragment spans the depth of the network, so no fragment holds only the
layers near the input. Parameters outside the repeated blocks (embeddings, the final norm) fill the
lightest fragments up to 1/P of the model, split between fragments where one does not fit whole
(a fragment is ranges of the flat vector, so it may hold part of a tensor): each exchange carries
about 1/P of the model, even when the embedding is as large as a block or larger.

Fragment p syncs after inner step t when (t − p·H/P) mod H == 0 (t ≥ 1), so one fragment syncs
every H/P steps and each one every H. Sync number `slot = t·P/H` names the exchange: fragment
`slot mod P`, that fragment's round `(slot − p) / P` (fragment 0 first syncs at t = H, round 0
of the others at p·H/P; the formula shifts fragment 0's count by one so every fragment starts at 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from peertrain.swarm.diloco.member.flat import ParamLayout
from peertrain.swarm.models.config import ConfigError

# the first numeric part of a name ("blocks.3.attn.qkv.weight", "hidden.3.bias", "3.weight"):
# the index of a layer in a ModuleList or Sequential
_BLOCK = re.compile(r"(?:^|\.)(\d+)\.")


def block_index(name: str) -> int | None:
    """The repeated layer a parameter belongs to, or None (embeddings, final norm, head)."""
    match = _BLOCK.search(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fragment:
    """Some of a layout's parameters: their names and (start, stop) ranges in the flat vector."""

    index: int
    params: tuple[int, ...]  # positions in the layout, ascending
    names: tuple[str, ...]  # in layout order: the parameters it holds (some in part)
    ranges: tuple[tuple[int, int], ...]  # ascending
    numel: int
    labels: tuple[str, ...] = ()  # per range: a parameter's name, or `name[lo:hi]` for a part

    def gather(self, flat: torch.Tensor) -> torch.Tensor:
        """A new vector holding this fragment's values of `flat`, in range order."""
        return torch.cat([flat[a:b] for a, b in self.ranges])

    def scatter(self, flat: torch.Tensor, values: torch.Tensor) -> None:
        """Write `values` (as `gather` gives them) back into `flat` in place."""
        offset = 0
        for a, b in self.ranges:
            flat[a:b].copy_(values[offset : offset + b - a])
            offset += b - a


def split_fragments(layout: ParamLayout, count: int) -> tuple[Fragment, ...]:
    """`count` fragments covering every parameter of `layout` exactly once."""
    if count < 1:
        raise ConfigError("fragments must be at least 1")
    offsets, start = [], 0
    for n in layout.numels:
        offsets.append((start, start + n))
        start += n
    held: list[list[tuple[int, int, int]]] = [[] for _ in range(count)]  # (param, lo, hi)
    sizes = [0] * count
    loose: list[int] = []
    for i, name in enumerate(layout.names):
        block = block_index(name)
        if block is None:
            loose.append(i)
            continue
        held[block % count].append((i, 0, layout.numels[i]))
        sizes[block % count] += layout.numels[i]
    target = -(-layout.numel // count)  # ceil: 1/P of the model
    for i in sorted(loose, key=lambda i: (-layout.numels[i], i)):
        lo, n = 0, layout.numels[i]
        while lo < n:
            lightest = min(range(count), key=lambda p: (sizes[p], p))
            take = n - lo if sizes[lightest] >= target else min(n - lo, target - sizes[lightest])
            held[lightest].append((i, lo, lo + take))
            sizes[lightest] += take
            lo += take
    if min(sizes) == 0:
        raise ConfigError(f"the model's parameters cannot fill {count} fragments")
    return tuple(_fragment(p, sorted(parts), layout, offsets) for p, parts in enumerate(held))


def _fragment(
    p: int, parts: list[tuple[int, int, int]], layout: ParamLayout, offsets: list[tuple[int, int]]
) -> Fragment:
    """Fragment `p` from its (parameter, lo, hi) parts, in layout order."""
    labels = []
    for i, lo, hi in parts:
        whole = (lo, hi) == (0, layout.numels[i])
        labels.append(layout.names[i] if whole else f"{layout.names[i]}[{lo}:{hi}]")
    ids = sorted({i for i, _, _ in parts})
    return Fragment(
        index=p,
        params=tuple(ids),
        names=tuple(layout.names[i] for i in ids),
        ranges=tuple((offsets[i][0] + lo, offsets[i][0] + hi) for i, lo, hi in parts),
        numel=sum(hi - lo for _, lo, hi in parts),
        labels=tuple(labels),
    )


@dataclass(frozen=True, slots=True)
class FragmentSchedule:
    """When each of `fragments` fragments syncs, for `inner_steps` (H) steps per fragment round."""

    inner_steps: int
    fragments: int

    def __post_init__(self) -> None:
        if self.fragments < 1 or self.inner_steps % self.fragments:
            raise ConfigError(
                f"inner steps ({self.inner_steps}) must be a multiple of fragments "
                f"({self.fragments})"
            )

    @property
    def stride(self) -> int:
        """Inner steps between two syncs (of different fragments)."""
        return self.inner_steps // self.fragments

    def due(self, step: int) -> int | None:
        """The slot that syncs after inner step `step` (steps counted from 1), or None."""
        if step < 1 or step % self.stride:
            return None
        return step // self.stride

    def fragment(self, slot: int) -> int:
        return slot % self.fragments

    def fragment_round(self, slot: int) -> int:
        """How many syncs of its fragment came before `slot`."""
        p = self.fragment(slot)
        return (slot - p) // self.fragments - (1 if p == 0 else 0)

    def slot(self, fragment: int, round_: int) -> int:
        """The inverse of (fragment, fragment_round)."""
        return (round_ + (1 if fragment == 0 else 0)) * self.fragments + fragment

    def step(self, slot: int) -> int:
        """The inner step after which `slot` syncs."""
        return slot * self.stride

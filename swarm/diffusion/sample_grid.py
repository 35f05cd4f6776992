"""The sample grid a diffusion member shows on its dashboard: when, from which model, how small.

A member renders only from models it holds, never fetching one: the whole ensemble (top-1) when
it holds every group, else its own expert alone (one cluster's images); a router alone draws
nothing. 16 samples, 8 Euler steps, one PNG pixel per image pixel (the page scales it up): on a
CPU a small fraction of a round, and a PNG of a few KB in every status. Same noise every time,
so grids of successive rounds show the model change and not the seed.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .png import image_grid, png_bytes
from .run_spec import ROUTER, DiffusionSpec, expert_group
from .sampling import SamplerConfig, Strategy, integrate, sample

GRID_SAMPLES = 16
GRID_STEPS = 8
GRID_SEED = 0
MAX_PNG_BYTES = 16 << 10  # the largest grid (16 of 28×28) is about 13 KB before zlib


def grid_due(round_: int, last: int | None, every: int, *, finished: bool = False) -> bool:
    """Whether round `round_` gets a new grid: the first trained round, then every `every`
    rounds, and the final state of a finished run. `every` 0: never."""
    if every <= 0 or round_ < 1 or round_ == last:
        return False
    return last is None or round_ - last >= every or finished


@dataclass(frozen=True, slots=True)
class SampleGrid:
    png: bytes
    round: int
    caption: str

    def as_status(self) -> dict[str, Any]:
        """What a run's status carries (the dashboard draws it): base64 PNG, round, caption."""
        return {
            "png": base64.b64encode(self.png).decode(),
            "round": self.round,
            "caption": self.caption,
        }


@torch.no_grad()
def render_grid(
    spec: DiffusionSpec, held: Mapping[str, nn.Module], round_: int
) -> SampleGrid | None:
    """A grid from the groups' DiTs in `held` (θ_global of `round_`), or None when they cannot
    draw (a router without its experts)."""
    experts = [held.get(expert_group(k)) for k in range(spec.experts)]
    size = spec.image_size
    noise = torch.randn(
        GRID_SAMPLES, 1, size, size, generator=torch.Generator().manual_seed(GRID_SEED)
    )
    sampler = SamplerConfig(steps=GRID_STEPS)
    if all(e is not None for e in experts) and ROUTER in held:
        images = sample(
            experts, held[ROUTER], noise, strategy=Strategy.parse("top1"), sampler=sampler
        )
        what = f"all {spec.experts} experts, top-1 routed"
    else:
        mine = next((g for g in held if g != ROUTER), None)
        if mine is None:
            return None
        images = integrate(held[mine], noise, sampler)
        what = f"{mine} alone"
    grid = image_grid(images.clamp(-1.0, 1.0), columns=math.ceil(math.sqrt(GRID_SAMPLES)))
    png = png_bytes(grid)
    caption = f"{what} · {GRID_SAMPLES} samples · {GRID_STEPS} Euler steps"
    return SampleGrid(png=png, round=round_, caption=caption)

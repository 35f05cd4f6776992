"""One sampling job of a diffusion run: groups' states in, a PNG grid or an .npz of images out.

The states are what the groups serve (θ ‖ outer momentum); the experts and router are rebuilt
from the run's spec, so a node needs neither the data nor the partition to sample. Noise and
Sample-1's draws come from `seed`: the same states and seed give the same images.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .group_member import model_from_state
from .png import image_grid, write_png
from .run_spec import ROUTER, DiffusionSpec, expert_group
from .sampling import SamplerConfig, Strategy, sample

GRID_SCALE = 4  # pixels per image pixel in the PNG (8×8 digits become 32×32)


@torch.no_grad()
def draw(
    spec: DiffusionSpec,
    states: dict[str, torch.Tensor],
    *,
    n: int,
    steps: int,
    strategy: str,
    seed: int = 0,
) -> torch.Tensor:
    """`n` images [n, C, H, W] in [-1, 1] from the groups' `states`."""
    experts = [
        model_from_state(spec, expert_group(k), states[expert_group(k)])
        for k in range(spec.experts)
    ]
    router = model_from_state(spec, ROUTER, states[ROUTER])
    size = spec.image_size
    noise = torch.randn(n, 1, size, size, generator=torch.Generator().manual_seed(seed))
    return sample(
        experts,
        router,
        noise,
        strategy=Strategy.parse(strategy),
        sampler=SamplerConfig(steps=steps),
        seed=seed,
    ).clamp(-1.0, 1.0)


def draw_to_file(
    spec: DiffusionSpec,
    states: dict[str, torch.Tensor],
    *,
    out: str,
    n: int,
    steps: int,
    strategy: str,
    seed: int = 0,
) -> dict[str, Any]:
    """Sample and write `out`: a PNG grid (about square) or an .npz holding `images` [n, C, H, W]
    in [-1, 1]. Returns what was written."""
    started = time.perf_counter()
    images = draw(spec, states, n=n, steps=steps, strategy=strategy, seed=seed)
    seconds = time.perf_counter() - started
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".npz":
        with tmp.open("wb") as f:
            np.savez(f, images=images.numpy())
        shape = list(images.shape)
    else:
        grid = image_grid(images, columns=math.ceil(math.sqrt(n)), scale=GRID_SCALE)
        write_png(tmp, grid)
        shape = list(grid.shape)
    os.replace(tmp, path)
    return {
        "out": str(path),
        "n": n,
        "strategy": strategy,
        "steps": steps,
        "shape": shape,
        "sample_seconds": seconds,
    }

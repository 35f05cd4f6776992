"""The dashboard's sample grid of a diffusion member: when it is drawn, from what, and its PNG."""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np
import pytest
from peertrain.swarm.diffusion.group_member import objective_of
from peertrain.swarm.diffusion.run_spec import DiffusionSpec
from peertrain.swarm.diffusion.sample_grid import (
    GRID_SAMPLES,
    MAX_PNG_BYTES,
    grid_due,
    render_grid,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def decoded_png(data: bytes) -> np.ndarray:
    """An 8-bit greyscale PNG of one IDAT chunk (what png.py writes), as [H, W] pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    assert (depth, colour) == (8, 0)
    (length,) = struct.unpack(">I", data[33:37])
    assert data[37:41] == b"IDAT"
    rows = np.frombuffer(zlib.decompress(data[41 : 41 + length]), np.uint8).reshape(height, -1)
    assert rows.shape[1] == width + 1 and not rows[:, 0].any()  # filter byte 0 on every row
    return rows[:, 1:]


@pytest.mark.parametrize(
    ("round_", "last", "every", "finished", "due"),
    [
        (0, None, 5, False, False),  # initial weights: nothing trained to show
        (1, None, 5, False, True),  # the first trained round
        (3, 1, 5, False, False),
        (6, 1, 5, False, True),
        (3, 1, 5, True, True),  # a finished run shows its final state
        (6, 6, 5, True, False),  # …once
        (9, None, 0, True, False),  # 0: never
    ],
)
def test_grids_are_due_on_the_first_round_every_few_rounds_and_at_the_end(
    round_, last, every, finished, due
):
    assert grid_due(round_, last, every, finished=finished) is due


@pytest.fixture(scope="module")
def dits():
    spec = DiffusionSpec(experts=2, dataset="digits", model="dit-tiny")
    return spec, {g: objective_of(spec, g).dit.eval() for g in spec.groups()}


def test_an_expert_draws_its_own_grid_as_a_small_png_of_the_right_size(dits):
    spec, models = dits
    grid = render_grid(spec, {"expert-1": models["expert-1"]}, 3)
    assert grid is not None and grid.round == 3
    assert grid.caption.startswith("expert-1 alone")
    pixels = decoded_png(base64.b64decode(grid.as_status()["png"]))
    side = 4 * (spec.image_size + 1) + 1  # 4×4 digits of 8×8 with 1-pixel gaps
    assert pixels.shape == (side, side) and GRID_SAMPLES == 16
    assert len(grid.png) <= MAX_PNG_BYTES
    assert len(np.unique(pixels)) > 10  # images, not a blank or constant square
    again = render_grid(spec, {"expert-1": models["expert-1"]}, 4)
    assert again.png == grid.png  # the same noise: grids differ only when the model does


def test_every_group_held_draws_the_routed_ensemble_and_a_router_alone_draws_nothing(dits):
    spec, models = dits
    grid = render_grid(spec, models, 2)
    assert grid is not None and grid.caption.startswith("all 2 experts, top-1 routed")
    assert decoded_png(grid.png).shape == (37, 37)
    assert render_grid(spec, {"router": models["router"]}, 2) is None


def test_the_largest_dataset_grid_stays_within_the_bound():
    spec = DiffusionSpec(experts=2, dataset="fashion-mnist", model="dit-tiny")
    grid = render_grid(spec, {"expert-0": objective_of(spec, "expert-0").dit.eval()}, 1)
    assert decoded_png(grid.png).shape == (4 * 29 + 1, 4 * 29 + 1)
    assert len(grid.png) <= MAX_PNG_BYTES

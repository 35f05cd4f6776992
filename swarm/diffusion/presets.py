"""Named model sizes (`--model dit-tiny`) fitted to a dataset's image shape.

A run names a preset and a dataset; the patch size follows the image size so the token count stays
small (16 tokens at 8×8, 49 at 28×28), which is what keeps training to minutes on a CPU. The router
is a shallower, narrower DiT of the same family with one logit per expert.
"""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from .model import DiTConfig

PRESETS: dict[str, dict[str, int]] = {
    "dit-tiny": {"width": 64, "depth": 3, "heads": 4},
    "dit-small": {"width": 128, "depth": 6, "heads": 4},
}
ROUTER_SHAPE = {"width": 48, "depth": 2, "heads": 4}


def patch_size_for(image_size: int) -> int:
    """The smallest patch (from 2 up) that divides the image into at most 64 tokens."""
    for patch in (2, 4, 7, 8):
        if image_size % patch == 0 and (image_size // patch) ** 2 <= 64:
            return patch
    raise ConfigError(f"no patch size keeps a {image_size}×{image_size} image to 64 tokens")


def expert_config(preset: str, *, image_size: int, channels: int = 1) -> DiTConfig:
    """The velocity model of every expert of a run naming `preset`."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown model {preset!r}; choose one of {', '.join(PRESETS)}")
    return DiTConfig(
        image_size=image_size,
        channels=channels,
        patch_size=patch_size_for(image_size),
        **PRESETS[preset],
    )


def router_config(expert: DiTConfig, *, experts: int) -> DiTConfig:
    """The router of a run whose experts use `expert`: same patches, smaller, K logits."""
    if experts < 2:
        raise ConfigError("a router needs at least two experts to choose between")
    return dataclasses.replace(expert, outputs=experts, **ROUTER_SHAPE)

"""One fixed layout of a model's parameters as a single flat fp32 vector.

Pseudo-gradients, the outer optimizer and the wire all work on flat vectors; the layout (parameter
names, shapes, offsets in `named_parameters` order, tied weights once) is the contract that makes a
peer's vector mean the same thing on every member.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence

import torch
from torch import nn


class ParamLayout:
    def __init__(self, model: nn.Module) -> None:
        named = list(model.named_parameters())
        self.names = [name for name, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        self.numels = [p.numel() for _, p in named]
        self.numel = sum(self.numels)
        self._params = [p for _, p in named]
        if any(p.dtype != torch.float32 for p in self._params):
            raise TypeError("DiLoCo keeps θ_global in fp32; the model must have fp32 parameters")

    @torch.no_grad()
    def flatten(self) -> torch.Tensor:
        """A new fp32 vector on the host holding the model's current parameters. The outer
        state, the codec and checksums live on the host whatever the model's device: one copy
        per round each way (`load`), against int8 coding and hashing that are host work anyway."""
        return torch.cat([p.detach().reshape(-1) for p in self._params]).cpu()

    @torch.no_grad()
    def load(self, flat: torch.Tensor) -> None:
        """Copy `flat` into the model's parameters in place (optimizers keep their references)."""
        for p, view in zip(self._params, self.split(flat), strict=True):
            p.copy_(view)

    @torch.no_grad()
    def flatten_ranges(self, ranges: Sequence[tuple[int, int]]) -> torch.Tensor:
        """A new fp32 vector holding the model's values at `ranges` of the flat layout (a
        range may cover part of a parameter, or several), in order."""
        return torch.cat(self._views(ranges)).cpu()

    @torch.no_grad()
    def load_ranges(self, ranges: Sequence[tuple[int, int]], flat: torch.Tensor) -> None:
        """The inverse of `flatten_ranges`, in place."""
        offset = 0
        for view in self._views(ranges):
            view.copy_(flat[offset : offset + view.numel()])
            offset += view.numel()

    def _views(self, ranges: Sequence[tuple[int, int]]) -> list[torch.Tensor]:
        """Flat views of the parameters' storage covering `ranges`, in order."""
        views, starts = [], list(itertools.accumulate(self.numels, initial=0))
        for a, b in ranges:
            i = bisect.bisect_right(starts, a) - 1
            while a < b:
                lo, hi = a - starts[i], min(b, starts[i + 1]) - starts[i]
                views.append(self._params[i].detach().view(-1)[lo:hi])
                a, i = starts[i] + hi, i + 1
        return views

    def split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Views of `flat`, one per parameter, in layout order and shape."""
        if flat.numel() != self.numel:
            raise ValueError(
                f"vector of {flat.numel()} values does not fit a layout of {self.numel}"
            )
        return [
            v.view(shape) for v, shape in zip(flat.split(self.numels), self.shapes, strict=True)
        ]

    def named(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.split(flat), strict=True))

    def join(self, named: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The inverse of `named`; names or shapes that do not match the layout raise ValueError."""
        if set(named) != set(self.names):
            missing, extra = set(self.names) - set(named), set(named) - set(self.names)
            raise ValueError(
                f"parameters do not fit the model: missing {sorted(missing)}, extra {sorted(extra)}"
            )
        for name, shape in zip(self.names, self.shapes, strict=True):
            if tuple(named[name].shape) != shape:
                raise ValueError(
                    f"{name} has shape {tuple(named[name].shape)}, the model needs {shape}"
                )
        return torch.cat([named[name].reshape(-1).float() for name in self.names])

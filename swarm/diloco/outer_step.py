"""The outer optimizer: SGD with Nesterov momentum on θ_global, driven by the pseudo-gradient.

The pseudo-gradient Δ = θ_global − θ_local points the way a gradient does (θ_local moved *against*
it), so the step is θ_global ← θ_global − lr · (Δ + m·b) with b ← m·b + Δ, which is exactly
`torch.optim.SGD(nesterov=True)` fed Δ as the gradient. It works on flat fp32 vectors in place so
that every member, given the same aggregate, computes bit-identical results.
"""

from __future__ import annotations

import torch

from .config import OuterConfig


class NesterovOuterOptimizer:
    def __init__(self, numel: int, config: OuterConfig) -> None:
        self.config = config
        self.momentum_buffer = torch.zeros(numel, dtype=torch.float32)

    @torch.no_grad()
    def step(self, params: torch.Tensor, pseudo_gradient: torch.Tensor) -> None:
        """Update `params` (θ_global, flat fp32) in place."""
        lr, m = self.config.lr, self.config.momentum
        self.momentum_buffer.mul_(m).add_(pseudo_gradient)
        if self.config.nesterov:
            params.sub_(pseudo_gradient.add(self.momentum_buffer, alpha=m), alpha=lr)
        else:
            params.sub_(self.momentum_buffer, alpha=lr)

"""The outer optimizer: SGD with Nesterov momentum on θ_global, driven by the pseudo-gradient.

The pseudo-gradient Δ = θ_global − θ_local points the way a gradient does (θ_local moved *against*
it), so the step is θ_global ← θ_global − lr · (Δ + m·b) with b ← m·b + Δ, which is exactly
`torch.optim.SGD(nesterov=True)` fed Δ as the gradient. It works on flat fp32 vectors in place so
that every member, given the same aggregate, computes bit-identical results. It walks the vectors
in chunks that stay in cache: the same elementwise ops, so the same bits, without a full-size
temporary (a fresh 400 MB one at 100M parameters cost more in page faults than the arithmetic).
"""

from __future__ import annotations

import torch
from peertrain.swarm.diloco.member.config import OuterConfig

CHUNK = 1 << 18  # values per step of the walk: 1 MiB per vector, four vectors in L2/L3


class NesterovOuterOptimizer:
    def __init__(self, numel: int, config: OuterConfig) -> None:
        self.config = config
        self.momentum_buffer = torch.zeros(numel, dtype=torch.float32)

    @torch.no_grad()
    def step(self, params: torch.Tensor, pseudo_gradient: torch.Tensor) -> None:
        """Update `params` (θ_global, flat fp32) in place."""
        scratch = torch.empty(min(CHUNK, params.numel()), device=params.device)
        for start in range(0, params.numel(), CHUNK):
            stop = min(start + CHUNK, params.numel())
            self._step(
                params[start:stop],
                pseudo_gradient[start:stop],
                self.momentum_buffer[start:stop],
                scratch[: stop - start],
            )

    def _step(self, params, pseudo_gradient, momentum, scratch) -> None:
        lr, m = self.config.lr, self.config.momentum
        momentum.mul_(m).add_(pseudo_gradient)
        if self.config.nesterov:
            params.sub_(torch.add(pseudo_gradient, momentum, alpha=m, out=scratch), alpha=lr)
        else:
            params.sub_(momentum, alpha=lr)

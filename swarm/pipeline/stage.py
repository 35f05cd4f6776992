"""A stage server's compute: one slice of the model, forward, backward, gradient accumulation, step.

Recompute on backward. A server's `forward` keeps nothing: it runs under `no_grad` and returns the
output. `backward(x, grad_out)` receives the stage input again, recomputes the forward with autograd
on and backpropagates. This costs one extra forward per backward (which is why a backward counts
2.5 forwards in the wiring), and buys what SWARM needs most: the backward of a microbatch may go to
ANY server of the stage, not just the one that ran its forward. A server that dies between a
microbatch's forward and backward therefore loses nothing (the trainer still holds the input and
retries the backward elsewhere), and no server has to keep activations keyed by request with a
TTL: no memory that grows with in-flight requests, no expiry tuning, no "activation expired"
failures when a backward is slow. Servers of one stage hold identical parameters between steps
(same init, same averaged gradients, same optimizer), so a forward on one and a recompute on another
agree, up to a microbatch that straddles a step (the asynchrony SWARM accepts).

Gradients accumulate as sums weighted by samples (each microbatch's mean-loss gradient times its
size), so `step` can average exactly over every sample the stage saw: the injected `average`
callable (an all-reduce among the stage's servers in production, a plain sum in-process) takes
this server's (gradient sum, samples) and returns the stage's totals.

All methods are synchronous and hold the server's lock: call them from a worker thread
(`trio.to_thread.run_sync`), never on the event loop.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from peertrain.protocol.errors import DecodeError
from torch import nn

from .boundary import BoundaryTensor, pack, unpack
from .slices import StageSlice

Average = Callable[[torch.Tensor, int], tuple[torch.Tensor, int]]
OptimizerFactory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


def default_optimizer(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=3e-3)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageStatistics:
    stage: int
    forwards: int
    backwards: int
    steps: int
    pending_samples: int  # accumulated since the last step


class StageServer:
    """Serves one stage; `is_last` servers also compute the loss (`loss_backward`)."""

    def __init__(
        self,
        module: StageSlice,
        *,
        stage: int,
        is_last: bool,
        codec: str = "fp32",
        optimizer: OptimizerFactory = default_optimizer,
        max_rows: int = 4096,
    ) -> None:
        self.max_rows = max_rows
        self.stage = stage
        self.is_last = is_last
        self.codec = codec
        self.module = module
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._optimizer = optimizer(self._params)
        self._grad_sum = [torch.zeros_like(p) for p in self._params]
        self._samples = 0
        self._lock = threading.Lock()
        self._forwards = self._backwards = self._steps = 0

    # --- serving --------------------------------------------------------------------------
    def forward(self, x: BoundaryTensor) -> BoundaryTensor:
        inputs, _ = self._input(x)
        with self._lock, torch.no_grad():
            out = self.module(inputs)
            self._forwards += 1
        return pack(out, self.codec)

    def backward(self, x: BoundaryTensor, grad_out: BoundaryTensor) -> BoundaryTensor | None:
        """Recompute the forward on `x`, backpropagate `grad_out`; the input's gradient or None."""
        inputs, seq = self._input(x)
        expected = self.module.output_shape(inputs.shape[0], seq)
        if tuple(grad_out.shape) != expected:
            raise DecodeError(
                f"stage {self.stage} output gradient has shape {tuple(grad_out.shape)}, "
                f"not {expected}"
            )
        grad = unpack(grad_out)
        with self._lock:
            grad_in = self._backprop(
                inputs, lambda out: (out, grad), need_input_grad=self.stage > 0
            )
        return None if grad_in is None else pack(grad_in, self.codec)

    def loss_backward(
        self, x: BoundaryTensor, targets: torch.Tensor
    ) -> tuple[float, BoundaryTensor | None]:
        """Last stage: forward, mean cross-entropy over every position, backward;
        (loss, input gradient). `targets` may come flat (the wire's list of labels)."""
        if not self.is_last:
            raise ValueError(f"stage {self.stage} is not the last stage")
        inputs, seq = self._input(x)
        classes = self.module.classes
        positions = self.module.output_shape(inputs.shape[0], seq)[:-1]
        if targets.dtype != torch.int64 or targets.numel() != math.prod(positions):
            raise DecodeError(f"targets must be {math.prod(positions)} int64 labels")
        if targets.numel() and not 0 <= int(targets.min()) <= int(targets.max()) < classes:
            raise DecodeError(f"targets must be class indices below {classes}")
        labels = targets.reshape(-1)
        losses: list[float] = []

        def loss_of(out: torch.Tensor) -> tuple[torch.Tensor, None]:
            loss = F.cross_entropy(out.reshape(-1, classes), labels)
            losses.append(float(loss.detach()))
            return loss, None

        with self._lock:
            grad_in = self._backprop(inputs, loss_of, need_input_grad=self.stage > 0)
        return losses[0], None if grad_in is None else pack(grad_in, self.codec)

    def _input(self, tensor: BoundaryTensor) -> tuple[torch.Tensor, int]:
        """Decode a stage input from the network and check it fits this slice (DecodeError: the
        sender is to blame), instead of failing inside torch; (input, sequence length)."""
        shape = tuple(tensor.shape)
        if not shape or not 0 < shape[0] <= self.max_rows:
            raise DecodeError(f"stage {self.stage} input has shape {shape}")
        inputs = unpack(tensor)
        try:
            seq = self.module.check_input(inputs, self.max_rows)
        except DecodeError as exc:
            raise DecodeError(f"stage {self.stage}: {exc}") from None
        return inputs, seq

    def _backprop(self, inputs, head, *, need_input_grad: bool) -> torch.Tensor | None:
        inputs = inputs.detach().requires_grad_(need_input_grad)
        with torch.enable_grad():
            target, grad = head(self.module(inputs))
            wrt = [*self._params, inputs] if need_input_grad else self._params
            grads = torch.autograd.grad(target, wrt, grad_outputs=grad)
        rows = inputs.shape[0]
        for acc, g in zip(self._grad_sum, grads, strict=False):
            acc.add_(g, alpha=rows)
        self._samples += rows
        self._backwards += 1
        return grads[-1] if need_input_grad else None

    # --- averaging and stepping -----------------------------------------------------------
    @property
    def pending_samples(self) -> int:
        return self._samples

    def take_gradients(self) -> tuple[torch.Tensor, int]:
        """(flat sample-weighted gradient sum, samples) since the last take; resets both.

        Backwards that arrive after the take accumulate towards the next step, so the server
        keeps serving while the stage's all-reduce runs.
        """
        with self._lock:
            flat = torch.cat([g.reshape(-1) for g in self._grad_sum])
            samples = self._samples
            for acc in self._grad_sum:
                acc.zero_()
            self._samples = 0
            return flat, samples

    def apply_average(self, total: torch.Tensor, samples: int) -> None:
        """One optimizer step with the stage's gradient `total / samples` (no-op for 0 samples)."""
        if samples <= 0:
            return
        with self._lock:
            for p, g in zip(self._params, self._split(total / samples), strict=True):
                p.grad = g.clone()
            self._optimizer.step()
            self._optimizer.zero_grad(set_to_none=True)
            self._steps += 1

    def step(self, average: Average) -> int:
        """Take the gradients, average them with the stage's peers (weighted by samples), step.

        `average(local, n) -> (total, N)` is the blocking all-reduce; the server lock is NOT held
        while it runs, so forwards and backwards go on meanwhile. Returns N.
        """
        local, samples = self.take_gradients()
        total, stage_samples = average(local, samples)
        self.apply_average(total, stage_samples)
        return stage_samples

    def _split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        sizes = [p.numel() for p in self._params]
        return [v.view_as(p) for v, p in zip(flat.split(sizes), self._params, strict=True)]

    # --- migration (rebalancing) ----------------------------------------------------------
    def state(self) -> dict:
        """What a server moving INTO this stage downloads first: parameters and optimizer state."""
        with self._lock:
            return {
                "module": {k: v.clone() for k, v in self.module.state_dict().items()},
                # deep: load_state_dict may keep the tensors it is given (shared Adam moments)
                "optimizer": copy.deepcopy(self._optimizer.state_dict()),
            }

    def load_state(self, state: dict) -> None:
        with self._lock:
            self.module.load_state_dict(state["module"])
            self._optimizer.load_state_dict(state["optimizer"])

    def statistics(self) -> StageStatistics:
        return StageStatistics(
            stage=self.stage,
            forwards=self._forwards,
            backwards=self._backwards,
            steps=self._steps,
            pending_samples=self._samples,
        )

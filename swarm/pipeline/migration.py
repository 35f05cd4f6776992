"""A stage's state as one flat fp32 tensor, so a moving server downloads it like any other tensor.

A server that moves to another stage (rebalancing) or joins one mid-run must serve with that
stage's *current* parameters and optimizer moments, or its first backwards push the stage's
average the wrong way. `StageServer.state()` is a dict of tensors (convenient in-process); over
the network we send one flat fp32 tensor [parameters | Adam first moments | Adam second moments]
(no pickles: docs/design.md §6), plus two integers that travel in the control message: the Adam
step and the stage's averaging round. Its size is fixed by the slice's shape, so the receiver knows
exactly what to expect and refuses anything else.
"""

from __future__ import annotations

import torch

from .stage import StageServer


def state_numel(server: StageServer) -> int:
    return 3 * sum(p.numel() for p in server._params)


def export_state(server: StageServer) -> tuple[torch.Tensor, int]:
    """(flat [params | exp_avg | exp_avg_sq], Adam step) of `server` (sync: call in a thread)."""
    with server._lock:
        opt_state = server._optimizer.state
        params = server._params
        parts = [p.detach().reshape(-1) for p in params]
        step = 0
        for key in ("exp_avg", "exp_avg_sq"):
            for p in params:
                moment = opt_state.get(p, {}).get(key)
                parts.append(torch.zeros(p.numel()) if moment is None else moment.reshape(-1))
        for p in params:
            if "step" in opt_state.get(p, {}):
                step = int(opt_state[p]["step"])
        return torch.cat(parts).float().clone(), step


def import_state(server: StageServer, flat: torch.Tensor, adam_step: int) -> None:
    """Load what `export_state` produced on a server of the same stage (sync)."""
    params = server._params
    numel = sum(p.numel() for p in params)
    if flat.shape != (3 * numel,) or adam_step < 0:
        raise ValueError(f"stage state must be {3 * numel} values, got {tuple(flat.shape)}")
    values, exp_avg, exp_avg_sq = flat.split(numel)
    with server._lock, torch.no_grad():
        offset = 0
        for p in params:
            n = p.numel()
            p.copy_(values[offset : offset + n].view_as(p))
            if adam_step > 0:
                server._optimizer.state[p] = {
                    "step": torch.tensor(float(adam_step)),
                    "exp_avg": exp_avg[offset : offset + n].view_as(p).clone(),
                    "exp_avg_sq": exp_avg_sq[offset : offset + n].view_as(p).clone(),
                }
            else:
                server._optimizer.state.pop(p, None)
            offset += n

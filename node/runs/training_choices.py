"""How this node trains, whatever run it joins: the daemon's per-node choices, beside (not in)
the infrastructure of `NodeServices`. The run manager hands them to each session."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # at run time a node without --ranks never imports torch.distributed here
    from peertrain.swarm.diloco.member.intra_node import RankLease


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingChoices:
    attack: str | None = None  # research/testing: a Byzantine behaviour for runs (swarm/attacks)
    slowdown: float = 1.0  # research/testing: a slower machine (streaming_loop.py)
    # where this node trains and in what precision: its own choice, never the run's
    # (swarm/devices.py: auto|cpu|cuda[:N]|mps; fp32|bf16|fp16)
    device: str = "auto"
    precision: str = "fp32"
    public_name: str = ""  # the owner's --name, shown to the run beside our progress report
    sample_grid_every: int = 5  # rounds between a diffusion member's sample grids; 0: none
    # the ranks of a multi-GPU node (`--ranks N`; diloco/member/intra_node.py), lent to one run
    ranks: RankLease | None = None

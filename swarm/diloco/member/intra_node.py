"""A node with several devices: the ranks of one torch.distributed group behind one P2P identity.

Rank 0 is the node: its peer ID, its DiLoCo member, the network exchange, checkpoints. Ranks
1..N-1 are followers that never touch the network. Inner steps are data parallel inside the node:
rank r trains on micro-batch `i·N + r` of the member's shard, and one all_reduce per step averages
the gradients (and the loss), so the node is one member with an N× batch, exactly what
`accumulation=N` computes in one process (the test checks it). The all_reduce is the same call on
gloo (CPUs) and NCCL (one GPU per rank: `cuda:rank`), so the GPU path is this code unchanged.

Followers hold no state that matters: each `run(H)` starts with rank 0 broadcasting a command
(steps, inner step, shard, optimizer generation) and θ, and AdamW's state when rank 0 replaced
it (a member that adopts a state), so restarts, adoptions and shard moves reach them at the next
round. Identical gradients on identical parameters keep every rank's AdamW identical meanwhile.
A daemon started with `--ranks N` is rank 0 (node/cli/ranks.py starts the followers); it lends
its ranks to one DiLoCo run at a time (`RankLease`), sending each follower the run (`send_job`).
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from peertrain.swarm.data.batches import Batches
from peertrain.swarm.devices import resolve_device
from peertrain.swarm.diloco.member.config import InnerConfig
from peertrain.swarm.diloco.member.flat import ParamLayout
from peertrain.swarm.diloco.member.inner_loop import InnerLoop, InnerReport
from torch import nn

LEAVE_TIMEOUT = 30.0  # seconds a leaving rank waits at the barrier for the others

_STOP, _RUN = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class IntraNode:
    """This process's place in its node: rank of world, and the device it trains on."""

    rank: int
    world: int
    device: torch.device

    @classmethod
    def join(
        cls, *, rank: int, world: int, port: int, device: str = "cpu", address: str = "127.0.0.1"
    ) -> IntraNode:
        """Join the node's process group (gloo on CPUs, NCCL on GPUs: cuda:rank)."""
        resolved = resolve_device(device)
        if resolved.type == "cuda":
            resolved = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(resolved)
        dist.init_process_group(
            "nccl" if resolved.type == "cuda" else "gloo",
            init_method=f"tcp://{address}:{port}",
            rank=rank,
            world_size=world,
            # followers wait between runs for as long as the node lives
            timeout=datetime.timedelta(days=7),
        )
        return cls(rank=rank, world=world, device=resolved)

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def leave(self) -> None:
        """Leave the group together: gloo aborts a process (std::terminate, exit -6) whose peer
        tears its connections down while it still has a collective or a pair in flight, so on
        CPUs every rank meets at a barrier first (bounded: a rank that died is not waited for)."""
        if not dist.is_initialized():
            return
        if dist.get_backend() == "gloo":
            with contextlib.suppress(RuntimeError):
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=LEAVE_TIMEOUT))
        dist.destroy_process_group()


class DistributedInnerLoop(InnerLoop):
    """The inner loop of one rank; rank 0's is the member's (`DiLoCoMember(inner_loop=…)`)."""

    def __init__(
        self,
        model: nn.Module,
        batches: Batches,
        config: InnerConfig,
        *,
        node: IntraNode,
        shard: int = 0,
    ) -> None:
        super().__init__(model, batches, config, device=node.device)
        self.node = node
        self.shard = shard  # told to followers, who draw from the same shard
        self.layout = ParamLayout(model)
        self.generation = 0  # counts optimizer replacements (adoptions)
        self._sent_generation = 0
        self._stop: Callable[[], bool] | None = None  # rank 0's early stop, asked every step
        self._halt = False  # the node agreed to stop after this step

    def reset_optimizer(self, state) -> None:
        super().reset_optimizer(state)
        self.generation += 1

    def run(self, steps: int, stop: Callable[[], bool] | None = None) -> InnerReport:
        """Rank 0 decides when to stop early (`stop`, the group overtook us); its decision rides
        on each step's all_reduce, so every rank ends after the same step and no collective is
        left waiting for a rank that stopped. The step in flight when `stop()` turns true still
        ends on every rank: one step late, for no extra collective per step."""
        if self.node.leads:
            if stop is not None and stop():
                steps = 0
            self._broadcast_command(_RUN, steps)
        return self._run_together(steps, stop if self.node.leads else None)

    def _run_together(self, steps: int, stop: Callable[[], bool] | None) -> InnerReport:
        self._stop, self._halt = stop, False
        try:
            return super().run(steps, lambda: self._halt)
        finally:
            self._stop = None

    def close(self) -> None:
        """Rank 0: release the followers, leaving them at θ (the member's θ_global)."""
        if self.node.leads:
            self._broadcast_command(_STOP, 0)

    def micro_batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches.batch(index * self.node.world + self.node.rank)

    def _accumulate_gradients(self) -> float:
        """This rank's gradients, then the node's mean of them (and of the loss) in one
        all_reduce of one flat buffer, whose last entry carries rank 0's word to stop."""
        loss = super()._accumulate_gradients()
        params = [p for p in self.model.parameters() if p.requires_grad]
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        halt = 1.0 if self._stop is not None and self._stop() else 0.0
        tail = torch.tensor([loss, halt], device=self.device)
        flat = torch.cat([g.reshape(-1) for g in grads] + [tail])
        dist.all_reduce(flat)
        self._halt = bool(flat[-1] > 0)
        flat /= self.node.world
        for p, view in zip(params, flat[:-2].split([p.numel() for p in params]), strict=True):
            p.grad = view.view_as(p).clone()
        return float(flat[-2])

    def _broadcast_command(self, op: int, steps: int) -> None:
        fields = [op, steps, self.step, self.shard, self.generation]
        dist.broadcast(torch.tensor(fields, device=self.device), src=0)
        dist.broadcast(self.layout.flatten().to(self.device), src=0)
        if self.generation != self._sent_generation:
            dist.broadcast_object_list([self.optimizer.state_dict()], src=0)
            self._sent_generation = self.generation


def follow(loop: DistributedInnerLoop, batches_of: Callable[[int], Batches]) -> int:
    """A follower's life: run what rank 0 says until it says stop; the rounds it took part in.
    `batches_of(shard)`: this member's batches of a shard."""
    rounds = 0
    while True:
        command = torch.zeros(5, dtype=torch.int64, device=loop.device)
        dist.broadcast(command, src=0)
        op, steps, step, shard, generation = command.tolist()
        theta = torch.empty(loop.layout.numel, device=loop.device)
        dist.broadcast(theta, src=0)
        loop.layout.load(theta)
        if generation != loop.generation:
            state: list[Any] = [None]
            dist.broadcast_object_list(state, src=0)
            InnerLoop.reset_optimizer(loop, state[0])
            loop.generation = generation
        if op == _STOP:
            return rounds
        if shard != loop.shard:
            loop.batches, loop.shard = batches_of(shard), shard
        loop.step = step
        loop._run_together(steps, None)
        rounds += 1


class RankLease:
    """A node's ranks, lent to one run at a time (a second run trains on rank 0 alone)."""

    def __init__(self, node: IntraNode) -> None:
        self.node = node
        self.holder: str | None = None

    def take(self, run_id: str) -> IntraNode | None:
        if self.holder not in (None, run_id):
            return None
        self.holder = run_id
        return self.node

    def give_back(self, run_id: str) -> None:
        if self.holder == run_id:
            self.holder = None


def send_job(node: IntraNode, job: dict[str, Any] | None) -> None:
    """Rank 0: tell the followers which run to follow next (a spec's bytes and the data path),
    or, with None, that the node stops."""
    dist.broadcast_object_list([job], src=0)


def serve_jobs(node: IntraNode, run: Callable[[dict[str, Any]], None]) -> None:
    """A follower process: take part in each run rank 0 sends, one after another, until rank 0
    says the node stops."""
    while True:
        job: list[Any] = [None]
        dist.broadcast_object_list(job, src=0)
        if job[0] is None:
            return
        run(job[0])

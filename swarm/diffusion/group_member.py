"""An expert group's (or the router group's) DiLoCo member: the DiT behind the inner-loop interface.

The DiLoCo inner loop calls `model(x, y)` → (output, loss) on batches addressed by step; here x
is a batch of clean images and y carries everything random about the step (t, ε, and for the
router the clusters), drawn from a seeded generator per (seed, shard, step). So the flow-matching
and router losses run unchanged inside DiLoCo's inner loop, a restarted member redraws the same
noise, and every member of a group builds the same initial weights from the group's seed. The
group's state (θ ‖ outer momentum, as the DiLoCo driver serves it) becomes a sampler's model with
`model_from_state`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from peertrain.swarm.diloco.member.build import BuiltMember, member_settings
from peertrain.swarm.diloco.member.config import InnerConfig
from peertrain.swarm.diloco.member.flat import ParamLayout
from peertrain.swarm.diloco.member.member import DiLoCoMember, MemberState
from torch import Tensor, nn

from ..data.shards import seeded_int
from .errors import DiffusionError
from .flow import RectifiedFlow, conditional_velocity, noised
from .model import DiT
from .run_spec import ROUTER, DiffusionSpec

EVAL_BATCHES = 4
EVAL_SEED = 7919


class ExpertObjective(nn.Module):
    """`forward(x0, y)`, y = [t ‖ ε]: (velocity, flow-matching loss)."""

    def __init__(self, dit: DiT) -> None:
        super().__init__()
        self.dit, self.schedule = dit, RectifiedFlow()

    def forward(self, x0: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        t, eps = y[:, 0], y[:, 1:].reshape(x0.shape)
        velocity = self.dit(noised(self.schedule, x0, eps, t), t)
        target = conditional_velocity(self.schedule, x0, eps, t)
        return velocity, torch.mean((velocity - target) ** 2)


class RouterObjective(nn.Module):
    """`forward(x0, y)`, y = [cluster ‖ t ‖ ε]: (logits, cross-entropy against the cluster)."""

    def __init__(self, dit: DiT) -> None:
        super().__init__()
        self.dit, self.schedule = dit, RectifiedFlow()

    def forward(self, x0: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        clusters, t, eps = y[:, 0].long(), y[:, 1], y[:, 2:].reshape(x0.shape)
        logits = self.dit(noised(self.schedule, x0, eps, t), t)
        return logits, F.cross_entropy(logits, clusters)


class GroupBatches:
    """Batches of one shard of a group's images with their step's noise (and clusters)."""

    def __init__(
        self, images: Tensor, clusters: Tensor | None, *, batch_size: int, seed: int, shard: int
    ) -> None:
        self.images, self.clusters = images, clusters
        self.batch_size, self.seed, self.shard = batch_size, seed, shard

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        generator = torch.Generator().manual_seed(seeded_int("dit", self.seed, self.shard, step))
        rows = torch.randint(len(self.images), (self.batch_size,), generator=generator)
        x0 = self.images[rows]
        t = torch.rand(self.batch_size, generator=generator)
        eps = torch.randn(x0.shape, generator=generator)
        parts = [t[:, None], eps.flatten(1)]
        if self.clusters is not None:
            parts.insert(0, self.clusters[rows, None].float())
        return x0, torch.cat(parts, dim=1)


class GroupData:
    """A group's images (one cluster for an expert, all of them for the router) that the group's
    members draw batches from; the `dataset` a `BuiltMember` moves between shards."""

    def __init__(self, images: Tensor, clusters: Tensor | None) -> None:
        if len(images) == 0:
            raise DiffusionError("this group's cluster holds no images")
        self.images, self.clusters = images, clusters

    def train_batches(self, shard: int, num_shards: int, *, batch_size: int, seed: int):
        """Batches drawn from all of the group's images by a stream of `shard`'s own: members
        (distinct shard indices) draw distinct batches, and a group smaller than `num_shards`
        still trains on all of its data (dealt in fixed slices, a lone member would see 1/8 of
        its cluster and overfit it; the router then collapsed to the prior after ~30 rounds)."""
        del num_shards  # the group's members share the data by their streams, not by slices
        return GroupBatches(
            self.images, self.clusters, batch_size=batch_size, seed=seed, shard=shard
        )

    def eval_batches(self, *, batch_size: int, max_batches: int) -> list[tuple[Tensor, Tensor]]:
        """Fixed batches (fixed noise) of the whole group's data: comparable round to round."""
        source = GroupBatches(
            self.images, self.clusters, batch_size=batch_size, seed=EVAL_SEED, shard=0
        )
        return [source.batch(i) for i in range(max_batches)]


def objective_of(spec: DiffusionSpec, group: str) -> nn.Module:
    """The group's trainable module, with the group's initial weights."""
    dit = spec.model_config_of(group).build(seed=spec.group_spec(group).seed)
    return RouterObjective(dit) if group == ROUTER else ExpertObjective(dit)


def group_data(images: Tensor, assignments: np.ndarray, group: str) -> GroupData:
    clusters = torch.from_numpy(np.asarray(assignments, dtype=np.int64))
    if group == ROUTER:
        return GroupData(images, clusters)
    k = int(group.removeprefix("expert-"))
    return GroupData(images[clusters == k], None)


def build_group_member(
    spec: DiffusionSpec, group: str, peer_id: str, images: Tensor, assignments: np.ndarray
) -> BuiltMember:
    """This peer's DiLoCo member of `group`, on its shard of the group's images."""
    dspec = spec.group_spec(group)
    data = group_data(images, assignments, group)
    shard = dspec.shard_of(peer_id)
    member = DiLoCoMember(
        objective_of(spec, group),
        data.train_batches(shard, dspec.num_shards, batch_size=dspec.batch_size, seed=dspec.seed),
        inner=InnerConfig(
            steps=dspec.inner_steps,
            batch_size=dspec.batch_size,
            lr=dspec.lr,
            warmup_steps=dspec.warmup_steps,
            weight_decay=0.0,
        ),
        **member_settings(dspec),
    )
    held_out = data.eval_batches(batch_size=64, max_batches=EVAL_BATCHES)
    return BuiltMember(member=member, shard=shard, eval_batches=held_out, spec=dspec, dataset=data)


def state_numel(spec: DiffusionSpec, group: str) -> int:
    """Values in the group's served state: parameters and outer momentum."""
    return 2 * sum(p.numel() for p in objective_of(spec, group).parameters())


def _checked_layout(spec: DiffusionSpec, group: str, flat: Tensor) -> tuple[nn.Module, ParamLayout]:
    """(the group's objective, its layout) once `flat` (θ ‖ momentum) fits it and is finite."""
    objective = objective_of(spec, group)
    layout = ParamLayout(objective)
    if flat.numel() != 2 * layout.numel:
        raise DiffusionError(
            f"{group}'s state has {flat.numel()} values; this run's model needs {2 * layout.numel}"
        )
    if not bool(torch.isfinite(flat).all()):
        raise DiffusionError(f"{group}'s state holds NaN or Inf values")
    return objective, layout


def model_from_state(spec: DiffusionSpec, group: str, flat: Tensor) -> DiT:
    """The group's DiT holding θ_global from its served state (θ ‖ momentum, fp32)."""
    objective, layout = _checked_layout(spec, group, flat)
    layout.load(flat[: layout.numel].float())
    return objective.dit.eval()


def member_state_of(spec: DiffusionSpec, group: str, flat: Tensor, round_: int) -> MemberState:
    """A served state of `group` (θ ‖ momentum) as a checkpoint a member resumes from (its own
    inner optimizer and residual start fresh, as a DiLoCo joiner's do)."""
    _, layout = _checked_layout(spec, group, flat)
    flat = flat.float()
    params = {k: v.clone() for k, v in layout.named(flat[: layout.numel]).items()}
    return MemberState(round=round_, params=params, momentum=flat[layout.numel :].clone())

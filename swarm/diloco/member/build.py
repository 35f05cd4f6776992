"""Build a member from a run spec: the same model everywhere, this peer's shard of the data.

Every member initialises the model from the spec's seed, so a fresh group starts from one
θ_global without transferring it; the dataset is loaded once per process (cached by its
settings), since members of a local swarm in one process share it read-only. The driver moves a
member to another shard when the group changes (`use_shard`), so live members cover distinct
shards instead of colliding by chance.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from peertrain.protocol.packing import pack
from peertrain.swarm.data.shards import seeded_int
from peertrain.swarm.devices import resolve_device
from peertrain.swarm.diloco.member.config import InnerConfig, OuterConfig
from peertrain.swarm.diloco.member.flat import ParamLayout
from peertrain.swarm.diloco.member.inner_loop import evaluate
from peertrain.swarm.diloco.member.intra_node import DistributedInnerLoop, IntraNode, follow
from peertrain.swarm.diloco.member.member import DiLoCoMember
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.diloco.member.streaming import StreamingMember
from peertrain.swarm.exchange.codec import ProtocolCodec
from peertrain.swarm.models.config import ConfigError

MIN_PROBE_ROWS = 64


@dataclass(slots=True, kw_only=True)
class BuiltMember:
    member: DiLoCoMember | StreamingMember
    shard: int
    eval_batches: list[Any]
    spec: DiLoCoSpec
    dataset: Any
    order: int = 0  # seed of our batch order (with scores, our own: see `use_shard`)

    def use_shard(self, shard: int) -> None:
        """Train on `shard` from now on (batches are addressed by step, so nothing is replayed).
        With contribution scores shards are dealt by hash and two members often share one; in
        the same order they took the same batches at the same step and sent the same update
        (flagged as a copy, and wasted work), so each member keeps an order of its own."""
        if shard != self.shard:
            self.member.inner.batches = _shard_batches(self.spec, self.dataset, shard, self.order)
            if isinstance(self.member.inner, DistributedInnerLoop):
                self.member.inner.shard = shard  # its followers hear of it at the next run
            self.shard = shard

    def sample(self, prompt: str, max_new_tokens: int = 160, *, seed: int = 0) -> str:
        """Text from θ_global (GPT runs only), on a copy so training is never disturbed."""
        from peertrain.swarm.models import GPT, sample_text

        if not isinstance(self.member.model, GPT):
            raise TypeError("only GPT runs can sample text")
        find = getattr(self.dataset, "tokenizer", None)  # a token file's, when beside it
        tokenizer = find() if find is not None else None
        return sample_text(
            self.global_model(), prompt, max_new_tokens, seed=seed, tokenizer=tokenizer
        )

    def global_model(self) -> torch.nn.Module:
        """A copy of the model holding θ_global (for sampling and export): training goes on."""
        import copy

        model = copy.deepcopy(self.member.model)
        ParamLayout(model).load(self.member.global_params)
        return model

    def eval_loss(self) -> float:
        """Loss of θ_global on the run's fixed eval batches (a DiLoCo model holds θ_global
        between rounds; a streaming one has trained on since its early fragments landed)."""
        model = self.global_model() if isinstance(self.member, StreamingMember) else None
        with torch.no_grad():
            return evaluate(model or self.member.model, self.eval_batches)


def build_member(
    spec: DiLoCoSpec,
    peer_id: str,
    *,
    eval_batches: int = 8,
    data: str | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    intra: IntraNode | None = None,
) -> BuiltMember:
    """`data`: the local file of a run that trains on user data (checked against its digest).
    `device`, `precision`: this member's own choice (swarm/devices.py); the model is built on
    the CPU from the seed (the same weights everywhere), then moved. `intra`: rank 0 of a node
    of several ranks (intra_node.py), whose followers run `run_follower`."""
    dataset = _dataset(spec.dataset, pack(dict(sorted(spec.dataset_settings.items()))), data)
    device_of = intra.device if intra is not None else resolve_device(device)
    model = spec.model_config().build(seed=spec.seed).to(device_of)
    shard = spec.shard_of(peer_id)
    order = (
        seeded_int("member-order", spec.seed, peer_id) % (1 << 40) if spec.scoring != "off" else 0
    )
    batches = _shard_batches(spec, dataset, shard, order)
    inner = inner_config(spec, precision)
    loop = None
    if intra is not None:
        loop = DistributedInnerLoop(model, batches, inner, node=intra, shard=shard)
    member: DiLoCoMember | StreamingMember
    if spec.streaming:
        if intra is not None:
            raise ConfigError("a Streaming DiLoCo member trains on one rank (no --ranks)")
        member = StreamingMember(
            model, batches, inner=inner, streaming=spec.streaming_config(), **member_settings(spec)
        )
    else:
        member = DiLoCoMember(model, batches, inner=inner, inner_loop=loop, **member_settings(spec))
    held_out = dataset.eval_batches(batch_size=64, max_batches=eval_batches)
    return BuiltMember(
        member=member, shard=shard, eval_batches=held_out, spec=spec, dataset=dataset, order=order
    )


def run_follower(
    spec: DiLoCoSpec, intra: IntraNode, *, data: str | None = None, precision: str = "fp32"
) -> tuple[int, torch.nn.Module]:
    """A follower rank of a node (intra_node.py): the run's model on this rank's device, trained
    as rank 0 commands; returns the rounds it took part in and the model, left at θ_global."""
    dataset = _dataset(spec.dataset, pack(dict(sorted(spec.dataset_settings.items()))), data)
    model = spec.model_config().build(seed=spec.seed).to(intra.device)
    loop = DistributedInnerLoop(
        model, _shard_batches(spec, dataset, 0), inner_config(spec, precision), node=intra
    )
    return follow(loop, lambda shard: _shard_batches(spec, dataset, shard)), model


def probe_batches(built: BuiltMember, *, pool: int):
    """What contribution scores probe with (swarm/scoring/probe.py): a pool of `pool` held-out
    batches, and batch-by-step of any training shard, each of what one inner step sees (at
    least `MIN_PROBE_ROWS` rows: 32 made the digits probes too noisy to tell work on another
    member's shard from honest work)."""
    spec, dataset = built.spec, built.dataset
    rows = max(spec.batch_size * spec.accumulation, MIN_PROBE_ROWS)
    heldout = dataset.eval_batches(batch_size=rows, max_batches=pool)

    def shard_batches(shard: int):
        return dataset.train_batches(shard, spec.num_shards, batch_size=rows, seed=spec.seed).batch

    return heldout, shard_batches


def inner_config(spec: DiLoCoSpec, precision: str = "fp32") -> InnerConfig:
    return InnerConfig(
        steps=spec.inner_steps,
        batch_size=spec.batch_size,
        lr=spec.lr,
        warmup_steps=spec.warmup_steps,
        accumulation=spec.accumulation,
        precision=precision,
    )


def _shard_batches(spec: DiLoCoSpec, dataset: Any, shard: int, order: int = 0):
    batches = dataset.train_batches(
        shard, spec.num_shards, batch_size=spec.batch_size, seed=spec.seed
    )
    return OffsetBatches(batches, order) if order else batches


@dataclass(frozen=True, slots=True)
class OffsetBatches:
    """A shard's batches from step `offset` on: the same rows (the run's seed deals them), in an
    order of a member's own."""

    batches: Any
    offset: int

    def batch(self, step: int):
        return self.batches.batch(step + self.offset)

    @property
    def batch_size(self) -> int:
        return self.batches.batch_size


def member_settings(spec: DiLoCoSpec) -> dict[str, Any]:
    """The outer half of a member as the spec sets it: outer optimizer, codec, aggregation."""
    return {
        "outer": OuterConfig(lr=spec.outer_lr, momentum=spec.outer_momentum),
        "codec": ProtocolCodec(spec.codec),
        "error_feedback": spec.error_feedback,
        "aggregator": spec.build_aggregator(),
    }


@functools.lru_cache(maxsize=4)
def _dataset(name: str, settings: bytes, data: str | None = None):
    from peertrain.protocol.packing import unpack
    from peertrain.swarm.data import dataset_config

    return dataset_config(name, unpack(settings, max_size=1 << 16)).build(data)

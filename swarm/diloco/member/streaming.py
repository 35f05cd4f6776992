"""A Streaming DiLoCo member: DiLoCo's outer step, one fragment at a time, landing τ steps late.

The member trains the whole model without pause; after each H/P inner steps one fragment is due
(fragments.py). Its exchange is two calls around whatever carries the payloads:

    slot = member.due()                         # after member.train(k)
    payload = member.prepare_fragment(slot)     # Δ_p = θ_global[p] − θ_local[p], encoded
    ... τ more inner steps while the payloads travel ...
    report = member.apply_fragment(slot, contributions)   # outer step on θ_global[p], then mix

The shared state is kept per fragment (θ_global[p], its outer momentum, its round) and hashed per
fragment: that is what members must agree on. What the mixing rule and Eager leave in the local
parameters is each member's own, like its AdamW state. Each update carries the samples it stands
for (sample_weights.py), so members of unequal speed count by the data they saw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from peertrain.swarm.aggregation import Aggregator, build_aggregator
from peertrain.swarm.data.batches import Batches
from peertrain.swarm.diloco.errors import DiLoCoError
from peertrain.swarm.diloco.member.config import InnerConfig, OuterConfig, StreamingConfig
from peertrain.swarm.diloco.member.flat import ParamLayout
from peertrain.swarm.diloco.member.fragments import Fragment, FragmentSchedule, split_fragments
from peertrain.swarm.diloco.member.inner_loop import InnerLoop, InnerReport
from peertrain.swarm.diloco.member.member import MemberState, aggregate_deltas, decode_contributions
from peertrain.swarm.diloco.member.outer_step import NesterovOuterOptimizer
from peertrain.swarm.diloco.member.sample_weights import HEADER, split_samples, weigh, with_samples
from peertrain.swarm.diloco.member.state_hash import state_hash
from peertrain.swarm.exchange.codec import ErrorFeedbackEncoder, ProtocolCodec, UpdateCodec
from peertrain.swarm.exchange.interface import Contribution
from torch import nn


@dataclass(frozen=True, slots=True, kw_only=True)
class FragmentReport:
    slot: int
    fragment: int
    round: int  # the fragment's round that completed
    accepted: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...]
    update_norm: float  # NaN when nothing was applied
    state_hash: str  # the fragment's shared state after the outer step
    weights: tuple[float, ...] = ()  # shares by clipped sample claim, as given to the rule
    samples: tuple[tuple[str, int], ...] = ()  # (sender, clipped sample claim) of the accepted


class StreamingMember:
    def __init__(
        self,
        model: nn.Module,
        batches: Batches,
        *,
        inner: InnerConfig,
        streaming: StreamingConfig,
        outer: OuterConfig | None = None,
        codec: UpdateCodec | None = None,
        error_feedback: bool = True,
        aggregator: Aggregator | None = None,
        max_samples: int | None = None,
    ) -> None:
        """`max_samples`: the most one update counts for (default: H steps of the run's batch,
        a fragment round at the nominal pace)."""
        streaming.check(inner.steps)
        self.model = model
        self.config = streaming
        self.layout = ParamLayout(model)
        self.inner = InnerLoop(model, batches, inner)
        self.schedule = FragmentSchedule(inner.steps, streaming.fragments)
        self.fragments = split_fragments(self.layout, streaming.fragments)
        codec = codec or ProtocolCodec("fp32")
        self.outers = [
            NesterovOuterOptimizer(f.numel, outer or OuterConfig()) for f in self.fragments
        ]
        self.encoders = [
            ErrorFeedbackEncoder(codec, f.numel, enabled=error_feedback) for f in self.fragments
        ]
        self.aggregator = aggregator or build_aggregator("mean")
        self.norm_reference: tuple[frozenset[str], ...] = ()  # as DiLoCoMember's
        self.global_params = self.layout.flatten()
        self.rounds = [0] * len(self.fragments)
        self.samples_per_step = batches.batch_size * inner.accumulation
        self.max_samples = max_samples or inner.steps * self.samples_per_step
        self._synced_at = [0] * len(self.fragments)  # inner step of each fragment's last sync
        self._in_flight: dict[int, int] = {}  # fragment → slot sent, outer step not yet applied

    def train(self, steps: int) -> InnerReport:
        return self.inner.run(steps)

    def slot_nbytes(self, slot: int) -> int:
        """The size of every member's payload for `slot` (its fragment's, encoded)."""
        p = self.schedule.fragment(slot)
        return HEADER.size + self.encoders[p].codec.payload_bytes(self.fragments[p].numel)

    def due(self) -> int | None:
        """The slot due after the inner steps taken so far, if any."""
        return self.schedule.due(self.inner.step)

    def prepare_fragment(self, slot: int) -> bytes:
        """Encode the fragment's pseudo-gradient after the samples it stands for; with Eager,
        step the local fragment with it."""
        frag = self._fragment(slot)
        if frag.index in self._in_flight:
            raise DiLoCoError(f"fragment {frag.index} sent again before its outer step landed")
        with torch.no_grad():
            start = frag.gather(self.global_params)
            delta = start - self.layout.flatten_ranges(frag.ranges)
        encoder = self.encoders[frag.index]
        payload = encoder.encode(delta)
        if self.config.eager:
            own = encoder.codec.decode(payload, frag.numel)
            eager = NesterovOuterOptimizer(frag.numel, self.outers[frag.index].config)
            eager.momentum_buffer = self.outers[frag.index].momentum_buffer.clone()
            eager.step(start, own)
            self.layout.load_ranges(frag.ranges, start)
        self._in_flight[frag.index] = slot
        samples = (self.inner.step - self._synced_at[frag.index]) * self.samples_per_step
        self._synced_at[frag.index] = self.inner.step
        return with_samples(samples, payload)

    def apply_fragment(self, slot: int, contributions: Sequence[Contribution]) -> FragmentReport:
        """Aggregate the fragment's updates, step θ_global[p], merge it into the local model."""
        frag = self._fragment(slot)
        if self._in_flight.pop(frag.index, slot) != slot:
            raise DiLoCoError(f"fragment {frag.index}: outer step for slot {slot} out of order")
        codec = self.encoders[frag.index].codec
        stripped, claims, refused = split_samples(contributions, self.max_samples)
        accepted, rejected, deltas = decode_contributions(codec, frag.numel, stripped)
        rejected[:0] = refused
        weights = weigh(deltas, [claims[sender] for sender in accepted])
        update = aggregate_deltas(
            self.aggregator, frag.numel, accepted, rejected, deltas, self.norm_reference
        )
        norm = math.nan
        global_frag = frag.gather(self.global_params)
        if update is not None:
            norm = update.norm().item()
            self.outers[frag.index].step(global_frag, update)
            frag.scatter(self.global_params, global_frag)
        self._merge(frag, global_frag)
        self.rounds[frag.index] += 1
        return FragmentReport(
            slot=slot,
            fragment=frag.index,
            round=self.rounds[frag.index] - 1,
            accepted=tuple(accepted),
            rejected=tuple(rejected),
            update_norm=norm,
            state_hash=self.fragment_hash(frag.index),
            weights=weights,
            samples=tuple((sender, claims[sender]) for sender in accepted),
        )

    @torch.no_grad()
    def _merge(self, frag: Fragment, global_frag: torch.Tensor) -> None:
        """θ_local ← α·θ_local + (1 − α)·θ_global for the fragment (α = 0: take θ_global)."""
        alpha = self.config.mix
        if alpha:
            local = self.layout.flatten_ranges(frag.ranges)
            global_frag = local.mul_(alpha).add_(global_frag, alpha=1 - alpha)
        self.layout.load_ranges(frag.ranges, global_frag)

    def _fragment(self, slot: int) -> Fragment:
        p = self.schedule.fragment(slot)
        if self.schedule.fragment_round(slot) != self.rounds[p]:
            raise DiLoCoError(
                f"slot {slot} is round {self.schedule.fragment_round(slot)} of fragment {p}, "
                f"which is at round {self.rounds[p]}"
            )
        return self.fragments[p]

    # -- state ----------------------------------------------------------------------------------

    def fragment_hash(self, p: int) -> str:
        """The shared state of fragment `p`: its round, θ_global values and outer momentum."""
        frag = self.fragments[p]
        named = self.layout.named(self.global_params)
        params = {  # a parameter held in part is hashed by its part's label
            label: named[label] if label in named else self.global_params[a:b]
            for label, (a, b) in zip(frag.labels, frag.ranges, strict=True)
        }
        return state_hash(self.rounds[p], params, self.outers[p].momentum_buffer)

    def fragment_hashes(self) -> list[str]:
        return [self.fragment_hash(p) for p in range(len(self.fragments))]

    # -- the shared state as a whole, between rounds (state sync, checkpoints) ------------------

    @property
    def round(self) -> int:
        """The fragment rounds every fragment completed: the run's round between two rounds."""
        return min(self.rounds)

    @property
    def momentum_buffer(self) -> torch.Tensor:
        """Every fragment's outer momentum in the layout's order, as DiLoCoMember's."""
        return self._joined([outer.momentum_buffer for outer in self.outers])

    def state_hash(self) -> str:
        """The whole shared state's checksum, as DiLoCoMember's (between rounds only)."""
        self._between_rounds()
        return state_hash(self.round, self.layout.named(self.global_params), self.momentum_buffer)

    def snapshot(self, *, include_local: bool = True) -> MemberState:
        """Between rounds (every fragment at one round, none in flight): what a checkpoint
        holds, in DiLoCoMember's form, so a plain member's checks and stores apply."""
        self._between_rounds()
        local = None
        if include_local:
            local = (self.inner, self._joined([encoder.residual for encoder in self.encoders]))
        return MemberState.of(
            self.round, self.layout, self.global_params, self.momentum_buffer, local=local
        )

    def restore(self, state: MemberState) -> None:
        """Adopt `state` (every fragment at its round); nothing stays in flight."""
        flat = self.layout.join(state.params)
        momentum = state.momentum_for(self.layout.numel)
        residual = state.residual if state.residual is not None else torch.zeros_like(momentum)
        for frag, outer, encoder in zip(self.fragments, self.outers, self.encoders, strict=True):
            outer.momentum_buffer = frag.gather(momentum)
            encoder.residual = frag.gather(residual.detach().float())
        self.global_params = flat
        self.layout.load(flat)
        self.rounds = [state.round] * len(self.fragments)
        self.inner.step = state.inner_step
        self.inner.reset_optimizer(state.inner_optimizer)
        self._in_flight.clear()
        self._synced_at = [self.inner.step] * len(self.fragments)

    def _joined(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """Per-fragment vectors as one vector in the layout's order."""
        full = torch.zeros(self.layout.numel, dtype=torch.float32)
        for frag, part in zip(self.fragments, parts, strict=True):
            frag.scatter(full, part)
        return full

    def _between_rounds(self) -> None:
        if self._in_flight or len(set(self.rounds)) > 1:
            raise DiLoCoError(
                f"fragments mid-round (rounds {self.rounds}, in flight {sorted(self._in_flight)})"
            )

"""One DiLoCo group member: the outer algorithm wrapped around an ordinary inner training loop.

A round, as the daemon drives it (torch phases in a worker thread, the exchange on the event loop):

    payload = member.prepare_update()          # H AdamW steps, Δ = θ_global − θ_local, encode
    contributions = <gossip the payloads>      # everyone's encoded Δ for this round, own included
    report = member.apply_update(contributions)  # decode, aggregate, outer Nesterov step, reset

`run_round(exchange)` chains the three for members that own a thread (tests, benchmarks). The member
holds θ_global as a flat fp32 vector next to the model; after every round the model is reset to it.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from peertrain.protocol.errors import DecodeError
from peertrain.swarm.aggregation import Aggregator, NotEnoughUpdates, RejectReason, build_aggregator
from peertrain.swarm.aggregation.streaming import UpdateSource
from peertrain.swarm.data.batches import Batches
from peertrain.swarm.diloco.errors import DiLoCoError
from peertrain.swarm.diloco.member.config import InnerConfig, OuterConfig
from peertrain.swarm.diloco.member.flat import ParamLayout
from peertrain.swarm.diloco.member.inner_loop import InnerLoop, InnerReport
from peertrain.swarm.diloco.member.outer_step import NesterovOuterOptimizer
from peertrain.swarm.diloco.member.state_hash import state_hash
from peertrain.swarm.exchange.codec import ErrorFeedbackEncoder, Payload, ProtocolCodec, UpdateCodec
from peertrain.swarm.exchange.interface import Contribution, UpdateExchange
from peertrain.swarm.exchange.payload_source import Admissions
from torch import nn

EQUIVOCATION = "equivocation"  # a sender with several updates for one round
UNDECODABLE = "undecodable"  # the codec refused the payload
# every kind `rejection_kind` names: each counter of them is shown, zeros too (a /metrics
# series that appears only on the first rejection cannot be told from one never exported)
REJECTION_KINDS = (*(str(r) for r in RejectReason), EQUIVOCATION, UNDECODABLE)


def rejection_kind(reason: str) -> str:
    """A rejection's reason in a few words from a fixed set (a metrics label): the aggregation
    rule's `RejectReason`, EQUIVOCATION or UNDECODABLE. Reasons are made in this module only."""
    head = reason.partition(":")[0]
    if head in set(RejectReason):
        return head
    return EQUIVOCATION if reason.startswith("sent ") else UNDECODABLE


def decode_contributions(
    codec: UpdateCodec,
    numel: int,
    contributions: Sequence[Contribution],
    *,
    as_sources: bool = False,
    admitted: Mapping[str, tuple[Any, UpdateSource]] | None = None,
) -> tuple[list[str], list[tuple[str, str]], list[Any]]:
    """(accepted senders, rejected (sender, why), decoded Δ) in sender order: equivocators
    (several updates for one exchange) and undecodable payloads are refused. `as_sources`:
    each Δ as an aggregation `UpdateSource` (`codec.source`: int8 is read in place, chunk by
    chunk, never decoded whole), after the same checks; `admitted`: sources already made (and
    measured) as the payloads arrived (payload_source.Admissions), used for the same payload."""
    admitted = admitted or {}
    accepted: list[str] = []
    rejected: list[tuple[str, str]] = []
    deltas: list[Any] = []
    decode = codec.source if as_sources else codec.decode
    counts = Counter(c.sender for c in contributions)
    for c in sorted(contributions, key=lambda c: c.sender):
        if counts[c.sender] > 1:  # equivocation: no order-independent way to pick one
            rejected.append((c.sender, f"sent {counts[c.sender]} updates for one round"))
            continue
        ready = admitted.get(c.sender)
        if ready is not None and ready[0] is c.payload:
            deltas.append(ready[1])
            accepted.append(c.sender)
            continue
        try:
            deltas.append(decode(c.payload, numel))
        except DecodeError as exc:
            rejected.append((c.sender, str(exc)))
            continue
        accepted.append(c.sender)
    return accepted, rejected, deltas


def aggregate_deltas(
    aggregator: Aggregator,
    numel: int,
    accepted: list[str],
    rejected: list[tuple[str, str]],
    deltas: Sequence[torch.Tensor] | Sequence[UpdateSource],
    norm_reference: Sequence[Collection[str]] = (),
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The rule's update (None if nothing usable); senders it refused move to `rejected`.
    `deltas`: decoded tensors, or `UpdateSource`s (decode_contributions(as_sources=True)).
    `norm_reference`: tiers of senders whose norms set the norm bound (validation.judge_values):
    the first tier with a sender among the updates does; none: the median of all.
    `out`: where to write the update (numel fp32; a reused buffer faults no pages in)."""
    if not deltas:
        return None
    try:
        reference = next(
            (
                found
                for tier in norm_reference
                if (found := [i for i, sender in enumerate(accepted) if sender in tier])
            ),
            [],
        )
        if all(isinstance(d, torch.Tensor) for d in deltas):
            result = aggregator.aggregate(deltas, numel=numel, reference=reference, out=out)
        else:
            result = aggregator.aggregate_streaming(
                deltas,  # type: ignore[arg-type]
                numel=numel,
                reference=reference,
                out=out,
            )
        update, verdicts = result.update, result.verdicts
    except NotEnoughUpdates as exc:
        update, verdicts = None, exc.verdicts
    refused = {v.index: f"{v.reason}: {v.detail}" for v in verdicts if not v.accepted}
    rejected.extend((accepted[i], why) for i, why in sorted(refused.items()))
    accepted[:] = [sender for i, sender in enumerate(accepted) if i not in refused]
    return update


def apply_contributions(
    contributions: Sequence[Contribution],
    *,
    codec: UpdateCodec,
    aggregator: Aggregator,
    outer: NesterovOuterOptimizer,
    params: torch.Tensor,
    norm_reference: Sequence[Collection[str]] = (),
    out: torch.Tensor | None = None,
    admitted: Mapping[str, tuple[Any, UpdateSource]] | None = None,
) -> tuple[list[str], list[tuple[str, str]], float]:
    """A round's compute after the exchange: check and aggregate the updates (int8 read in
    place, never decoded whole; `admitted`: those already checked as they arrived), then the
    outer step on `params` (θ_global, in place).
    (accepted, rejected, the update's norm: NaN when nothing was applied)."""
    numel = params.numel()
    accepted, rejected, sources = decode_contributions(
        codec, numel, contributions, as_sources=True, admitted=admitted
    )
    update = aggregate_deltas(
        aggregator, numel, accepted, rejected, sources, norm_reference, out=out
    )
    if update is None:
        return accepted, rejected, math.nan
    norm = update.norm().item()
    outer.step(params, update)
    return accepted, rejected, norm


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundReport:
    round: int  # the round that completed; the member is now at round + 1
    inner: InnerReport | None  # None when this member did no inner steps for the round
    accepted: tuple[str, ...]  # senders whose updates were aggregated, sorted
    rejected: tuple[tuple[str, str], ...]  # (sender, reason): undecodable, or refused by the rule
    payload_bytes: int  # this member's own payload for the round (0 if none)
    update_norm: float  # L2 norm of the aggregated pseudo-gradient (NaN when nothing was applied)
    state_hash: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberState:
    """Everything needed to resume a member. Only (round, params, momentum) is shared by the group;
    the rest is this member's own and may be absent (a joiner starts with fresh AdamW)."""

    round: int
    params: Mapping[str, torch.Tensor]  # θ_global by parameter name
    momentum: torch.Tensor
    inner_step: int = 0
    inner_optimizer: Mapping[str, Any] | None = None  # torch.optim state_dict of the inner AdamW
    residual: torch.Tensor | None = None  # error-feedback residual
    # free-form JSON-able notes kept in checkpoint sidecars (e.g. the run name)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def state_hash(self) -> str:
        return state_hash(self.round, self.params, self.momentum)

    @classmethod
    def of(
        cls,
        round_: int,
        layout: ParamLayout,
        params: torch.Tensor,
        momentum: torch.Tensor,
        *,
        local: tuple[InnerLoop, torch.Tensor] | None = None,
    ) -> MemberState:
        """A copy of a member's state: the shared part (θ_global by name, outer momentum) and,
        with `local` = (inner loop, error-feedback residual), the member's own part too."""
        named = {k: v.clone() for k, v in layout.named(params).items()}
        state = cls(round=round_, params=named, momentum=momentum.clone())
        if local is None:
            return state
        inner, residual = local
        return replace(
            state,
            inner_step=inner.step,
            inner_optimizer=copy.deepcopy(inner.optimizer.state_dict()),
            residual=residual.clone(),
        )

    def momentum_for(self, numel: int) -> torch.Tensor:
        """The outer momentum as fp32, checked to fit a model of `numel` parameters."""
        if self.momentum.shape != (numel,):
            raise DiLoCoError(
                f"momentum of shape {tuple(self.momentum.shape)} does not fit the model"
            )
        return self.momentum.detach().float()


class DiLoCoMember:
    def __init__(
        self,
        model: nn.Module,
        batches: Batches,
        *,
        inner: InnerConfig,
        outer: OuterConfig | None = None,
        codec: UpdateCodec | None = None,
        error_feedback: bool = True,
        aggregator: Aggregator | None = None,
        inner_loop: InnerLoop | None = None,
    ) -> None:
        """`inner_loop`: who takes the H inner steps (default: our AdamW on `batches`; a user's
        own loop is swarm/diloco/member/external.py's ExternalInnerLoop)."""
        self.model = model
        self.layout = ParamLayout(model)
        self.inner = inner_loop or InnerLoop(model, batches, inner)
        self.outer = NesterovOuterOptimizer(self.layout.numel, outer or OuterConfig())
        self.encoder = ErrorFeedbackEncoder(
            codec or ProtocolCodec("fp32"), self.layout.numel, enabled=error_feedback
        )
        self.aggregator = aggregator or build_aggregator("mean")
        # tiers of senders whose update norms set the norm bound, the first present decides (an
        # open run's anchors, then ourselves: a majority of scaled Sybil updates cannot move it);
        # empty: the median of all
        self.norm_reference: tuple[frozenset[str], ...] = ()
        self.global_params = self.layout.flatten()
        self.round = 0
        self._prepared: tuple[int, InnerReport, int] | None = None  # (round, report, payload bytes)
        self._update: torch.Tensor | None = None  # the aggregate's buffer
        self.admissions = Admissions()  # this round's payloads, checked as they arrived

    # -- one round ------------------------------------------------------------------------------

    def prepare_update(self, stop: Callable[[], bool] | None = None) -> bytes | None:
        """Run H inner steps and return this round's encoded pseudo-gradient; None when `stop()`
        ended the inner phase early (the round is abandoned: restore or rewind comes next)."""
        report = self.inner.run(self.inner.config.steps, stop)
        if report.steps < self.inner.config.steps:
            return None
        with torch.no_grad():
            delta = self.global_params - self.layout.flatten()
        payload = self.encoder.encode(delta)
        self._prepared = (self.round, report, len(payload))
        return payload

    def apply_update(self, contributions: Sequence[Contribution]) -> RoundReport:
        """Aggregate the decodable updates, take the outer step, reset the model to θ_global."""
        if self._update is None:  # reused every round: 4 bytes a parameter, faulted in once
            self._update = torch.empty(self.layout.numel)
        accepted, rejected, update_norm = apply_contributions(
            contributions,
            codec=self.encoder.codec,
            aggregator=self.aggregator,
            outer=self.outer,
            params=self.global_params,
            norm_reference=self.norm_reference,
            out=self._update,
            admitted=self.admissions.take(),
        )
        return self._finish_round(accepted, rejected, update_norm)

    def apply_aggregate(
        self,
        update: torch.Tensor,
        accepted: Sequence[str],
        rejected: Sequence[tuple[str, str]] = (),
    ) -> RoundReport:
        """The outer step with an aggregate the group computed together (the sharded exchange
        checks it there); the exchange already judged whose updates count (`rejected`: the
        rule's refusals, as `apply_update` reports them)."""
        self.admissions.take()  # nothing was admitted one by one: the owners checked the inputs
        norm = math.nan
        if accepted:
            norm = update.norm().item()
            self.outer.step(self.global_params, update)
        return self._finish_round(sorted(accepted), list(rejected), norm)

    def _finish_round(
        self, accepted: Sequence[str], rejected: Sequence[tuple[str, str]], update_norm: float
    ) -> RoundReport:
        self.layout.load(self.global_params)
        prepared, self._prepared = self._prepared, None
        inner, payload_bytes = (
            (prepared[1], prepared[2]) if prepared and prepared[0] == self.round else (None, 0)
        )
        self.round += 1
        return RoundReport(
            round=self.round - 1,
            inner=inner,
            accepted=tuple(accepted),
            rejected=tuple(rejected),
            payload_bytes=payload_bytes,
            update_norm=update_norm,
            state_hash=self.state_hash(),
        )

    def admit(self, sender: str, payload: Payload) -> None:
        """Check and measure one payload of the round as it arrives (torch thread), so that
        `apply_update` finds it ready; undecodable ones are left for it to refuse."""
        self.admissions.admit(self.encoder.codec, self.layout.numel, sender, payload)

    def run_round(self, exchange: UpdateExchange) -> RoundReport:
        return self.apply_update(exchange.exchange(self.round, self.prepare_update()))

    # -- state ----------------------------------------------------------------------------------

    @property
    def momentum_buffer(self) -> torch.Tensor:
        """The outer momentum (a Streaming member joins its fragments' into the same form)."""
        return self.outer.momentum_buffer

    def state_hash(self) -> str:
        return state_hash(
            self.round, self.layout.named(self.global_params), self.outer.momentum_buffer
        )

    def snapshot(self, *, include_local: bool = True) -> MemberState:
        """A copy of the state between rounds; `include_local=False` gives what a joiner needs."""
        if self._prepared is not None:
            raise DiLoCoError("snapshot taken between prepare_update and apply_update")
        local = (self.inner, self.encoder.residual) if include_local else None
        return MemberState.of(
            self.round, self.layout, self.global_params, self.outer.momentum_buffer, local=local
        )

    def rewind(self, round_: int, params: torch.Tensor, momentum: torch.Tensor) -> None:
        """Back to the shared state a round started from (to apply it again with another set
        of updates); the member's own inner optimizer and residual stay as they are."""
        self.global_params = params.detach().float().clone()
        self.outer.momentum_buffer = momentum.detach().float().clone()
        self.layout.load(self.global_params)
        self.round = round_
        self._prepared = None
        self.admissions.take()

    def restore(self, state: MemberState) -> None:
        """Adopt `state`; without inner optimizer state the inner AdamW starts fresh."""
        flat = self.layout.join(state.params)
        momentum = state.momentum_for(self.layout.numel)
        self.global_params = flat
        self.outer.momentum_buffer = momentum.clone()
        self.layout.load(flat)
        self.round = state.round
        self.admissions.take()
        self.inner.step = state.inner_step
        self.inner.reset_optimizer(state.inner_optimizer)
        residual = state.residual if state.residual is not None else torch.zeros(self.layout.numel)
        self.encoder.residual = residual.detach().float().clone()
        self._prepared = None

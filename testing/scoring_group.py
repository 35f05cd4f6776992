"""A DiLoCo group with free riders, scored round by round in one process (no transport).

Honest members train on their assigned shards and their updates are aggregated (the mean); the
first honest member is the scorer (an anchor). Free riders of each kind send what they send and
are rated beside the honest members, never counted, as on probation:

    zero        the zero update (no work at all)
    copy        another member's update of this round, re-encoded
    replay      its own update of the round before (work done once, sent again)
    noise       a random direction with an honest update's norm (cheap noise)
    other-shard honest work on a shard that is not its own (fits data it was not assigned)
    honest      an honest newcomer on probation (what every rider is measured against)

Used by tests/swarm/test_scoring.py and benchmarks/scoring.py; the ratings and the cost come from
the real scorer (swarm/scoring/scorer.py) on real inner steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from peertrain.crdt.scorecard import Rating
from peertrain.swarm.diloco.member.build import BuiltMember, build_member, probe_batches
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.exchange.interface import Contribution
from peertrain.swarm.scoring.probe import Probe
from peertrain.swarm.scoring.scorer import Scorer

KINDS = ("zero", "copy", "replay", "noise", "other-shard", "honest")


@dataclass(slots=True)
class ScoredRun:
    ratings: list[dict[str, float]] = field(default_factory=list)  # per round: peer → rating
    kinds: dict[str, str] = field(default_factory=dict)  # peer → honest-member / a rider kind
    scoring_seconds: float = 0.0
    training_seconds: float = 0.0  # one member's inner steps, all rounds
    evaluations: int = 0
    final_ratings: dict[str, Rating] = field(default_factory=dict)  # the scorer's, at the end

    def final(self, kind: str) -> list[float]:
        return [r for p, r in self.ratings[-1].items() if self.kinds[p] == kind]


def run_scored(spec: DiLoCoSpec, *, honest: int, riders: dict[str, int], rounds: int) -> ScoredRun:
    """`honest` counted members (the first scores) and `riders` of each kind, `rounds` rounds."""
    counted = [f"member-{i}" for i in range(honest)]
    kinds = {p: "member" for p in counted}
    for kind, n in riders.items():
        kinds |= {f"{kind}-{i}": kind for i in range(n)}
    built = {p: build_member(spec, p) for p in kinds}
    shards = {p: spec.shard_in(p, set(kinds)) for p in kinds}  # the counted and probation
    for i, (p, b) in enumerate(built.items()):
        # other-shard riders train on the first honest member's shard; joiners at other times
        # are at other inner steps (the batch of a step is the same on one shard)
        b.use_shard(shards[counted[0]] if kinds[p] == "other-shard" else shards[p])
        b.member.inner.step = 1000 * i
    scorer_built = built[counted[0]]
    scorer = scorer_for(spec, scorer_built)
    out = ScoredRun(kinds=kinds)
    last: dict[str, bytes] = {}
    for round_ in range(rounds):
        theta = scorer_built.member.global_params.clone()
        started = time.perf_counter()
        payloads = {p: built[p].member.prepare_update() for p in counted}
        out.training_seconds += time.perf_counter() - started
        payloads |= _riders(built, kinds, payloads, last, round_)
        last = payloads
        started = time.perf_counter()
        salt = scorer_built.member.state_hash().encode()
        scorer.score(round_, theta, payloads, shards, set(counted), salt)
        out.scoring_seconds += time.perf_counter() - started
        out.evaluations += len(payloads)
        contributions = [Contribution(sender=p, payload=payloads[p]) for p in counted]
        for b in built.values():
            b.member._prepared = None  # riders computed, but only the counted are aggregated
            b.member.apply_update(contributions)
        out.ratings.append({p: r.rating for p in kinds if (r := scorer.ratings.get(p))})
    out.final_ratings = {p: r for p in kinds if (r := scorer.ratings.get(p)) is not None}
    return out


def scorer_for(spec: DiLoCoSpec, built: BuiltMember) -> Scorer:
    """The real scorer an anchor of `spec` builds, on `built`'s model and data."""
    heldout, shard_batches = probe_batches(built, pool=32)
    probe = Probe(
        built.member.model, heldout=heldout, shard_batches=shard_batches, batches=spec.score_batches
    )
    return Scorer(probe, built.member.encoder.codec, built.member.layout.numel)


def _riders(built, kinds, honest_payloads, last, round_) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    honest = sorted(honest_payloads)
    for p, kind in sorted(kinds.items()):
        if kind == "member":
            continue
        member = built[p].member
        codec, numel = member.encoder.codec, member.layout.numel
        if kind in ("honest", "other-shard"):
            out[p] = member.prepare_update()
        elif kind == "zero":
            out[p] = codec.encode(torch.zeros(numel))
        elif kind == "copy":
            source = honest_payloads[honest[round_ % len(honest)]]
            out[p] = codec.encode(codec.decode(source, numel))
        elif kind == "replay":
            own = member.prepare_update() if round_ == 0 else last[p]
            out[p] = own
        elif kind == "noise":
            norm = codec.decode(honest_payloads[honest[0]], numel).norm()
            direction = torch.randn(numel, generator=torch.Generator().manual_seed(round_))
            out[p] = codec.encode(direction * (norm / direction.norm()))
    return out

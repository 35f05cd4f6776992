"""Contribution scores (issue 34): a place in an open run is earned by useful work on one's own
shard, judged on batches drawn after the round starts, not by holding a peer ID."""

from __future__ import annotations

import math

import pytest
import torch
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from peertrain.crdt.errors import ForbiddenWrite
from peertrain.crdt.hlc import Stamp
from peertrain.crdt.rundoc import RunDoc
from peertrain.crdt.scorecard import MAX_RATED, SCORE_CARD, Rating, ScoreCard
from peertrain.crdt.signed import MAX_DELTA_PAYLOAD
from peertrain.protocol.errors import DecodeError
from peertrain.protocol.packing import pack
from peertrain.swarm.diloco.group.roster import Roster
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.models.config import ConfigError
from peertrain.swarm.scoring.rating import COPY, HARMFUL, MIN_EVALUATIONS, ZERO, earned
from peertrain.testing.diloco_drivers import digits_spec, open_driver_group
from peertrain.testing.scoring_group import run_scored
from peertrain.testing.waiting import wait_until


def _rating(
    peer: str, rating: float, evaluations: int = MIN_EVALUATIONS, last: float = 1.0, flag: str = ""
):
    return Rating(peer=peer, rating=rating, evaluations=evaluations, last=last, fit=0.5, flag=flag)


def test_free_riders_copiers_and_noise_rate_below_every_honest_member():
    """Three honest members count; an honest newcomer and one free rider of each kind are on
    probation and rated by the first member, on real inner steps (digits MLP)."""
    spec = DiLoCoSpec(
        model="mlp",
        dataset="digits",
        inner_steps=20,
        batch_size=16,
        lr=1e-3,
        warmup_steps=5,
        num_shards=8,
    )
    riders = {k: 1 for k in ("zero", "copy", "replay", "noise", "other-shard", "honest")}
    run = run_scored(spec, honest=3, riders=riders, rounds=5)
    final = run.final_ratings
    honest = [r for p, r in final.items() if run.kinds[p] in ("member", "honest")]
    riders_rated = [r for p, r in final.items() if run.kinds[p] not in ("member", "honest")]
    assert all(earned(r) for r in honest), honest
    assert not any(earned(r) for r in riders_rated), riders_rated
    # free riders also rate below every honest member; work on another's shard is told by fit
    free = [r.rating for r in riders_rated if run.kinds[r.peer] != "other-shard"]
    assert max(free) < min(r.rating for r in honest)
    assert run.scoring_seconds < run.training_seconds  # scoring costs less than training


def test_credit_is_bounded_whatever_the_gain():
    """A scaled update raises the loss by ~10^300 on held-out data and less on its shard (an
    off-shard fit): its credit is −1, never a number a rating cannot hold (seen: the anchor's
    run failed on it, three times, and was quarantined)."""
    from peertrain.swarm.scoring.probe import Gain
    from peertrain.swarm.scoring.rating import credit

    for heldout, shard in ((-1e300, -1e301), (-1e300, 5.0), (math.inf, 1.0), (1e300, 1e300)):
        c = credit(Gain(heldout=heldout, shard=shard), 0.01)
        assert -1.0 <= c.value <= 2.0
        Rating(peer="p", rating=c.value, evaluations=1, last=c.value, fit=c.fit)


def test_an_honest_update_that_probes_see_raise_the_loss_costs_rating_not_the_place():
    """Near convergence each honest update overfits its shard and the probes see held-out gains
    around 0: one measured at −12x the round's reference gain, raising a held-out loss of 0.1
    by 0.12 (seen on digits, round 13 of 20: the member was dropped as harmful and the group
    trained on with three of four). A sign flip of an update scaled 10x (−1.4 to −70 there), or
    a scaled update that overflows, still ends its sender's place at once."""
    from peertrain.swarm.scoring.probe import Gain
    from peertrain.swarm.scoring.rating import Ratings, collapsed, credit

    reference, loss = 0.01, 0.1

    def record(last: Gain) -> Rating | None:
        ratings = Ratings()
        for round_ in range(4):  # an honest founder's record
            honest = Gain(heldout=0.01, shard=0.012, base=loss)
            ratings.update(round_, {"p": credit(honest, reference)})
        ratings.update(4, {"p": credit(last, reference)})
        return ratings.get("p")

    assert not collapsed(record(Gain(heldout=-0.12, shard=-0.1, base=loss)))
    for harm in (Gain(heldout=-1.4, shard=-1.4, base=loss), Gain(heldout=-1e300, shard=0, base=0)):
        assert collapsed(record(harm)) and not earned(record(harm)), record(harm)


def test_a_harmful_update_in_a_round_that_rates_nobody_still_ends_its_senders_place():
    """Honest-working Sybils that attacked together after round 10 of a converged digits run
    kept their places to the end: every round of their attack was one whose reference gain was
    noise, and such a round moved no rating. Harm is measured on the loss, not the reference:
    here the counted members' updates change nothing (no reference gain) and one scaled 1000x
    is judged all the same, on the real probe."""
    from peertrain.swarm.diloco.member.build import build_member
    from peertrain.swarm.scoring.rating import collapsed
    from peertrain.testing.scoring_group import scorer_for

    spec = DiLoCoSpec(model="mlp", dataset="digits", scoring="anchors", num_shards=4)
    built = build_member(spec, "anchor")
    scorer = scorer_for(spec, built)
    codec, theta = built.member.encoder.codec, built.member.global_params.clone()
    zero = codec.encode(torch.zeros_like(theta))
    attack = codec.encode(1000 * torch.randn_like(theta) * theta.abs().mean())
    payloads = {"a": zero, "b": zero, "sybil": attack}
    card = scorer.score(10, theta, payloads, dict.fromkeys(payloads, 0), {"a", "b"}, b"salt")
    assert card is not None and collapsed(card.get("sybil")), card
    assert card.get("a") is None  # nobody else's rating moved


def test_newcomers_count_once_rated_and_a_collapsed_member_stops_counting():
    ratings: dict[str, Rating] = {}
    roster = Roster(max_members=8, admit_per_round=2, protected={"anchor"}, rated=ratings.get)
    everyone = {"anchor", "a", "b", "c", "d"}
    roster.advance(0, {"anchor", "a"}, b"s")  # b, c and d arrive after round 0: newcomers
    roster.counted = frozenset({"anchor", "a"})
    assert roster.advance(1, everyone, b"s") == {"anchor", "a"}  # nobody else rated yet
    assert roster.probation == {"b", "c"} or len(roster.probation) == 2
    ratings["a"] = _rating("a", 0.1, evaluations=1)  # one weak round: not yet collapsed
    ratings["b"] = _rating("b", 0.9)
    ratings["c"] = _rating("c", 0.9, evaluations=1)  # part-way: not yet
    ratings["d"] = _rating("d", 0.05)  # rated and refused
    assert roster.advance(2, everyone, b"s") == {"anchor", "a", "b"}
    assert "c" in roster.probation  # part-way candidates keep their slot first
    ratings["a"] = _rating("a", 0.9, last=-1.0, flag=HARMFUL)  # one harmful update
    ratings["anchor"] = _rating("anchor", 0.0)  # anchors always count
    assert roster.advance(3, everyone, b"s") == {"anchor", "b"}


def test_founders_are_rated_in_round_0_and_count_from_round_1_on_one_good_rating():
    """Round 0 counts the anchor alone and puts every founder on probation; after it, a founder
    whose first update was honest work counts at once (not at the rate of one a round), and
    free riders do not count at all: never a round in which their updates reach an aggregate."""
    ratings: dict[str, Rating] = {}
    roster = Roster(max_members=8, admit_per_round=1, protected={"anchor"}, rated=ratings.get)
    honest = {"h1", "h2", "h3"}
    everyone = {"anchor", *honest, "zero", "copy", "noise"}
    assert roster.advance(0, everyone, b"s") == {"anchor"}
    assert roster.probation == everyone - {"anchor"}  # every founder's update is rated
    for peer in honest:
        ratings[peer] = _rating(peer, 0.35, evaluations=1, last=1.0)
    ratings["zero"] = _rating("zero", 0.0, evaluations=1, last=0.0, flag=ZERO)
    ratings["copy"] = _rating("copy", 0.0, evaluations=1, last=0.0, flag=COPY)
    ratings["noise"] = _rating("noise", -0.09, evaluations=1, last=-0.25)
    assert roster.advance(1, everyone, b"s") == {"anchor", *honest}
    # one good round later earns a free rider nothing: it is a newcomer from now on
    ratings["zero"] = _rating("zero", 0.35, evaluations=2, last=1.0)
    # nor does a first good rating earn a place for one that came after round 0
    ratings["late"] = _rating("late", 0.35, evaluations=1, last=1.0)
    assert roster.advance(2, everyone | {"late"}, b"s") == {"anchor", *honest}


def test_without_an_anchor_at_round_0_the_founders_count_unrated():
    roster = Roster(max_members=8, admit_per_round=1, protected={"anchor"}, rated=lambda p: None)
    assert roster.advance(0, {"a", "b", "c"}, b"s") == {"a", "b", "c"}


def test_a_rated_member_late_once_comes_back_without_earning_its_place_anew():
    ratings: dict[str, Rating] = {"a": _rating("a", 0.3, evaluations=1)}  # not yet admitted
    roster = Roster(max_members=8, admit_per_round=2, protected={"anchor"}, rated=ratings.get)
    everyone = {"anchor", "a", "z"}
    roster.advance(0, everyone, b"s")
    roster.counted = frozenset(everyone)  # both counted, then late in round 0
    ratings["z"] = _rating("z", 0.0, evaluations=2)  # one whose work earned nothing
    roster.contributed({"anchor"})
    assert roster.advance(1, everyone, b"s") == {"anchor", "a"}  # "a" returns, "z" does not
    assert roster.lapsed == {"z"}


def test_a_score_card_is_its_scorers_alone_bounded_and_finite():
    card = ScoreCard(round=3, ratings=(_rating("a", 0.5), _rating("b", -0.2)))
    assert SCORE_CARD.decode(SCORE_CARD.encode(card)) == card
    for bad in (
        [3, [["a", math.nan, 1, 0.0, 0.0, ""]]],
        [3, [["b", 1.0, 1, 0.0, 0.0, ""]] * 2],
        [3, []],
    ):
        if bad[1]:
            with pytest.raises(DecodeError):
                SCORE_CARD.decode(bad)
    with pytest.raises(DecodeError):
        SCORE_CARD.decode([1, [["p", 1.0, 1, 0.0, 0.0, ""]] * (MAX_RATED + 1)])
    # a full card of the longest peer IDs, flags and numbers fits one signed delta with room for
    # the rest of its owner's slot (member record, 32 checkpoint references, 16 ban votes)
    full = ScoreCard(
        round=2**40,
        ratings=tuple(
            Rating(
                peer=f"12D3KooW{i:044d}",
                rating=-0.123456789,
                evaluations=2**31,
                last=1.23456789,
                fit=-1.23456789,
                flag="x" * 16,
            )
            for i in range(MAX_RATED)
        ),
    )
    assert len(pack(SCORE_CARD.encode(full))) < MAX_DELTA_PAYLOAD - 12 * 1024
    doc = RunDoc()
    delta = RunDoc.of(scores=doc.scores.set("victim", card, Stamp(1, 0, "forger")))
    assert delta.writers() == {"victim", "forger"}  # signed by forger: ForbiddenWrite below
    from peertrain.crdt.runstate import RunState

    with pytest.raises(ForbiddenWrite):
        RunState("run").check_remote("forger", delta)
    # a document without cards keeps the four-field encoding (and its digests)
    assert len(RunDoc().to_wire()) == 4 and len(delta.to_wire()) == 5
    assert RunDoc.from_wire(delta.to_wire(), max_owners=2) == delta


def test_scoring_needs_the_gather_exchange_and_whole_rounds():
    with pytest.raises(ConfigError, match="scoring"):
        digits_spec(scoring="anchors", exchange="sharded", aggregator="mean")
    with pytest.raises(ConfigError, match="scoring must be one of"):
        digits_spec(scoring="everyone")
    assert digits_spec().to_bytes() == digits_spec(scoring="off").to_bytes()


async def test_in_a_scored_open_run_free_riders_never_count_and_rate_below_an_honest_joiner():
    """Real drivers, replicated run state and update gossip in one process: the anchor and one
    founding member, then an honest joiner and two zero-senders arrive after round 0. Whether
    the joiner is admitted within ten rounds depends on how fast it catches up and how noisy
    its first credits are (admission is the patient-Sybil e2e's to show); that the riders never
    count and rate below it does not."""
    spec = digits_spec(  # rounds of a second or more: a joiner catches up between them
        inner_steps=60,
        rounds=10,
        min_members=2,
        start_timeout=20,
        round_timeout=4,
        scoring="anchors",
        lr=1e-3,
    )
    async with open_driver_group(spec) as group:
        anchor = await group.member(group.creator)
        await group.member()
        with trio.fail_after(60):
            await wait_until(lambda: anchor.driver.progress.round >= 1, timeout=60)
        joiner = await group.member(create_new_key_pair())
        riders = [await group.member(attack="zero") for _ in range(2)]
        ever_counted: set[str] = set()

        async def watch():
            while True:
                ever_counted.update(anchor.driver.roster.counted)
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            with trio.fail_after(240):
                await group.finished()
            nursery.cancel_scope.cancel()
        card = anchor.driver.scoring.cards()[0]
        assert not ever_counted & {r.peer_id for r in riders}
        rated = {r.peer: r.rating for r in card.ratings}
        assert max(rated[r.peer_id] for r in riders) < rated[joiner.peer_id]
        scores = anchor.driver.progress_status()["scores"]
        assert set(scores["counted"]) >= {anchor.peer_id} and scores["evaluations"] > 0
        _exported_as_metrics(anchor.driver, scores)


def _exported_as_metrics(driver, scores) -> None:
    """/metrics carries each rating and the sizes of the counted and probation sets."""
    from peertrain.node.api.history import StatusHistory
    from peertrain.node.api.metrics import run_metrics

    run = {
        "name": "scored",
        "run_id": "r",
        "mode": "diloco",
        "round": driver.progress.round,
        "members": [],
        "loss": driver.progress.loss,
        "dropped": {},
        "rounds_completed": 7,
        "bytes_published": 0,
        "bytes_fetched": 0,
        "resyncs": 0,
        "rejected_by_reason": {},
        "finished": True,
        "progress": driver.progress_status(),
    }
    families = {f.name: f for f in run_metrics({"run": run}, StatusHistory())}
    ratings = {s.labels["peer"]: s.value for s in families["peertrain_run_member_rating"].samples}
    assert ratings == {p: r["rating"] for p, r in scores["ratings"].items()}
    sets = {s.labels["set"] for s in families["peertrain_run_counted_members"].samples}
    assert sets == {"counted", "probation"}


def test_only_the_runs_anchors_keep_score_cards_in_the_run_state():
    """A card is up to 16 KiB and read only from an anchor: any other member's would park memory
    in every replica (1024 owners: 16 MiB). Refused, blaming its signer; the anchor's is kept."""
    from libp2p.crypto.ed25519 import create_new_key_pair
    from peertrain.crdt.admission import Admission
    from peertrain.crdt.runstate import RunState
    from peertrain.crdt.writer import RunWriter
    from peertrain.testing.crdt_network import new_run

    creator = create_new_key_pair()
    run_id, manifest = new_run(creator)
    replica = RunState(run_id)
    replica.accept_manifest(manifest)
    anchor, member = replica.manifest.creator, "12D3KooWsomebodyelse"
    replica.install_admission(Admission(run_id=run_id, creator=anchor, mode="open"))
    card = ScoreCard(round=3, ratings=(_rating("a", 0.5),))
    for writer in (anchor, member):  # each writes its own card into a scratch replica
        scratch = RunState(run_id)
        scratch.accept_manifest(manifest)
        delta = RunWriter(scratch, writer).publish_scores(card)
        if writer == anchor:
            replica.apply_remote(writer, delta)
        else:
            with pytest.raises(ForbiddenWrite, match="only the run's anchors score"):
                replica.apply_remote(writer, delta)
    assert dict(replica.doc.scores.items()) == {anchor: card}


class _SlowCandidates:
    """Update gossip as a scorer sees it after a round closed: its updates came in over `spread`
    seconds, and each candidate's update can be fetched from `ready[peer]` (trio time) on."""

    def __init__(self, spread: float, ready: dict[str, float]) -> None:
        self._spread, self.ready = spread, ready

    def spread(self, round_: int) -> float:
        return self._spread

    async def fetch_update(self, round_: int, sender: str, holders) -> bytes:
        if trio.current_time() < self.ready[sender]:
            raise LookupError(f"no signed announcement of {sender} for round {round_}")
        await trio.sleep(1.0)  # a fetch on a loaded machine
        return sender.encode()


async def test_a_candidate_is_given_as_long_after_the_close_as_the_rounds_updates_took(
    autojump_clock,
):
    """Twelve daemons on two cores spread a round's updates over seconds; a fixed 2 s grace
    rated an honest candidate `missing` at each of its turns, and it never counted. It is given
    the round's spread (fetched side by side with the others); silence beyond it is missing."""
    from peertrain.swarm.diloco.group.scoring import GroupScoring

    scoring = object.__new__(GroupScoring)  # the grace alone: no scorer, no run state
    start = trio.current_time()
    scoring.me, scoring.spec = "anchor", digits_spec(round_timeout=30)
    scoring.gossip = _SlowCandidates(6.0, {"slow": start + 4.0, "also": start + 4.5, "gone": 1e9})
    pulled = await scoring._late_probationers(3, [], ["slow", "also", "gone", "anchor"])
    assert sorted(c.sender for c in pulled) == ["also", "slow"]
    assert scoring.missing == {"gone"}
    assert trio.current_time() - start == pytest.approx(6.0, abs=0.2)  # not 2 s, not 30 s

"""The DiLoCo loop of one member inside a node: rounds, whose updates count, the service.

    catch up ──► [ H inner steps (thread) ─► update gossip ─► aggregate + outer step (thread)
                   ─► publish state + round record ─► agree with the trusted state ] × rounds

Each round's phases run here, in order; what has a concept of its own lives beside it:
state_sync.py (serve our state, agree with the trusted one, replay or adopt, catch up),
trust.py (whom to believe), roster.py (whose updates count: last round's group plus a few
newcomers per round, so a wave of fresh IDs takes rounds to arrive and never exceeds the cap),
exchange/round_record.py (the signed statement of a round); `--attack` members plug in through
the `Adversary` seam (diloco/adversary/), never imported here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio
from peertrain.crdt.replicator import Replicator
from peertrain.swarm.diloco.errors import CheckpointError
from peertrain.swarm.diloco.group.adoption import StateDownloads, TensorTransport
from peertrain.swarm.diloco.group.adversary_seam import Adversary
from peertrain.swarm.diloco.group.alone import closed_without_us, count_alone
from peertrain.swarm.diloco.group.inner_phase import inner_phase
from peertrain.swarm.diloco.group.lease import ANONYMOUS, Introduction, MemberLease
from peertrain.swarm.diloco.group.progress import DriverProgress
from peertrain.swarm.diloco.group.replay import RoundReplay
from peertrain.swarm.diloco.group.roster import CountedGroup, roster_for
from peertrain.swarm.diloco.group.scoring import group_scoring, rating_reader
from peertrain.swarm.diloco.group.sharded_updates import sharded_round, sharded_updates
from peertrain.swarm.diloco.group.state_sync import StateSync
from peertrain.swarm.diloco.group.trust import TrustedStates, install_admission
from peertrain.swarm.diloco.member.build import BuiltMember
from peertrain.swarm.diloco.member.checkpoint import CheckpointStore
from peertrain.swarm.diloco.member.member import DiLoCoMember, RoundReport, rejection_kind
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.exchange.gossip import UpdateGossip
from peertrain.swarm.exchange.round_pace import straggler_allowance
from peertrain.swarm.exchange.sharded import ShardTransport
from peertrain.swarm.progress import Waiting, log_progress

log = logging.getLogger(__name__)

ROUND_CLOSED = "round_closed"  # a round's loss, updates and time split, in the log (its fields)
RETRY_PAUSE = 2.0  # seconds before a failed catch-up is tried again
AGREEMENT_WAIT = 3.0  # seconds a member waits for the trusted state of a round it applied
FINAL_CHECK_EVERY = 1.0  # seconds between a finished member's looks at the trusted final state


class DiLoCoDriver:
    def __init__(
        self,
        *,
        spec: DiLoCoSpec,
        peer_id: str,
        built: BuiltMember,
        replicator: Replicator,
        gossip: UpdateGossip,
        tensors: TensorTransport,
        addrs: Callable[[], list[str]],
        on_round: Callable[[RoundReport], None] | None = None,
        adversary: Callable[[DiLoCoDriver], Adversary] | None = None,
        checkpoints: CheckpointStore | None = None,
        on_penalty: Callable[[str, str], None] | None = None,
        certificate: bytes = b"",
        shard_transport: ShardTransport | None = None,
        introduction: Introduction = ANONYMOUS,
    ):
        self.spec, self.peer_id = spec, peer_id
        self.replicator = replicator
        self.state = replicator.state
        self.gossip, self.tensors, self.addrs = gossip, tensors, addrs
        self.on_round = on_round
        self.on_penalty = on_penalty  # (peer, reason): a provider or attester of a bad state
        self.certificate = certificate  # ours, in invite runs
        self.checkpoints = checkpoints
        self.progress = DriverProgress()
        self.built = built
        self._limiter = trio.CapacityLimiter(1)  # one torch job at a time per member
        self.replay = RoundReplay(gossip, self._thread)
        self.admission = install_admission(self.state, spec, peer_id, certificate)
        # an attested state failing for two round deadlines makes its signers unreliable
        patience = 2 * spec.round_timeout
        self.trust = TrustedStates(self.state, self.admission, peer_id, patience=patience)
        self.scoring = group_scoring(
            spec, self.admission, me=peer_id, replicator=replicator, built=built, gossip=gossip
        )
        self.roster = roster_for(spec, self.admission, rated=rating_reader(self.scoring))
        self.group = CountedGroup(self.state, self.admission, self.roster, peer_id)
        self.group.scores_probation = self.scoring is not None and self.scoring.scorer is not None
        self.downloads = StateDownloads(
            me=peer_id,
            state=self.state,
            tensors=tensors,
            trust=self.trust,
            thread=self._thread,
            on_penalty=on_penalty,
        )
        self.sync = self._state_sync()
        self.sharded = (
            sharded_updates(self, shard_transport) if spec.exchange == "sharded" else None
        )
        self._steer(gossip)
        if not self.admission.invite:  # the anchors' norms bound everyone's (validation.py),
            # else our own: scaled updates that were most of what arrived moved the median of
            # all (an honest member ended at loss 1.9e7). Anchored rounds stay deterministic.
            built.member.norm_reference = (self.admission.anchors, frozenset({peer_id}))
        self.adversary = adversary(self) if adversary is not None else None
        self.lease = MemberLease(self, introduction)  # our record, with where we stand

    def _steer(self, gossip: UpdateGossip) -> None:
        """The gossip waits for, and pulls from, the counted group only."""
        gossip.expected = self.group.expected
        gossip.trusted_round = self.trust.newest_round  # a group past us is not waited for
        gossip.is_member = self.group.may_send
        gossip.records.trusted = lambda peer: peer in self.trust.attesters()
        gossip.admits = self.admission.admits  # invite runs: non-members' traffic is dropped
        gossip.on_payload = self._admit  # each update checked as it arrives, the next in flight
        gossip.shard_inbox = self.sharded.receive if self.sharded is not None else None

    def _state_sync(self) -> StateSync:
        """Our state against the trusted one, repaired through our downloads and replays."""
        return StateSync(
            built=self.built,
            replicator=self.replicator,
            tensors=self.tensors,
            trust=self.trust,
            downloads=self.downloads,
            replay=self.replay,
            roster=self.roster,
            group=self.group,
            gossip=self.gossip,
            progress=self.progress,
            checkpoints=self.checkpoints,
            thread=self._thread,
        )

    # -- service --------------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[DiLoCoDriver] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.lease.run)
            nursery.start_soon(self.gossip.repeat_loop)  # gossip loses messages
            nursery.start_soon(log_progress, log, self.progress_status)
            if self.adversary is not None:
                nursery.start_soon(self.adversary.run)
            await self.sync.catch_up(initial=True)
            task_status.started(self)
            if self.member.round > 0 and self.spec.min_members > 1:
                await self._rejoin_group()
            await self._wait_for_quorum()
            while not self.finished:
                await self._one_round()
            # no next round repairs a divergence in the last one: wait longer for its
            # trusted state, and go on following it after (`_keep_the_final_state`)
            await self.sync.agree(wait=self.spec.round_timeout)
            self.progress.phase = "finished"
            log.info(
                "run finished after %d rounds, loss %.4f",
                self.progress.round,
                self.progress.loss or 0,
            )
            # the lease loop goes on: a finished member still serves the final state, and
            # a restarted or late member can only adopt states of live providers
            await self._keep_the_final_state()

    async def _keep_the_final_state(self) -> None:
        """A member that finished before the trusted state of the last round was attested (its
        anchors slower, or out of sight a while) kept its own model for good (seen: four honest
        members, four final checksums). A finished member goes on following that state."""
        while True:
            trusted = self.trust.verdict(self.member.round)
            if trusted is not None and trusted != self.sync.served:
                await self.sync.agree(wait=0)
                self.progress.loss = await self._thread(self.built.eval_loss)
                self.progress.phase = "finished"
            await trio.sleep(FINAL_CHECK_EVERY)

    @property
    def finished(self) -> bool:
        return bool(self.spec.rounds) and self.progress.round >= self.spec.rounds

    @property
    def member(self) -> DiLoCoMember:
        return self.built.member

    async def _wait_for_quorum(self) -> None:
        """A fresh run starts when `min_members` hold its initial state (or at `start_timeout`)."""
        if self.member.round > 0 or self.spec.min_members <= 1:
            return
        self.progress.phase = f"waiting for {self.spec.min_members} members"
        waiting = self.progress.waiting = Waiting("members", 1, self.spec.min_members)
        with trio.move_on_after(self.spec.start_timeout):
            while self.trust.newest_round() <= 0:
                waiting.have = len(self.group.candidates(0))
                if waiting.have >= self.spec.min_members:
                    break
                await trio.sleep(0.2)  # replicated state and lease expiry change with no event
        self.progress.waiting = None

    async def _rejoin_group(self) -> None:
        """A member restarted from its own checkpoint reads the group's registry before its next
        round. Its local view stops where it was killed; deciding on it, it would see no live
        peer, expect no update, and race through the remaining rounds alone in milliseconds."""
        self.progress.phase = "rejoining the group"
        self.progress.waiting = Waiting("peers of the run", 0, 1)
        with trio.move_on_after(self.spec.start_timeout):
            while not (self.replicator.exchange.peers() and await self.replicator.bootstrap()):  # noqa: ASYNC110 - replicated state and lease expiry change with no event to wait on
                await trio.sleep(0.2)
        self.progress.waiting = None
        await self.sync.catch_up()

    def progress_status(self) -> dict:
        """The run's `progress` in status (and in the progress log lines)."""
        waiting = self.progress.waiting
        if waiting is not None and waiting.what == "members' updates":
            waiting.have, waiting.need = self.gossip.received(self.member.round)
        status = self.progress.status(
            rounds=self.spec.rounds,
            inner_step=self.member.inner.step,
            inner_steps=self.spec.inner_steps,
            download=self.downloads.current,
        )
        if self.scoring is not None:
            status["scores"] = self.scoring.status(self.roster.counted, self.roster.probation)
        return status

    # -- who counts -----------------------------------------------------------------------------

    def expected_members(self, round_: int) -> set[str]:
        return self.group.expected(round_)

    # -- one round ------------------------------------------------------------------------------

    async def _one_round(self) -> None:
        round_ = self.member.round
        if self.trust.newest_round() > round_ and not await self.sync.catch_up():
            await trio.sleep(RETRY_PAUSE)  # the trusted state could not be had yet: again later
            return
        if self.finished:  # we caught up with the run's last state: no round is left
            return
        round_ = self.member.round
        group = self.group.of_round(round_, salt=self.sync.served or b"")
        dealt, salt = group | self.roster.probation, self.sync.served or b""
        self.built.use_shard(self.spec.shard_for(self.peer_id, set(dealt), salt))
        self.progress.inner_start, self.progress.phase = self.member.inner.step, "inner steps"
        started = time.perf_counter()
        payload = await inner_phase(
            self.member, self._thread, lambda: self.trust.newest_round() > round_
        )
        compute = time.perf_counter() - started
        if payload is None:  # the group closed the round while we computed (inner_phase.py)
            await self._overtaken(round_)
            return
        if (adversary := self.adversary) is not None:
            members = max(len(self.roster.counted), 2)
            payload = await self._thread(
                lambda: adversary.forge(self.member, payload, members=members)
            )
        if await self._overtaken(round_):
            return
        self.progress.phase = "waiting for the trusted state of this round"
        if not await self.sync.keep_with_the_signers(wait=self.spec.round_timeout):
            return  # our update was not computed from the run's state: the round starts again
        self.progress.phase = "exchanging"
        self.replay.begin(self.member, round_, self.sync.served or b"")
        allowance = self.gossip.pace.allowance = straggler_allowance(compute)
        if self.sharded is not None:
            report = await sharded_round(self, round_, payload, group, allowance)
        else:
            report = await self._gathered_round(round_, payload, group, allowance)
        if report is None:  # overtaken meanwhile: we adopted the group's state instead
            return
        compute += self.progress.outer_seconds
        self.progress.rejected_updates += len(report.rejected)
        self.progress.rejected_by_reason.update(rejection_kind(why) for _, why in report.rejected)
        if not self.admission.invite:
            for sender in report.accepted:
                self.state.vouch(sender)  # counted in a round: never evicted from RunState
        self.replicator.writer.add_progress(self.spec.inner_steps)
        await self.sync.publish()
        assert self.sync.served is not None
        await self.gossip.publish_record(round_, self.replay.record(report, self.sync.served))
        await self.sync.agree(wait=AGREEMENT_WAIT)
        wall = time.perf_counter() - started
        self.progress.timed(steps=self.spec.inner_steps, compute=compute, wall=wall)
        await self._record(report)
        await self._save_checkpoint()

    async def _gathered_round(
        self, round_: int, payload, group, allowance: float
    ) -> RoundReport | None:
        """The all-gather exchange: every member pulls every counted update and aggregates."""
        self.progress.waiting = Waiting("members' updates", *self.gossip.received(round_))
        deadline = trio.current_time() + self.spec.round_timeout + allowance
        try:
            contributions = await self.gossip.exchange(round_, payload, deadline=deadline)
        finally:
            self.progress.waiting = None
        # the anchors closing this very round meanwhile is the usual race: apply and agree
        if await self._overtaken(round_ + 1):
            return None
        pulled, contributions = contributions, [c for c in contributions if c.sender in group]
        self.replay.closed(contributions)
        if await self._closed_alone(round_, [c.sender for c in contributions]):
            return None
        self.progress.phase = "outer step"
        outer_started = time.perf_counter()
        if self.scoring is not None:  # before the step: θ_global is still the round's start
            probation, salt = self.roster.probation, self.sync.served or b""
            await self.scoring.rate(self._thread, round_, pulled, group, probation, salt)
        report = await self._thread(self.member.apply_update, contributions)
        self.progress.outer_seconds = time.perf_counter() - outer_started
        self.roster.contributed({c.sender for c in contributions})
        return report

    async def _overtaken(self, round_: int) -> bool:
        """The group finished round `round_` without us (too slow, restarted, partitioned): we
        adopt its state instead of computing a divergent one."""
        if self.trust.newest_round() <= round_:
            return False
        await self.sync.catch_up()
        return True

    async def _closed_alone(self, round_: int, senders: list[str]) -> bool:
        """True if the group closed the round without us (we adopted its); else counts a round
        closed alone while others are live (alone.py)."""
        if await closed_without_us(self, round_, senders):
            return True
        count_alone(self, round_, senders)
        return False

    async def _save_checkpoint(self) -> None:
        """Our own copy of the agreed state (atomic, content-addressed, last K kept)."""
        if self.checkpoints is not None:
            snapshot, started = self.member.snapshot(), time.perf_counter()
            try:
                info = await self._thread(
                    lambda: self.checkpoints.save(snapshot, manifest_hash=self.state.run_id)
                )
            except CheckpointError as exc:  # a full disk, the disk budget: train on, say so
                self.progress.checkpoint_failed(str(exc))
                log.warning(
                    "round %d: checkpoint not saved: %s",
                    self.member.round,
                    exc,
                    extra={"event": "checkpoint_failed"},
                )
            else:
                self.progress.checkpointed(time.perf_counter() - started, info.tensors_bytes)

    async def _record(
        self, report: RoundReport, *, loss: float | None = None, round_: int | None = None
    ) -> None:
        """Progress after a round: `loss` and `round_` (the member's round after it) are
        measured here unless given (a streaming member measures them at its round's end)."""
        if loss is None:
            loss = await self._thread(self.built.eval_loss)
        p = self.progress
        p.round = self.member.round if round_ is None else round_
        entry = p.closed(report.round, loss, len(report.accepted), len(report.rejected))
        log.info(
            "round %d: eval loss %.4f, %d updates (%d rejected)",
            report.round,
            loss,
            entry["accepted"],
            entry["rejected"],
            extra={"event": ROUND_CLOSED, "fields": entry},  # the local swarm reads them
        )
        if self.on_round is not None:
            self.on_round(report)

    async def sample(self, prompt: str, max_new_tokens: int) -> str:
        """Text from the member's model, on its torch thread (never beside a round's work)."""
        return await self._thread(self.built.sample, prompt, max_new_tokens)

    async def global_model(self):
        """(round, a copy of the model holding θ_global of that round), taken on the torch
        thread: never mid-round."""
        return await self._thread(lambda: (self.member.round, self.built.global_model()))

    async def _admit(self, sender: str, payload) -> None:
        await self._thread(self.member.admit, sender, payload)

    async def _thread(self, fn, *args):
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

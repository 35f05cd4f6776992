"""The DiLoCo loop of one member inside a node: rounds, consistency, joining, checkpoints.

    catch up ──► [ H inner steps (thread) ─► update gossip ─► aggregate + outer step (thread)
                   ─► publish state + round record ─► agree with the trusted state ] × rounds

State is content-addressed. After every outer step a member prepares its state (θ_global and
outer momentum, fp32) as one tensor, serves it, announces (round → checksum) in RunState's
checkpoint registry, and publishes a signed round record (start state, the updates it
aggregated, result: round_record.py). Nothing a stranger announces decides what a member does:
a state is adopted only when the run's trusted signers attest it (trust.py: the anchors of an
open run, a majority of certified members of an invite run), and is checked before use. A
member whose result differs from the trusted one but whose start state matches replays the
round from the trusted record's update set instead of downloading a state; a joiner (or a
restarted member) downloads the newest trusted state. A fetch that fails is logged, its
providers penalised if the state they served was bad, and tried again later: no peer can end
the driver. Whose updates count is the roster (roster.py): last round's group plus a few
newcomers per round, so a wave of fresh IDs takes rounds to arrive and never exceeds the cap.

Over 400 lines: this is where a round's phases, the roster and state agreement meet, in order.
What has a concept of its own lives beside it: trust.py (whom to believe), adoption.py
(download and check), replay.py (apply a round again), roster.py, round_record.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
import trio
from peertrain.crdt.admission import Admission
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState
from peertrain.protocol.tensors import prepare_tensor

from .adoption import StateDownloads, TensorTransport
from .build import BuiltMember
from .checkpoint import CheckpointStore
from .hostile_states import STATE_ATTACKS, HostileStates
from .member import MemberState, RoundReport, rejection_kind
from .progress import DriverProgress
from .replay import RoundReplay
from .roster import CountedGroup, Roster
from .run_spec import DiLoCoSpec
from .trust import TrustedStates
from .update_gossip import UpdateGossip

log = logging.getLogger(__name__)

STATE_NAME = "diloco/state"
LEASE_MS = 30_000
AGREEMENT_WAIT = 3.0
RETRY_PAUSE = 2.0  # seconds before a failed catch-up is tried again


def _build_attack(name: str | None):
    if not name or name in STATE_ATTACKS:
        return None
    from ..attacks import build_attack

    log.warning("this member is Byzantine: its updates go through the %r attack", name)
    return build_attack(name)


def expected_members(state: RunState, me: str, round_: int) -> set[str]:
    """Whose updates round `round_` waits for before a driver exists: the live members that hold
    state for it, and `me`. A driver replaces it on its gossip with its counted group (the
    roster: roster.py), which a wave of fresh IDs cannot flood."""
    live = {p for p in state.members() if state.is_live(p)} | {me}
    providers = set()
    for provs in state.checkpoints().get(round_, {}).values():
        providers |= set(provs)
    return (live & providers) | {me}


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
        attack: str | None = None,
        checkpoints: CheckpointStore | None = None,
        on_penalty: Callable[[str, str], None] | None = None,
        certificate: bytes = b"",
    ):
        self.spec = spec
        self.peer_id = peer_id
        self.replicator = replicator
        self.state = replicator.state
        self.gossip = gossip
        self.tensors = tensors
        self.addrs = addrs
        self.on_round = on_round
        self.on_penalty = on_penalty  # (peer, reason): a provider or attester of a bad state
        self.certificate = certificate  # ours, in invite runs
        self.attack = _build_attack(attack)
        self.checkpoints = checkpoints
        self.progress = DriverProgress()
        self.built = built
        self._served: bytes | None = None
        self._served_round = -1
        self._limiter = trio.CapacityLimiter(1)  # one torch job at a time per member
        self.replay = RoundReplay(gossip, self._thread)
        self.admission = self._install_admission()
        self.trust = TrustedStates(self.state, self.admission, peer_id)
        self.downloads = StateDownloads(
            me=peer_id,
            state=self.state,
            tensors=tensors,
            trust=self.trust,
            thread=self._thread,
            on_penalty=on_penalty,
        )
        if not self.admission.invite:  # the anchors' norms bound everyone's (validation.py)
            built.member.norm_reference = self.admission.anchors
        self.roster = self._roster()
        self.group = CountedGroup(self.state, self.admission, self.roster, peer_id)
        # the gossip waits for, and pulls from, the counted group only
        gossip.expected = self.group.expected
        gossip.is_member = self.group.may_send
        gossip.admits = self.admission.admits  # invite runs: non-members' traffic is dropped
        gossip.records.trusted = lambda peer: peer in self.trust.attesters()
        self.hostile = self._hostile_states(attack)

    def _hostile_states(self, attack: str | None) -> HostileStates | None:
        """A hostile member's state claims (hostile_states.py), beside its ordinary work."""
        if attack not in STATE_ATTACKS:
            return None
        return HostileStates(
            name=attack,
            writer=self.replicator.writer,
            gossip=self.gossip,
            tensors=self.tensors,
            state_numel=2 * self.member.layout.numel,
            state_name=STATE_NAME,
            current_round=lambda: self.member.round,
            current_checksum=lambda: self._served,
        )

    def _roster(self) -> Roster:
        """Open runs: a rate and a cap, anchors always in; invite runs: certified members only."""
        invite = self.admission.invite
        return Roster(
            max_members=self.spec.max_members,
            admit_per_round=None if invite else self.spec.admit_per_round,
            protected=() if invite else self.admission.anchors,
            first_round=self.spec.min_members,
        )

    def _install_admission(self) -> Admission:
        """The run's admission policy, from the signed spec, on the replica it guards."""
        if self.state.admission is not None:
            return self.state.admission
        manifest = self.state.manifest
        creator = manifest.creator if manifest is not None else self.peer_id
        admission = Admission(
            run_id=self.state.run_id,
            creator=creator,
            mode=self.spec.admission,
            anchors=frozenset(self.spec.anchors),
            wall_ms=self.state.wall_ms,
        )
        if self.certificate:
            admission.add_certificate(self.certificate)
        dropped = self.state.install_admission(admission)
        if dropped:
            log.info("forgot %d non-member(s) of this invite run", len(dropped))
        return admission

    # -- service --------------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[DiLoCoDriver] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._lease_loop)
            if self.hostile is not None:
                nursery.start_soon(self.hostile.run)
            await self._catch_up(initial=True)
            task_status.started(self)
            if self.member.round > 0 and self.spec.min_members > 1:
                await self._rejoin_group()
            await self._wait_for_quorum()
            while not self.finished:
                await self._one_round()
            # No next round will repair a divergence in the last one: wait longer for the
            # trusted checksum of it and replay or adopt if ours differs.
            await self._agree(wait=self.spec.round_timeout)
            self.progress.phase = "finished"
            log.info(
                "run finished after %d rounds, loss %.4f",
                self.progress.round,
                self.progress.loss or 0,
            )
            # the lease loop goes on: a finished member still serves the final state, and
            # a restarted or late member can only adopt states of live providers

    @property
    def finished(self) -> bool:
        return bool(self.spec.rounds) and self.progress.round >= self.spec.rounds

    @property
    def member(self):
        return self.built.member

    async def _wait_for_quorum(self) -> None:
        """A fresh run starts when `min_members` hold its initial state (or at `start_timeout`)."""
        if self.member.round > 0 or self.spec.min_members <= 1:
            return
        self.progress.phase = f"waiting for {self.spec.min_members} members"
        with trio.move_on_after(self.spec.start_timeout):
            while (  # noqa: ASYNC110 - replicated state and lease expiry change with no event to wait on
                len(self.group.candidates(0)) < self.spec.min_members
                and self.trust.newest_round() <= 0
            ):
                await trio.sleep(0.2)

    async def _rejoin_group(self) -> None:
        """A member restarted from its own checkpoint reads the group's registry before its next
        round. Its local view stops where it was killed; deciding on it, it would see no live
        peer, expect no update, and race through the remaining rounds alone in milliseconds."""
        self.progress.phase = "rejoining the group"
        with trio.move_on_after(self.spec.start_timeout):
            while not (self.replicator.exchange.peers() and await self.replicator.bootstrap()):  # noqa: ASYNC110 - replicated state and lease expiry change with no event to wait on
                await trio.sleep(0.2)
        await self._catch_up()

    async def _lease_loop(self) -> None:
        while True:
            self.replicator.writer.announce(
                role="diloco",
                addrs=self.addrs()[:8],
                lease_ms=LEASE_MS,
                certificate=self.certificate,
            )
            await trio.sleep(LEASE_MS / 3000)

    # -- who counts -----------------------------------------------------------------------------

    def expected_members(self, round_: int) -> set[str]:
        return self.group.expected(round_)

    # -- one round ------------------------------------------------------------------------------

    async def _one_round(self) -> None:
        round_ = self.member.round
        if self.trust.newest_round() > round_ and not await self._catch_up():
            await trio.sleep(RETRY_PAUSE)  # the trusted state could not be had yet: again later
            return
        if self.finished:  # we caught up with the run's last state: no round is left
            return
        round_ = self.member.round
        group = self.group.of_round(round_, salt=self._served or b"")
        self.built.use_shard(self.spec.shard_in(self.peer_id, set(group)))
        self.progress.phase = "inner steps"
        payload = await self._thread(self.member.prepare_update)
        if self.attack is not None:
            payload = await self._thread(self._forge, payload)
        if self.trust.newest_round() > round_:
            # the group finished round r without us (we were too slow or partitioned): our
            # update is late; adopt the group's state instead of computing a divergent one
            await self._catch_up()
            return
        self.progress.phase = "exchanging"
        self.replay.begin(self.member, round_, self._served or b"")
        contributions = await self.gossip.exchange(
            round_, payload, deadline=trio.current_time() + self.spec.round_timeout
        )
        contributions = [c for c in contributions if c.sender in group]
        self.replay.closed(contributions)
        self.progress.phase = "outer step"
        report = await self._thread(self.member.apply_update, contributions)
        self.roster.contributed({c.sender for c in contributions})
        self.progress.rejected_updates += len(report.rejected)
        self.progress.rejected_by_reason.update(rejection_kind(why) for _, why in report.rejected)
        if not self.admission.invite:
            for sender in report.accepted:
                self.state.vouch(sender)  # counted in a round: never evicted from RunState
        self.replicator.writer.add_progress(self.spec.inner_steps)
        await self._publish_state()
        assert self._served is not None
        await self.gossip.publish_record(round_, self.replay.record(report, self._served))
        await self._agree()
        await self._record(report)
        await self._save_checkpoint()

    async def _save_checkpoint(self) -> None:
        """Our own copy of the agreed state (atomic, content-addressed, last K kept)."""
        if self.checkpoints is not None:
            snapshot = self.member.snapshot()
            await self._thread(
                lambda: self.checkpoints.save(snapshot, manifest_hash=self.state.run_id)
            )

    async def _record(self, report: RoundReport) -> None:
        loss = await self._thread(self.built.eval_loss)
        p = self.progress
        p.round, p.loss, p.rounds_completed = self.member.round, loss, p.rounds_completed + 1
        p.history.append(
            {
                "round": report.round,
                "loss": loss,
                "accepted": len(report.accepted),
                "rejected": len(report.rejected),
                "time": time.time(),
            }
        )
        del p.history[:-64]
        log.info(
            "round %d: eval loss %.4f, %d updates (%d rejected)",
            report.round,
            loss,
            len(report.accepted),
            len(report.rejected),
        )
        if self.on_round is not None:
            self.on_round(report)

    # -- state: publish, agree, replay, catch up ------------------------------------------------

    def _state_tensor(self) -> torch.Tensor:
        return torch.cat([self.member.global_params, self.member.outer.momentum_buffer]).float()

    async def _publish_state(self) -> None:
        prepared = await self._thread(lambda: prepare_tensor(STATE_NAME, self._state_tensor()))
        checksum = prepared.header.checksum
        self.tensors.put(prepared, pin=True)
        if self._served is not None and self._served != checksum:
            self.tensors.unpin(self._served)
            if self._served_round == self.member.round:  # we adopted another state of this round
                self.replicator.writer.withdraw_checkpoint(self._served_round, self._served)
        self._served, self._served_round = checksum, self.member.round
        self.replicator.writer.provide_checkpoint(self.member.round, checksum)
        self.progress.state_checksum = checksum.hex()[:16]

    async def _agree(self, *, wait: float = AGREEMENT_WAIT) -> None:
        """Wait (up to `wait`) for the trusted state of our round; replay or adopt it if ours
        differs. No trusted attestation: keep ours (anchors may be away; nobody else decides)."""
        round_ = self.member.round
        with trio.move_on_after(wait):
            while not self._settled(round_):  # noqa: ASYNC110 - replicated state and lease expiry change with no event to wait on
                await trio.sleep(0.1)
        trusted = self.trust.verdict(round_)
        if trusted is None or trusted == self._served:
            return
        log.warning("state of round %d differs from the trusted one: repairing", round_)
        if not await self._replay(round_ - 1, trusted):
            await self._adopt(round_, trusted)

    def _settled(self, round_: int) -> bool:
        """Every live member of the last group announced its state of `round_` (so the next
        roster holds them all), and a trusted state of `round_` is known, or no trusted signer
        is live to attest one (then nobody decides and we keep ours)."""
        waiting = self.group.live_counted() - self.group.candidates(round_)
        if waiting:
            return False
        return self.trust.verdict(round_) is not None or not self.trust.any_attester_live()

    async def _replay(self, round_: int, trusted: bytes) -> bool:
        """Repair by applying `round_` again (replay.py); True if we now hold `trusted`."""
        record = await self.replay.replay(self.member, round_, trusted)
        if record is None:
            return False
        await self._publish_state()
        if self._served != trusted:
            log.warning("round %d applied again does not give the trusted state", round_)
            return False
        self.roster.seed({u.sender for u in record.updates})  # count as the trusted signer did
        self.progress.replays += 1
        self.progress.resyncs += 1
        return True

    async def _catch_up(self, *, initial: bool = False) -> bool:
        """Adopt the newest trusted state when it differs from ours; then announce ours.
        False if a trusted state was there and could not be adopted (try again later)."""
        if initial:  # give anti-entropy a moment to bring a joiner the registry
            with trio.move_on_after(5.0):
                while self.trust.newest_round() < 0 and self.replicator.exchange.peers():  # noqa: ASYNC110 - replicated state and lease expiry change with no event to wait on
                    await trio.sleep(0.1)
            await self._resume_local()
        newest = self.trust.newest_round()
        trusted = self.trust.verdict(newest) if newest >= self.member.round else None
        if trusted is not None:
            if newest > self.member.round or trusted != await self._own_checksum():
                if await self._adopt(newest, trusted):
                    if not self.roster.counted:  # a joiner: the group is whoever holds it
                        self.roster.seed(self.group.candidates(newest))
                    return True
                if self.member.round < newest:
                    return False
        await self._publish_state()
        self.progress.round = self.member.round
        if self.progress.initial_loss is None:
            self.progress.loss = self.progress.initial_loss = await self._thread(
                self.built.eval_loss
            )
        return True

    async def _resume_local(self) -> None:
        """A restarted member starts from its own newest checkpoint; peers ahead of it win after."""
        if self.checkpoints is None:
            return
        try:
            found = await self._thread(self.checkpoints.latest)
        except Exception as exc:  # a corrupt store must not stop the node: peers have the state
            log.warning(
                "local checkpoints unusable (%s); catching up from peers", exc, exc_info=True
            )
            return
        if found is not None and found[1].round > self.member.round:
            await self._thread(self.member.restore, found[1])
            log.info("resumed from our own checkpoint of round %d", found[1].round)

    async def _own_checksum(self) -> bytes:
        prepared = await self._thread(lambda: prepare_tensor(STATE_NAME, self._state_tensor()))
        return prepared.header.checksum

    async def _adopt(self, round_: int, checksum: bytes) -> bool:
        """Download the trusted state `checksum` of `round_`, checked (adoption.py), and use it;
        False if it could not be had or was refused (we try again later)."""
        self.progress.phase = f"downloading state of round {round_}"
        running = self.member.round > 0 or self.progress.rounds_completed > 0
        flat = await self.downloads.fetch_checked(self.member, round_, checksum, running=running)
        self.progress.refused_states = self.downloads.refused
        if flat is None:
            return False
        await self._use_state(round_, flat)
        log.info("adopted the trusted state of round %d", round_)
        return True

    async def _use_state(self, round_: int, flat: torch.Tensor) -> None:
        numel = self.member.layout.numel
        params, momentum = flat[:numel].clone(), flat[numel:].clone()
        state = MemberState(
            round=round_, params=self.member.layout.named(params), momentum=momentum
        )
        await self._thread(self.member.restore, state)
        self.progress.resyncs += 1
        self.progress.state_downloads += 1
        self.gossip.current_round = round_
        await self._publish_state()
        self.progress.round = round_
        if self.progress.initial_loss is None:
            self.progress.loss = self.progress.initial_loss = await self._thread(
                self.built.eval_loss
            )

    def _forge(self, payload: bytes) -> bytes:
        """A Byzantine member: an ordinary member whose outgoing update goes through an attack."""
        from ..attacks import AttackContext

        codec, numel = self.member.encoder.codec, self.member.layout.numel
        honest = codec.decode(payload, numel)
        members = max(len(self.roster.counted), 2)
        forged = self.attack(honest, AttackContext(num_workers=members, num_byzantine=1))
        if not torch.isfinite(forged).all():
            return bytes([0xFF]) * len(
                payload
            )  # what a NaN sender puts on the wire: receivers must refuse it
        return codec.encode(forged)

    async def sample(self, prompt: str, max_new_tokens: int) -> str:
        """Text from the member's model, on its torch thread (never beside a round's work)."""
        return await self._thread(self.built.sample, prompt, max_new_tokens)

    async def global_model(self):
        """(round, a copy of the model holding θ_global of that round), taken on the torch
        thread: never mid-round."""
        return await self._thread(lambda: (self.member.round, self.built.global_model()))

    async def _thread(self, fn, *args):
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

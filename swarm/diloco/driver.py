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
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
import trio
from peertrain.crdt.admission import Admission
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState
from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.tensors import PreparedTensor, TensorDownload, prepare_tensor

from .build import BuiltMember
from .checkpoint import CheckpointStore
from .exchange import Contribution
from .member import MemberState, RoundReport, rejection_kind
from .roster import Roster
from .round_record import RecordedUpdate, RoundRecord
from .run_spec import DiLoCoSpec
from .trust import StateCheck, TrustedStates
from .update_gossip import UpdateGossip

log = logging.getLogger(__name__)

STATE_NAME = "diloco/state"
LEASE_MS = 30_000
AGREEMENT_WAIT = 3.0
RETRY_PAUSE = 2.0  # seconds before a failed catch-up is tried again


def _build_attack(name: str | None):
    if not name:
        return None
    from ..attacks import build_attack

    log.warning("this member is Byzantine: its updates go through the %r attack", name)
    return build_attack(name)


def expected_members(state: RunState, me: str, round_: int) -> set[str]:
    """Whose updates round `round_` waits for: the live members that hold state for it (they
    will contribute), and `me`. A function of RunState alone, so the update gossip can ask it
    before the driver exists."""
    live = {p for p in state.members() if state.is_live(p)} | {me}
    providers = set()
    for provs in state.checkpoints().get(round_, {}).values():
        providers |= set(provs)
    return (live & providers) | {me}


class TensorTransport(Protocol):
    """Content-addressed tensors, as the node serves and fetches them."""

    def put(self, prepared: PreparedTensor, *, pin: bool) -> None: ...

    def unpin(self, checksum: bytes) -> None: ...

    async def fetch(
        self, holders: list[str], checksum: bytes, max_nbytes: int
    ) -> TensorDownload: ...


@dataclass
class DriverProgress:
    """What `status` shows and the local swarm reports."""

    round: int = 0
    loss: float | None = None
    initial_loss: float | None = None
    state_checksum: str = ""
    rounds_completed: int = 0
    resyncs: int = 0  # rounds repaired to the trusted state (by replay or by download)
    rejected_updates: int = 0
    rejected_by_reason: Counter[str] = field(default_factory=Counter)  # rejection_kind → count
    replays: int = 0  # rounds applied again from a trusted record instead of a download
    state_downloads: int = 0  # states adopted by download
    refused_states: int = 0  # downloads that failed or did not pass the checks
    phase: str = "starting"
    history: list[dict] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _RoundStart:
    """What a round started from and what it aggregated: enough to apply it again."""

    round: int
    checksum: bytes
    params: torch.Tensor
    momentum: torch.Tensor
    contributions: tuple[Contribution, ...]


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
        self._last: _RoundStart | None = None
        self._limiter = trio.CapacityLimiter(1)  # one torch job at a time per member
        self.admission = self._install_admission()
        self.trust = TrustedStates(self.state, self.admission, peer_id)
        invite = self.admission.invite
        self.roster = Roster(
            max_members=spec.max_members,
            admit_per_round=None if invite else spec.admit_per_round,
            protected=() if invite else self.admission.anchors,
        )
        # the gossip waits for, and pulls from, the counted group only
        gossip.expected = self.expected_members
        gossip.is_member = self._may_send
        gossip.records.trusted = lambda peer: peer in self.trust.attesters()

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
        self.state.admission = admission
        return admission

    # -- service --------------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[DiLoCoDriver] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._lease_loop)
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
                len(self._candidates(0)) < self.spec.min_members and self.trust.newest_round() <= 0
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

    def _candidates(self, round_: int) -> set[str]:
        """Live members (admitted ones, in invite runs) that hold a state of `round_`, and us."""
        providers = set()
        for provs in self.state.checkpoints().get(round_, {}).values():
            providers |= set(provs)
        admitted = {p for p in providers if self.state.is_live(p) and self.admission.admits(p)}
        return admitted | {self.peer_id}

    def _group(self, round_: int) -> frozenset[str]:
        """The counted group of `round_` (the roster decides once per round)."""
        salt = self._served or b""
        return self.roster.advance(round_, self._candidates(round_), salt) | {self.peer_id}

    def expected_members(self, round_: int) -> set[str]:
        """Whose updates round `round_` waits for: the counted group's live members."""
        if round_ != self.roster.round:
            return self._candidates(round_) & (set(self.roster.counted) | {self.peer_id})
        return {p for p in self.roster.counted if self.state.is_live(p)} | {self.peer_id}

    def _may_send(self, peer: str) -> bool:
        """Whose updates the gossip pulls (and whom it asks for copies): the counted group."""
        return peer == self.peer_id or (peer in self.roster.counted and self.state.is_live(peer))

    # -- one round ------------------------------------------------------------------------------

    async def _one_round(self) -> None:
        round_ = self.member.round
        if self.trust.newest_round() > round_ and not await self._catch_up():
            await trio.sleep(RETRY_PAUSE)  # the trusted state could not be had yet: again later
            return
        round_ = self.member.round
        group = self._group(round_)
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
        start = self._round_start(round_)
        contributions = await self.gossip.exchange(
            round_, payload, deadline=trio.current_time() + self.spec.round_timeout
        )
        contributions = [c for c in contributions if c.sender in group]
        self._last = _RoundStart(*start, tuple(contributions))
        self.progress.phase = "outer step"
        report = await self._thread(self.member.apply_update, contributions)
        self.progress.rejected_updates += len(report.rejected)
        self.progress.rejected_by_reason.update(rejection_kind(why) for _, why in report.rejected)
        if not self.admission.invite:
            for sender in report.accepted:
                self.state.vouch(sender)  # counted in a round: never evicted from RunState
        self.replicator.writer.add_progress(self.spec.inner_steps)
        await self._publish_state()
        await self._publish_record(round_, contributions, report)
        await self._agree()
        await self._record(report)
        await self._save_checkpoint()

    def _round_start(self, round_: int) -> tuple[int, bytes, torch.Tensor, torch.Tensor]:
        member = self.member
        return (
            round_,
            self._served or b"",
            member.global_params.clone(),
            member.outer.momentum_buffer.clone(),
        )

    async def _publish_record(
        self, round_: int, contributions: list[Contribution], report: RoundReport
    ) -> None:
        accepted = set(report.accepted) | {s for s, _ in report.rejected}
        updates = tuple(
            RecordedUpdate(sender=c.sender, checksum=c.checksum)
            for c in contributions
            if c.sender in accepted and c.checksum
        )
        assert self._last is not None and self._served is not None
        record = RoundRecord(start=self._last.checksum, updates=updates, result=self._served)
        await self.gossip.publish_record(round_, record)

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
        roster holds them all), and a trusted state of `round_` is known."""
        holders = self._candidates(round_)
        waiting = {p for p in self.roster.counted if self.state.is_live(p)} - holders
        return not waiting and self.trust.verdict(round_) is not None

    async def _replay(self, round_: int, trusted: bytes) -> bool:
        """Apply round `round_` again with the update set of a trusted record that started
        where we did and ended in `trusted`; True if we now hold `trusted`."""
        last = self._last
        if last is None or last.round != round_:
            return False
        record = self.gossip.records.matching(round_, start=last.checksum, result=trusted)
        if record is None:
            return False
        contributions = await self._gather(round_, record, last)
        if contributions is None:
            return False
        await self._thread(self.member.rewind, round_, last.params, last.momentum)
        await self._thread(self.member.apply_update, contributions)
        await self._publish_state()
        if self._served != trusted:
            log.warning("round %d replayed from its record does not give the trusted state", round_)
            return False
        self.progress.replays += 1
        self.progress.resyncs += 1
        log.info("round %d replayed with %d updates: repaired", round_, len(contributions))
        return True

    async def _gather(
        self, round_: int, record: RoundRecord, last: _RoundStart
    ) -> list[Contribution] | None:
        """The record's updates: ours where the checksums match, the rest fetched by the
        checksum their senders signed. None if one cannot be had (or was never signed so)."""
        have = {c.sender: c for c in last.contributions}
        out = []
        for update in record.updates:
            known = have.get(update.sender)
            if known is not None and known.checksum == update.checksum:
                out.append(known)
                continue
            if self.gossip.signed_checksum(round_, update.sender) != update.checksum:
                log.info("round %d: no signed announcement of %s's update", round_, update.sender)
                return None
            try:
                payload = await self.gossip.fetch_update(round_, update.sender, holders=[])
            except Exception as exc:  # noqa: BLE001 - any transfer error: download the state instead
                log.info(
                    "round %d: update of %s not fetched for a replay: %r",
                    round_,
                    update.sender,
                    exc,
                )
                return None
            out.append(
                Contribution(sender=update.sender, payload=payload, checksum=update.checksum)
            )
        return sorted(out, key=lambda c: c.sender)

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
                        self.roster.seed(self._candidates(newest))
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
        """Download the trusted state `checksum` of `round_`, check it, and use it; False (and
        logged, and the liars penalised) if it could not be had or did not pass the checks."""
        self.progress.phase = f"downloading state of round {round_}"
        providers = sorted(
            p
            for p in self.state.checkpoints().get(round_, {}).get(checksum, ())
            if p != self.peer_id
        )
        numel = self.member.layout.numel
        try:
            download = await self.tensors.fetch(
                providers, checksum, max_nbytes=2 * numel * 4 + 1024
            )
        except Exception as exc:  # noqa: BLE001 - TransferFailed or any transfer error: a peer's doing, never the end of the driver
            self.progress.refused_states += 1
            log.warning(
                "state of round %d not fetched from %d provider(s): %r", round_, len(providers), exc
            )
            return False
        check = StateCheck(
            numel=self.member.layout.numel, newest_trusted_round=self.trust.newest_round()
        )
        problem = await self._thread(self._check_download, download, round_, check)
        if isinstance(problem, str):
            self.progress.refused_states += 1
            log.warning("refused the state of round %d: %s", round_, problem)
            attesters = self.trust.attested(round_).get(checksum, frozenset())
            for peer in sorted(set(providers) | attesters):
                self._penalise(peer, f"attested or served a bad state: {problem}")
            return False
        flat = problem
        await self._use_state(round_, flat)
        log.info(
            "adopted the trusted state of round %d from %d provider(s)", round_, len(providers)
        )
        return True

    def _check_download(
        self, download: TensorDownload, round_: int, check: StateCheck
    ) -> torch.Tensor | str:
        """The downloaded state, or why it must not be used (thread side)."""
        try:
            flat = download.finish()
        except ProtocolError as exc:  # bytes that match the checksum but decode to no state
            return str(exc)
        running = self.member.round > 0 or self.progress.rounds_completed > 0
        own = self.member.global_params if running else None
        problem = check.problem(flat, round_, own, self.member.round)
        return flat if problem is None else problem

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

    def _penalise(self, peer: str, reason: str) -> None:
        if peer != self.peer_id and self.on_penalty is not None:
            self.on_penalty(peer, reason)

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

    async def _thread(self, fn, *args):
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

"""A member's state against the group's trusted one: serve ours, agree, replay or adopt, catch up.

State is content-addressed. After every outer step a member prepares its state (θ_global and
outer momentum, fp32) as one tensor, serves it and announces (round → checksum) in RunState's
checkpoint registry. Nothing a stranger announces decides what a member does: a state is adopted
only when the run's trusted signers attest it (trust.py), and is checked before use
(adoption.py). A member whose result differs from the trusted one but whose start state matches
replays the round from the trusted record's update set (replay.py) instead of downloading a
state; a joiner (or a restarted member) downloads the newest trusted state. A fetch that fails
is tried again later: no peer can end the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import torch
import trio
from peertrain.crdt.replicator import Replicator
from peertrain.protocol.tensors import prepare_tensor
from peertrain.swarm.diloco.group.adoption import StateDownloads, TensorTransport
from peertrain.swarm.diloco.group.progress import DriverProgress
from peertrain.swarm.diloco.group.replay import RoundReplay
from peertrain.swarm.diloco.group.roster import CountedGroup, Roster
from peertrain.swarm.diloco.group.trust import TrustedStates
from peertrain.swarm.diloco.member.build import BuiltMember
from peertrain.swarm.diloco.member.checkpoint import CheckpointStore
from peertrain.swarm.diloco.member.member import DiLoCoMember, MemberState
from peertrain.swarm.exchange.gossip import UpdateGossip

log = logging.getLogger(__name__)

STATE_NAME = "diloco/state"
# states we served before the current one, still served (a joiner may be fetching the one the
# trusted signers attested while ours moved on); older ones are dropped at once: left to the
# store's age bound, a small model's fast rounds kept 10 minutes of them (2 MB a round, 1 GB)
KEEP_SUPERSEDED = 2


class StateSync:
    """The state one member serves, kept equal to the state its run's trusted signers attest."""

    def __init__(
        self,
        *,
        built: BuiltMember,
        replicator: Replicator,
        tensors: TensorTransport,
        trust: TrustedStates,
        downloads: StateDownloads,
        replay: RoundReplay,
        roster: Roster,
        group: CountedGroup,
        gossip: UpdateGossip,
        progress: DriverProgress,
        checkpoints: CheckpointStore | None,
        thread: Callable[..., Awaitable],
    ) -> None:
        self.built, self.replicator, self.tensors = built, replicator, tensors
        self.trust, self.downloads, self.replay = trust, downloads, replay
        self.roster, self.group, self.gossip = roster, group, gossip
        self.progress, self.checkpoints = progress, checkpoints
        self.thread = thread  # the driver's torch thread (one torch job at a time)
        self.served: bytes | None = None  # the checksum of the state we serve
        self._superseded: list[bytes] = []  # states served before it, oldest first
        # the gossip round of a round's first exchange (Streaming DiLoCo: its first slot)
        self.first_exchange: Callable[[int], int] = lambda round_: round_
        self._served_round = -1

    @property
    def member(self) -> DiLoCoMember:
        return self.built.member

    # -- serve ours -----------------------------------------------------------------------------

    def _state_tensor(self) -> torch.Tensor:
        return torch.cat([self.member.global_params, self.member.momentum_buffer]).float()

    async def publish(self, state: tuple[int, torch.Tensor] | None = None) -> None:
        """Serve our state and announce it for our round (withdrawing one we replaced).
        `state` (round, tensor as `_state_tensor` gives it): a copy taken by a driver whose
        torch thread is busy (Streaming DiLoCo trains on while its round's state is agreed)."""
        if state is None:
            round_ = self.member.round
            prepared = await self.thread(lambda: prepare_tensor(STATE_NAME, self._state_tensor()))
        else:
            round_ = state[0]
            prepared = await trio.to_thread.run_sync(prepare_tensor, STATE_NAME, state[1])
        checksum = prepared.header.checksum
        self.tensors.put(prepared, pin=True)
        if self.served is not None and self.served != checksum:
            self._supersede(self.served, keep=checksum)
            if self._served_round == round_:  # we adopted another state of this round
                self.replicator.writer.withdraw_checkpoint(self._served_round, self.served)
        self.served, self._served_round = checksum, round_
        self.replicator.writer.provide_checkpoint(round_, checksum)
        self.progress.state_checksum = checksum.hex()[:16]

    def _supersede(self, checksum: bytes, *, keep: bytes) -> None:
        """Serve `checksum` unpinned for a while; drop the oldest beyond KEEP_SUPERSEDED (never
        `keep`, the state we serve now)."""
        self.tensors.unpin(checksum)
        self._superseded = [c for c in self._superseded if c != checksum] + [checksum]
        while len(self._superseded) > KEEP_SUPERSEDED:
            oldest = self._superseded.pop(0)
            if oldest != keep:
                self.tensors.discard(oldest)

    @property
    def served_state(self) -> tuple[int, bytes] | None:
        """(round, checksum) of the state we serve, as one pair: what our progress report tells
        (the round counter moves on before the new state is served). None before the first."""
        return None if self.served is None else (self._served_round, self.served)

    async def _own_checksum(self) -> bytes:
        prepared = await self.thread(lambda: prepare_tensor(STATE_NAME, self._state_tensor()))
        return prepared.header.checksum

    # -- agree after a round --------------------------------------------------------------------

    async def agree(self, *, wait: float) -> None:
        """Wait (up to `wait`) for the trusted state of our round; replay or adopt it if ours
        differs. No trusted attestation: keep ours (anchors may be away; nobody else decides)."""
        round_ = self.member.round
        trusted = await self.settle(round_, wait=wait)
        if trusted is None or trusted == self.served:
            return
        await self.repair(round_, trusted)

    async def settle(self, round_: int, *, wait: float) -> bytes | None:
        """The trusted state of `round_`, once every live member announced theirs (at most
        `wait` seconds), or None."""
        with trio.move_on_after(wait):
            while not self._settled(round_):  # noqa: ASYNC110 - replicated state and lease expiry change with no event to wait on
                await trio.sleep(0.1)
        return self.trust.verdict(round_)

    async def repair(self, round_: int, trusted: bytes) -> None:
        """Our state of `round_` is not the trusted one: replay the round, else download."""
        log.warning("state of round %d differs from the trusted one: repairing", round_)
        if not await self._replay(round_ - 1, trusted):
            await self._adopt(round_, trusted)

    async def keep_with_the_signers(self, *, wait: float) -> bool:
        """Never run ahead of the run's trusted signers. Our round's state must be attested
        before we exchange updates for it, while any other signer is live to attest: a member
        restarted from its own checkpoint ahead of the group saw nobody else holding its round,
        counted itself alone, and closed every later round alone in seconds, its own model,
        while the group waited for it. Waits (at most `wait`) for that attestation. True: go on
        (our state is the attested one, or no other signer is live); False: the round must
        start again, from the trusted state we repaired or adopted, or from a newer one."""
        round_ = self.member.round
        with trio.move_on_after(wait):
            while (  # noqa: ASYNC110 - replicated state and lease expiry change with no event to wait on
                self.trust.verdict(round_) is None
                and self.trust.newest_round() <= round_
                and self.trust.other_attester_live()
            ):
                await trio.sleep(0.2)
        trusted = self.trust.verdict(round_)
        if trusted is not None:
            if trusted == self.served:
                return True
            await self.repair(round_, trusted)  # our update was computed from another state
            return False
        newest = self.trust.newest_round()
        if newest > round_ or not self.trust.other_attester_live():
            return newest <= round_  # behind: the driver catches up; no signer: ours goes on
        # the signers are live and stayed behind us for a whole round: we are the one that ran
        # off alone, and their newest state is the run's
        log.warning(
            "round %d: no trusted signer attested our state in %.0f s while they are at round "
            "%d: adopting theirs",
            round_,
            wait,
            newest,
        )
        trusted = self.trust.verdict(newest) if newest >= 0 else None
        if trusted is not None:
            await self._adopt(newest, trusted)
        return False

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
        await self.publish()
        if self.served != trusted:
            log.warning("round %d applied again does not give the trusted state", round_)
            return False
        self.roster.seed({u.sender for u in record.updates})  # count as the trusted signer did
        self.progress.replays += 1
        self.progress.resyncs += 1
        return True

    # -- catch up: start, rejoin, fall behind ---------------------------------------------------

    async def catch_up(self, *, initial: bool = False) -> bool:
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
        await self._first_loss()  # before the round: `finished` may turn true with it
        await self.publish()
        self.progress.round = self.member.round
        return True

    async def _resume_local(self) -> None:
        """A restarted member starts from its own newest checkpoint; peers ahead of it win after."""
        if self.checkpoints is None:
            return
        try:
            found = await self.thread(self.checkpoints.latest)
        except Exception as exc:  # a corrupt store must not stop the node: peers have the state
            log.warning(
                "local checkpoints unusable (%s); catching up from peers", exc, exc_info=True
            )
            return
        if found is not None and found[1].round > self.member.round:
            await self.thread(self.member.restore, found[1])
            log.info("resumed from our own checkpoint of round %d", found[1].round)

    async def _adopt(self, round_: int, checksum: bytes) -> bool:
        """Download the trusted state `checksum` of `round_`, checked (adoption.py), and use it;
        False if it could not be had or was refused (we try again later)."""
        self.progress.phase = f"downloading state of round {round_}"
        running = self.member.round > 0 or self.progress.rounds_completed > 0
        flat = await self.downloads.fetch_checked(self.member, round_, checksum, running=running)
        self.progress.refused_states = self.downloads.refused
        self.progress.state_donors = list(self.downloads.asked)
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
        await self.thread(self.member.restore, state)
        # the adopted state's loss, known before its checksum and round are shown: a member that
        # had evaluated its own start state (a restarted one) would otherwise report that loss
        # beside the group's model, and `status` says `finished` as soon as the round is final
        self.progress.loss = await self.thread(self.built.eval_loss)
        if self.progress.initial_loss is None:
            self.progress.initial_loss = self.progress.loss
        self.progress.resyncs += 1
        self.progress.state_downloads += 1
        self.gossip.current_round = self.first_exchange(round_)
        await self.publish()
        self.progress.round = round_

    async def _first_loss(self) -> None:
        """The loss a member starts from, measured once, on the state it first holds."""
        if self.progress.initial_loss is None:
            self.progress.loss = self.progress.initial_loss = await self.thread(
                self.built.eval_loss
            )

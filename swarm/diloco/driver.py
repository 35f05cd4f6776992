"""The DiLoCo loop of one member inside a node: rounds, consistency, joining, checkpoints.

    catch up ──► [ H inner steps (thread) ─► update gossip ─► aggregate + outer step (thread)
                   ─► publish state checksum in RunState ─► agree with the majority ] × rounds

State is content-addressed. After every outer step a member prepares its state (θ_global and
outer momentum, fp32) as one tensor, serves it, and announces (round → checksum) in RunState's
checkpoint registry, where the dot's replica names the provider. Identical states have
identical checksums, so the registry *is* the consistency check: a member whose checksum is
not the majority's for its round re-syncs from the majority's providers, and a joiner (or a
restarted member) downloads the majority state of the newest round from all its providers in
parallel. Expected contributors for round r are the live members that announced a state for
round r: a joiner becomes one as soon as it has caught up, and a vanished member stops counting
when its lease ends, and never holds a round beyond its deadline.
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
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState
from peertrain.protocol.tensors import PreparedTensor, TensorDownload, prepare_tensor

from .build import BuiltMember
from .checkpoint import CheckpointStore
from .member import MemberState, RoundReport, rejection_kind
from .run_spec import DiLoCoSpec
from .update_gossip import UpdateGossip

log = logging.getLogger(__name__)

STATE_NAME = "diloco/state"
LEASE_MS = 30_000
AGREEMENT_WAIT = 3.0


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


def _winner(counts: Counter[bytes]) -> bytes:
    """The state a group converges on: most providers, ties broken by the larger checksum.
    Every member computes the same winner from the same registry, so a three-way split of a
    three-member group (each closed the round with other updates) still ends in one state."""
    return max(counts.items(), key=lambda item: (item[1], item[0]))[0]


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
    resyncs: int = 0
    rejected_updates: int = 0
    rejected_by_reason: Counter[str] = field(default_factory=Counter)  # rejection_kind → count
    phase: str = "starting"
    history: list[dict] = field(default_factory=list)


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
    ):
        self.spec = spec
        self.peer_id = peer_id
        self.replicator = replicator
        self.state = replicator.state
        self.gossip = gossip
        self.tensors = tensors
        self.addrs = addrs
        self.on_round = on_round
        self.attack = _build_attack(attack)
        self.checkpoints = checkpoints
        self._dealt_to: set[str] = set()
        self.progress = DriverProgress()
        self.built = built
        self._served: bytes | None = None
        self._served_round = -1
        self._limiter = trio.CapacityLimiter(1)  # one torch job at a time per member

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
            # No next round will repair a divergence in the last one: wait longer for everyone's
            # checksum of it and adopt the majority's state if ours differs.
            await self._agree_with_majority(wait=self.spec.round_timeout)
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
                len(self.expected_members(0)) < self.spec.min_members
                and self._newest_majority_round() <= 0
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
                role="diloco", addrs=self.addrs()[:8], lease_ms=LEASE_MS
            )
            await trio.sleep(LEASE_MS / 3000)

    # -- one round ------------------------------------------------------------------------------

    async def _one_round(self) -> None:
        round_ = self.member.round
        # the deal must be the same on every member: the senders the group aggregated last round
        # are (members agree on their state, hence on that set); fresh runs use round 0's quorum
        group = self._dealt_to or self.expected_members(round_)
        self.built.use_shard(self.spec.shard_in(self.peer_id, group))
        self.progress.phase = "inner steps"
        payload = await self._thread(self.member.prepare_update)
        if self.attack is not None:
            payload = await self._thread(self._forge, payload)
        if self._newest_majority_round() > round_:
            # the group finished round r without us (we were too slow or partitioned): our
            # update is late; adopt the group's state instead of computing a divergent one
            await self._catch_up()
            return
        self.progress.phase = "exchanging"
        contributions = await self.gossip.exchange(
            round_, payload, deadline=trio.current_time() + self.spec.round_timeout
        )
        self.progress.phase = "outer step"
        report = await self._thread(self.member.apply_update, contributions)
        self._dealt_to = set(report.accepted) | set(s for s, _ in report.rejected) | {self.peer_id}
        self.progress.rejected_updates += len(report.rejected)
        self.progress.rejected_by_reason.update(rejection_kind(why) for _, why in report.rejected)
        self.replicator.writer.add_progress(self.spec.inner_steps)
        await self._publish_state()
        await self._agree_with_majority()
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

    # -- state: publish, agree, catch up --------------------------------------------------------

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

    def _refs(self, round_: int) -> Counter[bytes]:
        """Checksums announced for state at `round_`, counted by live providers."""
        counts: Counter[bytes] = Counter()
        for checksum, providers in self.state.checkpoints().get(round_, {}).items():
            counts[checksum] += sum(
                1 for p in providers if self.state.is_live(p) or p == self.peer_id
            )
        return counts

    def _newest_majority_round(self) -> int:
        rounds = [r for r in self.state.checkpoints() if self._refs(r)]
        return max(rounds, default=-1)

    async def _agree_with_majority(self, *, wait: float = AGREEMENT_WAIT) -> None:
        round_ = self.member.round
        with trio.move_on_after(wait):
            while sum(self._refs(round_).values()) < len(self.expected_members(round_ - 1)):  # noqa: ASYNC110 - replicated state and lease expiry change with no event to wait on
                await trio.sleep(0.1)
        counts = self._refs(round_)
        if not counts:
            return
        majority = _winner(counts)
        if majority != self._served:
            log.warning(
                "state of round %d differs from the majority (%d of %d agree): re-syncing",
                round_,
                counts[majority],
                sum(counts.values()),
            )
            await self._adopt(round_, majority)

    def expected_members(self, round_: int) -> set[str]:
        return expected_members(self.state, self.peer_id, round_)

    async def _catch_up(self, *, initial: bool = False) -> None:
        """Adopt the newest majority state when it differs from ours; then announce ours."""
        if initial:  # give anti-entropy a moment to bring a joiner the registry
            with trio.move_on_after(5.0):
                while self._newest_majority_round() < 0 and self.replicator.exchange.peers():  # noqa: ASYNC110 - replicated state and lease expiry change with no event to wait on
                    await trio.sleep(0.1)
        if initial:
            await self._resume_local()
        newest = self._newest_majority_round()
        if newest >= self.member.round and newest >= 0:
            majority = _winner(self._refs(newest))
            if newest > self.member.round or majority != await self._own_checksum():
                await self._adopt(newest, majority)
                return
        await self._publish_state()
        self.progress.round = self.member.round
        if self.progress.initial_loss is None:
            self.progress.loss = self.progress.initial_loss = await self._thread(
                self.built.eval_loss
            )

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

    async def _adopt(self, round_: int, checksum: bytes) -> None:
        self.progress.phase = f"downloading state of round {round_}"
        providers = [
            p
            for p in self.state.checkpoints().get(round_, {}).get(checksum, ())
            if p != self.peer_id
        ]
        numel = self.member.layout.numel
        download = await self.tensors.fetch(providers, checksum, max_nbytes=2 * numel * 4 + 1024)
        flat = await self._thread(download.finish)
        if flat.numel() != 2 * numel:
            raise ValueError(f"state of {flat.numel()} values does not fit this run's model")
        params, momentum = flat[:numel].clone(), flat[numel:].clone()
        state = MemberState(
            round=round_, params=self.member.layout.named(params), momentum=momentum
        )
        await self._thread(self.member.restore, state)
        self.progress.resyncs += 1
        self.gossip.current_round = round_
        await self._publish_state()
        self.progress.round = round_
        if self.progress.initial_loss is None:
            self.progress.loss = self.progress.initial_loss = await self._thread(
                self.built.eval_loss
            )
        log.info(
            "adopted the group's state of round %d from %d provider(s)", round_, len(providers)
        )

    def _forge(self, payload: bytes) -> bytes:
        """A Byzantine member: an ordinary member whose outgoing update goes through an attack."""
        from ..attacks import AttackContext

        codec, numel = self.member.encoder.codec, self.member.layout.numel
        honest = codec.decode(payload, numel)
        members = max(len(self.expected_members(self.member.round)), 2)
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

"""Streaming DiLoCo's overlap for real: inner steps in a worker thread while trio exchanges the
fragments over update gossip; the outer step lands τ steps late, so the result is the lockstep
harness's bit for bit, a fragment is an ordinary update-gossip item checked for its size, and
with slots by wall time a slow member contributes what it can without stalling the others."""

from __future__ import annotations

import time
from functools import partial

import pytest
import torch
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.protocol.envelope import seal
from peertrain.protocol.messages import encode
from peertrain.swarm.data import TextDatasetConfig
from peertrain.swarm.diloco import (
    Contribution,
    DiLoCoError,
    InnerConfig,
    ProtocolCodec,
    StreamingConfig,
    StreamingMember,
)
from peertrain.swarm.diloco.group.streaming_loop import StreamingLoop
from peertrain.swarm.exchange.gossip import DOMAIN, UpdateAnnouncement
from peertrain.swarm.models import GPTConfig
from peertrain.testing import StreamingGroup
from peertrain.testing.memory_router import open_memory_router
from peertrain.testing.streaming_group import fragment_gossip

MODEL = GPTConfig(block_size=16, n_layer=2, n_head=2, n_embd=16)
INNER = InnerConfig(steps=8, batch_size=8, lr=3e-3, warmup_steps=4)
CONFIG = StreamingConfig(fragments=2, overlap=2, mix=0.5)
RUN = "run-s"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def text():
    return TextDatasetConfig(max_bytes=100_000, block_size=MODEL.block_size).build()


def members(text, n: int, config: StreamingConfig = CONFIG) -> list[StreamingMember]:
    return [
        StreamingMember(
            MODEL.build(seed=0),
            text.train_batches(k, n, batch_size=INNER.batch_size, seed=0),
            inner=INNER,
            streaming=config,
            codec=ProtocolCodec("int8"),
        )
        for k in range(n)
    ]


async def test_threads_over_update_gossip_give_the_lockstep_result_bit_for_bit(text):
    keys = [create_new_key_pair() for _ in range(3)]
    names = [ID.from_pubkey(k.public_key).to_base58() for k in keys]
    threaded = members(text, 3)
    async with open_memory_router() as router:
        with trio.fail_after(240):
            async with trio.open_nursery() as nursery:
                for member, key in zip(threaded, keys, strict=True):
                    _, exchange = fragment_gossip(router, member, key, set(names), topic=RUN)
                    nursery.start_soon(StreamingLoop(member, exchange).run, 3 * INNER.steps)
    lockstep = StreamingGroup(members(text, 3), names)
    lockstep.run(3 * INNER.steps)
    lockstep.finish()
    expected = lockstep.members[0].fragment_hashes()
    assert all(m.fragment_hashes() == expected for m in threaded)
    assert threaded[0].rounds == [3, 3]
    # local models too: τ is exact
    for mine, theirs in zip(threaded, lockstep.members, strict=True):
        assert torch.equal(mine.layout.flatten(), theirs.layout.flatten())
    assert router.stats.invalid == 0


async def test_inner_steps_go_on_while_a_fragment_is_exchanged(text):
    (member,) = members(text, 1, StreamingConfig(fragments=2, overlap=3))
    seen = []

    async def exchange(slot, payload):
        """Answers only once the member took τ more steps: without overlap, it never would."""
        sent_at = member.inner.step
        while member.inner.step < sent_at + 2:  # noqa: ASYNC110 - the thread's step counter has no event
            await trio.sleep(0.01)
        seen.append((slot, sent_at, member.inner.step))
        return [Contribution(sender="me", payload=bytes(payload))]

    with trio.fail_after(120):
        # 3 steps past the last sync: its exchange, too, is answered while steps go on
        stats = await StreamingLoop(member, exchange).run(2 * INNER.steps + 3)
    assert [s for s, _, _ in seen] == [1, 2, 3, 4]
    assert all(after >= before + 2 for _, before, after in seen)
    assert stats.steps == 2 * INNER.steps + 3 and stats.exchanges == 4
    assert member.rounds == [2, 2]


async def test_a_failed_exchange_ends_the_loop_with_its_error(text):
    (member,) = members(text, 1)

    async def exchange(slot, payload):
        raise RuntimeError("link down")

    with trio.fail_after(60), pytest.raises(BaseExceptionGroup) as caught:
        await StreamingLoop(member, exchange).run(2 * INNER.steps)
    assert caught.group_contains(RuntimeError, match="link down")
    assert caught.group_contains(DiLoCoError, match="ended without a result")


async def test_a_fragment_update_of_another_fragments_size_is_refused(text):
    # P=4 on this model: the two blocks' fragments are over 1/P, the others are filled to it
    (member,) = members(text, 1, StreamingConfig(fragments=4))
    assert member.slot_nbytes(1) != member.slot_nbytes(2)
    key, other = create_new_key_pair(), create_new_key_pair()
    sender = ID.from_pubkey(other.public_key).to_base58()
    async with open_memory_router() as router:
        gossip, _ = fragment_gossip(router, member, key, {sender}, topic=RUN)

        def announce(slot: int, nbytes: int) -> bytes:
            ann = UpdateAnnouncement(sender=sender, nbytes=nbytes, checksum=bytes(32))
            return seal(
                other, domain=DOMAIN, run="run-s", round=slot, payload=encode(ann)
            ).to_bytes()

        assert gossip.validate(sender, announce(1, member.slot_nbytes(1)))
        assert not gossip.validate(sender, announce(2, member.slot_nbytes(1)))
        assert gossip.validate(sender, announce(2, member.slot_nbytes(2)))


class SlowedMember(StreamingMember):
    """A volunteer three times slower: every inner step takes twice its own time again."""

    def train(self, steps):
        started = time.perf_counter()
        report = super().train(steps)
        time.sleep(2 * (time.perf_counter() - started))
        return report


async def test_a_member_three_times_slower_contributes_without_stalling_the_group(text):
    keys = [create_new_key_pair() for _ in range(3)]
    names = {ID.from_pubkey(k.public_key).to_base58() for k in keys}
    group = members(text, 2, StreamingConfig(fragments=2, overlap=1)) + [
        SlowedMember(
            MODEL.build(seed=0),
            text.train_batches(2, 3, batch_size=INNER.batch_size, seed=0),
            inner=INNER,
            streaming=StreamingConfig(fragments=2, overlap=1),
            codec=ProtocolCodec("int8"),
        )
    ]
    for m in group:  # slots by time: no nominal pace to clip claims to
        m.max_samples = 10**6
    loops = []
    async with open_memory_router() as router:
        # the gossip's deadline is 600 s: a round that waited for it would fail this test
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for member, key in zip(group, keys, strict=True):
                    _, exchange = fragment_gossip(router, member, key, names, topic=RUN)
                    loops.append(StreamingLoop(member, exchange))
                    nursery.start_soon(partial(loops[-1].run_timed, 4, stride_seconds=1.0))
    assert len({tuple(m.fragment_hashes()) for m in group}) == 1
    assert all(m.rounds == [2, 2] for m in group)
    for loop in loops:  # every exchange counted all three updates, the slow one's included
        assert [len(r.accepted) for r in loop.reports] == [3, 3, 3, 3]
    fast, slow = min(group[0].inner.step, group[1].inner.step), group[2].inner.step
    assert 4 <= slow < 0.6 * fast  # it took the steps it could, the others did not wait
    slowest = sorted(names).index(ID.from_pubkey(keys[2].public_key).to_base58())
    for report in loops[0].reports:  # and its update counts by the samples it saw
        others = [w for i, w in enumerate(report.weights) if i != slowest]
        assert report.weights[slowest] < 0.8 * min(others)


async def _answered(slot, payload):
    return [Contribution(sender="me", payload=bytes(payload))]


async def test_rounds_follow_each_other_without_a_pause_and_end_with_nothing_in_flight(text):
    """A driver agrees on round r's end while round r+1 computes: the thread hands the end
    over (a whole state: `snapshot` refuses one mid-round) and trains on meanwhile."""
    (member,) = members(text, 1)  # H 8, P 2: a slot every 4 steps, landing τ = 2 steps later
    loop = StreamingLoop(member, _answered)
    ends, went_on = [], []

    def at_boundary(round_):
        ends.append((round_, list(member.rounds), member.inner.step))
        return member.snapshot()

    async def driver(receive):
        async for state in receive:
            taken = member.inner.step
            if state.round < 3:  # not the last: steps go on while we hold it
                while member.inner.step < taken + 2:  # noqa: ASYNC110 - a step counter has no event
                    await trio.sleep(0.01)
            went_on.append(member.inner.step - taken)

    send, receive = trio.open_memory_channel(1)
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(driver, receive)
            async with send:
                stats = await loop.run_rounds(
                    0, 3, at_boundary=at_boundary, boundaries=send, stride_steps=4
                )
    # a round's last fragment is sent at step 8(r+1) and lands τ steps later; the last round
    # ends once everything landed
    assert ends == [(0, [1, 1], 10), (1, [2, 2], 18), (2, [3, 3], 24)]
    assert went_on[:2] >= [2, 2] and stats.steps == 24 and stats.exchanges == 6


async def test_a_halted_loop_drops_what_is_in_flight_and_runs_again_from_a_round_end(text):
    (member,) = members(text, 1)
    start = member.snapshot()
    answer = trio.Event()

    async def exchange(slot, payload):
        await answer.wait()  # never, until the halt: a fragment more than τ steps late
        return [Contribution(sender="me", payload=bytes(payload))]

    loop = StreamingLoop(member, exchange)
    send, _receive = trio.open_memory_channel(1)
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(
                    loop.run_rounds, 0, 2, at_boundary=lambda r: r, boundaries=send, stride_steps=4
                )
            )
            while member.inner.step < 6:  # noqa: ASYNC110 - a step counter has no event
                await trio.sleep(0.01)
            await trio.sleep(0.5)  # the thread waits for slot 1 (sent at step 4, τ = 2)
            loop.halt()
    assert member.inner.step == 6 and member.rounds == [0, 0]  # waiting for slot 1 at τ
    member.restore(start)
    loop.exchange = _answered
    send, receive = trio.open_memory_channel(2)
    with trio.fail_after(120):
        async with send:
            stats = await loop.run_rounds(
                0, 1, at_boundary=lambda r: r, boundaries=send, stride_steps=4
            )
    assert receive.receive_nowait() == 0 and member.rounds == [1, 1]
    assert stats.exchanges == 2  # the dropped slot 1 was not answered late into this run

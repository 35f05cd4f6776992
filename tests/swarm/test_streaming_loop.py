"""Streaming DiLoCo's overlap for real: inner steps in a worker thread while trio exchanges the
fragments over update gossip; the outer step lands τ steps late, so the result is the lockstep
harness's bit for bit, and a fragment is an ordinary update-gossip item checked for its size."""

from __future__ import annotations

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
from peertrain.swarm.diloco.streaming_loop import StreamingLoop
from peertrain.swarm.diloco.update_gossip import DOMAIN, UpdateAnnouncement, UpdateGossip
from peertrain.swarm.models import GPTConfig
from peertrain.testing import StreamingGroup
from peertrain.testing.memory_router import open_memory_router

MODEL = GPTConfig(block_size=16, n_layer=2, n_head=2, n_embd=16)
INNER = InnerConfig(steps=8, batch_size=8, lr=3e-3, warmup_steps=4)
CONFIG = StreamingConfig(fragments=2, overlap=2, mix=0.5)
TOPIC = "/peertrain/run-s/updates"


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


def gossip_for(router, member: StreamingMember, peers: set[str], key) -> UpdateGossip:
    me = ID.from_pubkey(key.public_key).to_base58()
    endpoint = router.endpoint(me)
    gossip = UpdateGossip(
        run_id="run-s",
        key_pair=key,
        transport=endpoint.group(TOPIC),
        expected_nbytes=max(member.slot_nbytes(s) for s in range(1, 3)),
        nbytes_of=member.slot_nbytes,
        is_member=lambda p: p in peers,
        expected=lambda slot: peers,
    )
    endpoint.validate_only(TOPIC, gossip.validate)
    return gossip


async def test_threads_over_update_gossip_give_the_lockstep_result_bit_for_bit(text):
    keys = [create_new_key_pair() for _ in range(3)]
    names = [ID.from_pubkey(k.public_key).to_base58() for k in keys]
    threaded = members(text, 3)
    async with open_memory_router() as router:
        gossips = [
            gossip_for(router, m, set(names), k) for m, k in zip(threaded, keys, strict=True)
        ]

        async def one(member, gossip):
            async def exchange(slot, payload):
                deadline = trio.current_time() + 60
                return await gossip.exchange(slot, bytes(payload), deadline=deadline)

            await StreamingLoop(member, exchange).run(3 * INNER.steps)

        with trio.fail_after(240):
            async with trio.open_nursery() as nursery:
                for member, gossip in zip(threaded, gossips, strict=True):
                    nursery.start_soon(one, member, gossip)
    lockstep = StreamingGroup(members(text, 3), names)
    lockstep.run(3 * INNER.steps)
    lockstep.finish()
    expected = lockstep.members[0].fragment_hashes()
    assert all(m.fragment_hashes() == expected for m in threaded)
    assert threaded[0].rounds == [3, 3]
    for mine, theirs in zip(
        threaded, lockstep.members, strict=True
    ):  # local models too: τ is exact
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
    (member,) = members(text, 1, StreamingConfig(fragments=2))
    assert member.slot_nbytes(1) != member.slot_nbytes(2)
    key, other = create_new_key_pair(), create_new_key_pair()
    sender = ID.from_pubkey(other.public_key).to_base58()
    async with open_memory_router() as router:
        gossip = gossip_for(router, member, {sender}, key)

        def announce(slot: int, nbytes: int) -> bytes:
            ann = UpdateAnnouncement(sender=sender, nbytes=nbytes, checksum=bytes(32))
            return seal(
                other, domain=DOMAIN, run="run-s", round=slot, payload=encode(ann)
            ).to_bytes()

        assert gossip.validate(sender, announce(1, member.slot_nbytes(1)))
        assert not gossip.validate(sender, announce(2, member.slot_nbytes(1)))
        assert gossip.validate(sender, announce(2, member.slot_nbytes(2)))

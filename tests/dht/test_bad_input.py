"""Bad input from the network is refused, logged with its reason, penalised; nothing is stored.

An attacker node speaks the real protocol over a real connection to a victim server, sending
one kind of bad record (or bad bytes) per test. A byzantine replica serves forged records to
an honest reader, which must drop them and blame the replica.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import pytest
import trio
from peertrain.dht import DhtConfig, peer_record_key, stage_key
from peertrain.dht.errors import RejectReason
from peertrain.dht.messages import DHT_PROTOCOL, Store, Stored
from peertrain.dht.namespaces import STAGE
from peertrain.dht.records import now_ms, sign_entry
from peertrain.protocol.framing import HEADER
from peertrain.protocol.packing import pack
from peertrain.testing import wait_until

CONFIG = DhtConfig(publish_peer_record=False)


def good(node, key=None, value=None, **kwargs):
    return sign_entry(
        node._key_pair, key or stage_key("run", 1), value or {"ok": 1}, ttl=60, **kwargs
    )


def bad_signature(attacker, victim):
    return dataclasses.replace(good(attacker), value=pack({"ok": 2}))


def wrong_writer(attacker, victim):
    return good(attacker, peer_record_key(victim.own), {"addrs": ["/ip4/10.0.0.1/tcp/1"]})


def expired(attacker, victim):
    return sign_entry(
        attacker._key_pair, stage_key("run", 1), {}, ttl=1, clock=lambda: time.time() - 100
    )


def future(attacker, victim):
    return sign_entry(
        attacker._key_pair, stage_key("run", 1), {}, ttl=60, clock=lambda: time.time() + 600
    )


def oversized(attacker, victim):
    return good(attacker, value={"blob": b"x" * (STAGE.max_value_size + 1)})


def unknown_namespace(attacker, victim):
    return good(attacker, key="/peertrain/run/secret-plans")


def malformed(attacker, victim):
    return good(attacker, peer_record_key(attacker.own), {"addrs": ["definitely not a multiaddr"]})


CASES = {
    "bad-signature": bad_signature,
    "wrong-writer": wrong_writer,
    "expired": expired,
    "issued-in-future": future,
    "oversized": oversized,
    "unknown-namespace": unknown_namespace,
    "malformed": malformed,
}


# Failures that clocks explain (in flight, or a writer's clock ahead of ours) are refused and
# logged, but cost nobody points: an honest replica may hand them over.
CLOCK_FAILURES = {"expired", "issued-in-future"}


@pytest.fixture
def penalties():
    return []


def recorder(penalties):
    return lambda peer, points, reason: penalties.append((peer, points, reason))


@pytest.mark.parametrize("code", list(CASES))
async def test_each_kind_of_bad_record_is_refused_logged_and_penalised_unless_clocks_explain_it(
    dht_swarm, penalties, caplog, code
):
    caplog.set_level(logging.WARNING, logger="peertrain.dht")
    async with dht_swarm(2, config=CONFIG, penalise=recorder(penalties)) as swarm:
        await swarm.join_all()
        victim, attacker = swarm.nodes
        entry = CASES[code](attacker, victim)
        reply = await attacker.links.request(
            victim.own,
            Store(entries=(entry, good(attacker, stage_key("run", 2))), server=True),
            Stored,
            timeout=5,
        )
        assert (
            reply.accepted == 1 and len(reply.rejected) == 1 and reply.rejected[0].startswith(code)
        )
        assert victim.store.get(entry.key, now=now_ms()) == []
        blamed = [] if code in CLOCK_FAILURES else [(attacker.own.to_base58(), code)]
        assert [(p, r.split(":")[1].strip()) for p, _, r in penalties] == blamed
        assert any(
            code in rec.getMessage() and str(attacker.own) in rec.getMessage()
            for rec in caplog.records
        )
        assert victim.statistics().rejected == {code: 1}


async def raw_stream(attacker, victim):
    return await attacker.host.new_stream(victim.own, [str(DHT_PROTOCOL)])


@pytest.mark.parametrize(
    "payload, error",
    [
        (HEADER.pack(100 << 20), "MessageTooLarge"),  # announces a 100 MiB frame
        (HEADER.pack(5) + b"\xc1\xc1\xc1\xc1\xc1", "DecodeError"),  # not msgpack
        (
            HEADER.pack(len(pack(["dht/store", {"entries": "no"}])))
            + pack(["dht/store", {"entries": "no"}]),
            "DecodeError",
        ),  # msgpack of the wrong shape
    ],
)
async def test_undecodable_or_oversized_frames_are_penalised_and_the_stream_closed(
    dht_swarm, penalties, payload, error
):
    async with dht_swarm(2, config=CONFIG, penalise=recorder(penalties)) as swarm:
        await swarm.join_all()
        victim, attacker = swarm.nodes
        stream = await raw_stream(attacker, victim)
        await stream.write(payload)
        with trio.fail_after(5):
            try:
                answer = await stream.read(1)
            except Exception:  # noqa: BLE001 - reset or EOF: the victim hung up either way
                answer = b""
        assert answer == b""
        await wait_until(lambda: victim.statistics().rejected.get(error) == 1)
        assert penalties and penalties[0][0] == attacker.own.to_base58()
        assert len(victim.store) == 0


async def test_a_byzantine_replica_serving_forged_or_misfiled_records_is_ignored_and_penalised(
    dht_swarm, penalties
):
    async with dht_swarm(2, config=CONFIG, penalise=recorder(penalties)) as swarm:
        await swarm.join_all()
        reader, liar = swarm.nodes
        key = stage_key("run", 3)
        honest = good(liar, key)
        forged = dataclasses.replace(good(reader, key), value=pack({"ok": "forged"}))
        liar.store.put(honest, STAGE, now=now_ms())
        liar.store._by_key[key][forged.writer] = forged  # what a malicious store would serve
        found = await reader.get(key)
        assert set(found) == {liar.own.to_base58()}  # the honest entry only
        assert penalties[-1][0] == liar.own.to_base58() and "bad-signature" in penalties[-1][2]

        other = good(liar, stage_key("run", 4))
        liar.store._by_key[stage_key("run", 5)] = {other.writer: other}
        assert await reader.get(stage_key("run", 5)) == {}
        assert "wrong-key" in penalties[-1][2]


async def test_several_bad_entries_in_one_request_cost_one_penalty_not_one_each(
    dht_swarm, penalties
):
    async with dht_swarm(2, config=CONFIG, penalise=recorder(penalties)) as swarm:
        await swarm.join_all()
        victim, attacker = swarm.nodes
        entries = tuple(bad_signature(attacker, victim) for _ in range(5))
        reply = await attacker.links.request(
            victim.own, Store(entries=entries, server=True), Stored, timeout=5
        )
        assert len(reply.rejected) == 5
        assert len(penalties) == 1 and penalties[0][1] == RejectReason.BAD_SIGNATURE.penalty

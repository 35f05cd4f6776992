"""Run discovery cannot be censored by a flood of fresh writers (issue 29, item 2).

`/peertrain/runs` takes 1024 writers. The server used to evict the entry expiring first, so
1024+ writers with 1-hour TTLs pushed out every honest 600 s listing and then refused new ones;
and it answered newest first under a 512 KB budget, so ~125 entries of 4 KB stamped 25 s in the
future hid every honest listing from every FindValue. Real signed entries; the last test runs
the flood through real Store requests on a loopback DHT swarm and reads it back as `run list`
merges it.
"""

from __future__ import annotations

import time

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.dht import DhtConfig, runs_key
from peertrain.dht.messages import Store, Stored
from peertrain.dht.namespaces import RUNS
from peertrain.dht.records import now_ms, sign_entry
from peertrain.dht.serving import Responder
from peertrain.dht.storage import RecordStore
from peertrain.node.runs.directory import merge_entries
from peertrain.testing import wait_until

FLOOD = 1100  # fresh writers: more than the key's 1024
AHEAD = 25.0  # seconds in the future (the skew allowed is 30)


def honest_entry(key_pair=None, *, clock=time.time):
    key_pair = key_pair or create_new_key_pair()
    creator = ID.from_pubkey(key_pair.public_key).to_base58()
    run = {
        "run_id": "ab" * 32,
        "name": "honest",
        "creator": creator,
        "mode": "diloco",
        "model": "mlp",
        "admission": "open",
        "members": 3,
        "round": 7,
    }
    return sign_entry(key_pair, runs_key(), {"runs": [run]}, ttl=600, clock=clock)


def flood_entries(count: int = FLOOD) -> list:
    """Fresh writers' 4 KB listings, stamped AHEAD s in the future, valid for an hour."""
    future = lambda: time.time() + AHEAD  # noqa: E731
    out = []
    for i in range(count):
        run = {"run_id": f"{i:064x}", "name": "x" * 3900, "creator": "", "mode": "diloco"}
        out.append(
            sign_entry(create_new_key_pair(), runs_key(), {"runs": [run]}, ttl=3600, clock=future)
        )
    assert all(len(e.value) > 3900 for e in out[:1])
    return out


def responder(store: RecordStore) -> Responder:
    none = lambda *_: None  # noqa: E731
    return Responder(
        is_server=True,
        table=None,  # type: ignore[arg-type]  # answer() reads the store only
        store=store,
        registry=None,  # type: ignore[arg-type]
        signatures=None,  # type: ignore[arg-type]
        book=None,  # type: ignore[arg-type]
        connected_keys={},
        on_server_peer=none,
        on_client_peer=none,
        on_reject=none,
    )


def test_1100_fresh_writers_with_hour_ttls_evict_no_honest_listing():
    store = RecordStore(seed=0)
    honest = honest_entry()
    now = now_ms()
    assert store.put(honest, RUNS, now=now)
    for entry in flood_entries():
        assert store.put(entry, RUNS, now=now + 1)  # newcomers churn among themselves
    held = store.get(runs_key(), now=now)
    assert len(held) == 1024 and honest in held
    assert honest in responder(store).answer(runs_key())


def test_future_stamped_4kb_entries_do_not_push_an_honest_listing_out_of_an_answer():
    store = RecordStore(seed=0)
    now = now_ms()
    honest = honest_entry()
    assert store.put(honest, RUNS, now=now)
    for entry in flood_entries(200):  # ~800 KB: beyond one answer's 512 KB
        assert store.put(entry, RUNS, now=now + 1)
    for _ in range(5):
        answer = responder(store).answer(runs_key())
        assert answer[0] == honest  # held longest: first, whatever the others' stamps
        assert sum(e.size + 64 for e in answer) <= 512 * 1024


def test_an_honest_listing_that_arrives_after_the_flood_is_still_answered_at_times():
    """The other half of each answer is a random sample: a newcomer is not hidden for good."""
    store = RecordStore(seed=0)
    now = now_ms()
    for entry in flood_entries(300):
        store.put(entry, RUNS, now=now)
    honest = honest_entry()
    assert store.put(honest, RUNS, now=now + 1)
    served = responder(store)
    assert any(honest in served.answer(runs_key()) for _ in range(40))


def test_a_listing_its_writer_stored_is_never_evicted_by_relayed_entries():
    """Entries one peer relays for writers that did not store them themselves evicted at
    random from the younger half, so a listing put after a flood began was soon gone (five such
    listings, 1000 more relayed entries: four of them lost). Relayed entries now take free room and
    each other's places only, and answers carry their writers' own entries first."""
    store = RecordStore(seed=0)
    now = now_ms()
    flood = flood_entries(2100)
    for entry in flood[:1100]:
        store.put(entry, RUNS, now=now, relayed=True)
    honest = [honest_entry() for _ in range(5)]
    for entry in honest:
        assert store.put(entry, RUNS, now=now + 1)
    for entry in flood[1100:]:
        store.put(entry, RUNS, now=now + 2, relayed=True)
    held = store.get(runs_key(), now=now)
    assert len(held) == 1024 and all(e in held for e in honest)
    assert set(responder(store).answer(runs_key())[:5]) == set(honest)


async def relay(attacker, nodes, flood) -> None:
    """`flood` stored at every node but `attacker` by real Store requests from `attacker`."""
    for node in nodes:
        if node is attacker:
            continue
        for start in range(0, len(flood), 16):
            batch = tuple(flood[start : start + 16])
            await attacker.walker.request(
                node.host.get_id(), Store(entries=batch, server=True, count=1), Stored
            )


async def test_run_list_still_shows_the_honest_run_under_a_flood_through_real_store_requests(
    dht_swarm,
):
    config = DhtConfig(publish_peer_record=False, request_timeout=5.0)
    async with dht_swarm(4, config=config, seed=2) as swarm:
        await swarm.join_all()
        honest_node, attacker, reader = swarm.nodes[0], swarm.nodes[1], swarm.nodes[3]
        await wait_until(lambda: all(n.bootstrapped for n in swarm.nodes), timeout=30)
        honest = honest_entry(honest_node._key_pair)  # the node's own listing of its run
        await honest_node.put_entry(honest)
        flood = flood_entries()
        for entry in flood:  # the attacker's own replica takes them too
            attacker.store.put(entry, RUNS, now=now_ms())
        await relay(attacker, swarm.nodes, flood)
        late = swarm.nodes[2]  # lists its run after the flood filled the key, before more
        await late.put_entry(honest_entry(late._key_pair))
        await relay(attacker, swarm.nodes, flood_entries())
        writers = await reader.get(runs_key())
        honest_writer = ID(honest.writer).to_base58()
        assert honest_writer in writers and late.host.get_id().to_base58() in writers
        listed = merge_entries(list(writers.values()))
        assert any(run["name"] == "honest" for run in listed)
        for node in swarm.nodes:  # the flood landed everywhere
            assert len(node.store.get(runs_key(), now=now_ms())) == 1024

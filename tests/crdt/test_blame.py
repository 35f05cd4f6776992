"""Blame the signer, never the messenger; and a stranger's clock never drags ours along.

An honest peer forwards what strangers signed (gossip relays, anti-entropy hands over whole
slots): penalising the forwarder for the stranger's work got honest peers banned.
"""

from __future__ import annotations

from peertrain.crdt.hlc import HybridClock, Stamp
from peertrain.crdt.signed import seal_delta

from .test_forgery import NOW, Peer, membership, signed
from .test_forgery import world as world  # noqa: F401 - the fixture, shared


def test_a_strangers_stamp_inside_the_drift_window_does_not_pin_our_clock():
    wall = [NOW]
    clock = HybridClock("me", wall_ms=lambda: wall[0])
    clock.observe(Stamp(NOW + 59_000, 7, "stranger"))  # accepted: inside the 60 s window
    ours = clock.now()
    assert ours.wall_ms <= NOW + 1_000  # not pinned 59 s ahead
    # a peer 200 ms behind us still accepts our next stamp
    behind = HybridClock("b", wall_ms=lambda: wall[0] - 200)
    behind.check(ours)


def test_near_stamps_still_order_our_writes_after_them():
    clock = HybridClock("me", wall_ms=lambda: NOW)
    clock.observe(Stamp(NOW + 500, 3, "peer"))
    assert clock.now() > Stamp(NOW + 500, 3, "peer")


def test_a_forwarded_delta_that_breaks_a_rule_costs_its_signer_not_the_forwarder(world):
    a, b, stranger = world.a, world.b, Peer()
    forged = signed(stranger, world, membership(b.id, stranger.id))  # writes b's slot
    world.rep.handle_sync(a.id, _sync_request(world, [forged]))  # a (honest) hands it over
    assert [p.peer for p in world.penalties] == [stranger.id]


def test_an_answer_full_of_bytes_that_are_no_delta_costs_its_hander_once(world):
    junk = [b"\x93" + bytes([i]) * 40 for i in range(5)]
    world.rep.handle_sync(world.a.id, _sync_request(world, junk))
    assert [p.peer for p in world.penalties] == [world.a.id]
    assert "5 envelope(s)" in world.penalties[0].reason


def test_deltas_a_clock_explains_cost_nobody_anything_in_anti_entropy(world):
    b = world.b
    ahead = [
        seal_delta(
            b.key,
            b.id,
            run_id=world.run_id,
            seq=i,
            doc=membership(b.id, b.id, wall=NOW + 3_600_000),
        ).raw
        for i in range(1, 6)
    ]
    world.rep.handle_sync(world.a.id, _sync_request(world, ahead))
    assert world.penalties == []


def test_the_gossip_validator_drops_clock_skew_without_blame(world):
    b = world.b
    ahead = signed(b, world, membership(b.id, b.id, wall=NOW + 3_600_000))
    assert world.rep.validate_gossip(b.id, ahead) is None
    assert world.rep.validate_gossip(b.id, b"not a delta") is False


def _sync_request(w, envelopes):
    from peertrain.crdt.sync import SyncRequest

    return SyncRequest(
        run=w.run_id,
        summary={},
        envelopes=tuple(envelopes),
        manifest=None,
        has_manifest=True,
    )

"""Revocations of an invite run are a grow-only set every replica keeps whole (issue 29, item 4).

They travelled as a window of the issuer's last 16 ban votes and lived in memory: a replica that
joined or restarted after 16 more revocations admitted the revoked peer on its unexpired
certificate, and replicas disagreed on who was certified. Real signed envelopes, real
replicators on a memory router; every delta enters through the replica's intake.
"""

from __future__ import annotations

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.admission import Admission
from peertrain.crdt.certificates import MemberCertificate, sign_certificate, sign_revocation
from peertrain.crdt.errors import StateFull
from peertrain.crdt.hlc import wall_clock_ms
from peertrain.crdt.replicator import Replicator, ReplicatorConfig
from peertrain.crdt.runstate import RunState
from peertrain.crdt.signed import seal_delta
from peertrain.crdt.sync import SyncRequest
from peertrain.crdt.writer import RunWriter
from peertrain.testing.crdt_network import open_memory_swarm

HOUR_MS = 3_600_000
QUIET = ReplicatorConfig(sync_interval=60)  # only the exchanges a test asks for


def _peer():
    key = create_new_key_pair()
    return key, ID.from_pubkey(key.public_key).to_base58()


def _invite(state: RunState) -> Admission:
    assert state.manifest is not None
    admission = Admission(
        run_id=state.run_id, creator=state.manifest.creator, mode="invite", wall_ms=state.wall_ms
    )
    state.install_admission(admission)
    return admission


def _certify(creator_key, run_id: str, peer: str, role: str = "member") -> bytes:
    cert = MemberCertificate(run=run_id, peer=peer, role=role, expires_ms=wall_clock_ms() + HOUR_MS)
    return sign_certificate(creator_key, cert)


def _member_delta(key, peer: str, run_id: str, certificate: bytes) -> bytes:
    """`peer`'s own signed member record, carrying its (unexpired) certificate."""
    writer = RunWriter(RunState(run_id), peer)
    doc = writer.announce(role="diloco", addrs=[], lease_ms=60_000, certificate=certificate)
    return seal_delta(key, peer, run_id=run_id, seq=wall_clock_ms(), doc=doc).raw


class Replica:
    """A replica on the router: its own key, invite admission, the penalties it handed out."""

    def __init__(self, router, manifest: bytes, run_id: str) -> None:
        self.key, self.peer_id = _peer()
        self.state = RunState(run_id)
        self.state.accept_manifest(manifest)  # as a node does: it found the run by its manifest
        self.admission = _invite(self.state)
        self.penalties: list[str] = []
        self.endpoint = router.endpoint(self.peer_id)
        self.replicator = Replicator(
            state=self.state,
            key_pair=self.key,
            pubsub=self.endpoint,
            exchange=self.endpoint,
            config=QUIET,
            on_penalty=lambda p: self.penalties.append(p.peer),
        )
        self.endpoint.serve(self.replicator.handle_sync)

    def offer(self, key, peer: str, certificate: bytes) -> bool:
        raw = _member_delta(key, peer, self.state.run_id, certificate)
        return self.replicator.handle_gossip(peer, raw)


async def _run_with_20_revocations(router, creator, creator_key):
    """The creator certifies 24 members, all join it; it revokes the first 20 (more than the
    old window of 16), the first of them before the other 19."""
    members = [(*_peer(),) for _ in range(24)]
    certs = {peer: _certify(creator_key, creator.state.run_id, peer) for _, peer in members}
    for key, peer in members:
        assert creator.replicator.handle_gossip(
            peer, _member_delta(key, peer, creator.state.run_id, certs[peer])
        )
    for _, peer in members[:20]:
        creator.replicator.writer.revoke(peer)
    return members, certs


async def test_a_replica_that_joins_after_20_revocations_rejects_the_revoked_peer():
    async with open_memory_swarm(1, config=QUIET) as (router, (creator,)):
        _invite(creator.state)
        members, certs = await _run_with_20_revocations(router, creator, creator.key_pair)
        joiner = Replica(router, creator.state.manifest_envelope, creator.state.run_id)
        assert await joiner.replicator.bootstrap([creator.peer_id])
        for key, peer in members[:20]:  # each still holds its unexpired certificate
            assert not joiner.offer(key, peer, certs[peer])
            assert peer not in joiner.state.owners() and not joiner.admission.admits(peer)
        assert members[0][1] in joiner.penalties  # the revoked peer is blamed, as a stranger
        for key, peer in members[20:]:
            assert joiner.offer(key, peer, certs[peer])


async def test_a_restarted_replica_still_rejects_the_revoked_peer():
    async with open_memory_swarm(1, config=QUIET) as (router, (creator,)):
        _invite(creator.state)
        members, certs = await _run_with_20_revocations(router, creator, creator.key_pair)
        saved = creator.state.revocations.encode()  # what the node writes (revocation_file.py)
        assert len(saved) < 20 * 400  # compact: the signed envelopes, nothing else
        # the creator restarts with nobody to ask: its saved set is all it has
        restarted = Replica(router, creator.state.manifest_envelope, creator.state.run_id)
        restarted.state.revocations.load(saved)
        for key, peer in members[:20]:
            assert not restarted.offer(key, peer, certs[peer])
        assert restarted.state.revocations.revoked_peers() == {p for _, p in members[:20]}


async def test_two_replicas_agree_on_who_is_certified():
    async with open_memory_swarm(1, config=QUIET) as (router, (creator,)):
        _invite(creator.state)
        members, certs = await _run_with_20_revocations(router, creator, creator.key_pair)
        joiner = Replica(router, creator.state.manifest_envelope, creator.state.run_id)
        assert await joiner.replicator.bootstrap([creator.peer_id])
        for key, peer in members:  # everyone tries both replicas with its certificate
            joiner.offer(key, peer, certs[peer])
            creator.replicator.handle_gossip(
                peer, _member_delta(key, peer, creator.state.run_id, certs[peer])
            )
        certified = creator.state.admission.certified()
        assert certified == joiner.admission.certified()
        assert certified == {creator.peer_id} | {p for _, p in members[20:]}
        assert creator.state.revocations.digest() == joiner.state.revocations.digest()


async def test_a_non_issuers_revocation_is_refused_and_its_signer_penalised():
    async with open_memory_swarm(1, config=QUIET) as (router, (creator,)):
        _invite(creator.state)
        run_id = creator.state.run_id
        victim = Replica(router, creator.state.manifest_envelope, run_id)
        member_key, member = _peer()
        target_key, target = _peer()
        member_cert = _certify(creator.key_pair, run_id, member)
        assert victim.offer(member_key, member, member_cert)
        assert victim.offer(target_key, target, _certify(creator.key_pair, run_id, target))
        stranger_key, stranger = _peer()
        now = wall_clock_ms()
        forged_admin = _certify(stranger_key, run_id, stranger, role="admin")  # self-signed
        revocations = (
            sign_revocation(
                member_key, run_id, target, issued_ms=now, issuer_certificate=member_cert
            ),
            sign_revocation(stranger_key, run_id, target, issued_ms=now),
            sign_revocation(
                stranger_key, run_id, target, issued_ms=now, issuer_certificate=forged_admin
            ),
        )
        request = SyncRequest(run=run_id, has_manifest=True, summary={}, revocations=revocations)
        victim.replicator.handle_sync(creator.peer_id, request)  # handed over by an honest peer
        assert len(victim.state.revocations) == 0 and victim.admission.admits(target)
        assert target in victim.state.members()
        assert victim.penalties.count(member) == 1 and victim.penalties.count(stranger) == 2
        assert creator.peer_id not in victim.penalties  # the messenger is not blamed


async def test_an_admins_revocation_stands_until_the_creator_revokes_the_admin():
    async with open_memory_swarm(1, config=QUIET) as (router, (creator,)):
        _invite(creator.state)
        run_id = creator.state.run_id
        admin_key, admin = _peer()
        admin_cert = _certify(creator.key_pair, run_id, admin, role="admin")
        target_key, target = _peer()
        target_cert = _certify(creator.key_pair, run_id, target)
        by_admin = sign_revocation(
            admin_key, run_id, target, issued_ms=wall_clock_ms(), issuer_certificate=admin_cert
        )
        replica = Replica(router, creator.state.manifest_envelope, run_id)
        replica.replicator.handle_sync(
            creator.peer_id,
            SyncRequest(run=run_id, has_manifest=True, summary={}, revocations=(by_admin,)),
        )
        assert not replica.offer(target_key, target, target_cert)  # revoked by the admin
        creator.replicator.writer.revoke(admin)  # a rogue admin: its revocations are void
        assert await replica.replicator.sync_with(creator.peer_id) is not None
        assert replica.state.revocations.revoked_peers() == {admin}
        assert replica.offer(target_key, target, target_cert)


async def test_an_issuers_revocations_are_bounded_with_a_clear_refusal():
    async with open_memory_swarm(1, config=QUIET) as (router, (creator,)):
        _invite(creator.state)
        creator.state.revocations.max_per_issuer = 3
        for _ in range(3):
            creator.replicator.writer.revoke(_peer()[1])
        with pytest.raises(StateFull, match="revoked 3 peers"):
            creator.replicator.writer.revoke(_peer()[1])
        assert len(creator.state.revocations) == 3

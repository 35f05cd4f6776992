"""Admission to a run's state (issue 14): invite runs drop what non-members sign before anything
is stored, counted or forwarded; open runs cannot be locked by a wave of fresh IDs. Every delta
here is really signed by its own key and enters through the replica's intake."""

from __future__ import annotations

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.admission import Admission
from peertrain.crdt.certificates import (
    MemberCertificate,
    open_certificate,
    sign_certificate,
    sign_revocation,
)
from peertrain.crdt.errors import NotAdmitted
from peertrain.crdt.hlc import wall_clock_ms
from peertrain.crdt.replicator import Replicator
from peertrain.crdt.runstate import RunState, StateLimits
from peertrain.crdt.signed import seal_delta
from peertrain.crdt.writer import RunWriter
from peertrain.protocol.errors import ProtocolError
from peertrain.testing.crdt_network import MemoryRouter, new_run

HOUR_MS = 3_600_000


def _peer():
    key = create_new_key_pair()
    return key, ID.from_pubkey(key.public_key).to_base58()


class Replica:
    """A victim's replica: a real Replicator whose intake every envelope goes through."""

    def __init__(self, mode: str, *, max_owners: int = 1024) -> None:
        self.creator_key, self.creator = _peer()
        self.run_id, manifest = new_run(self.creator_key)
        self.state = RunState(self.run_id, limits=StateLimits(max_owners=max_owners))
        self.state.accept_manifest(manifest)
        self.state.admission = Admission(run_id=self.run_id, creator=self.creator, mode=mode)
        key, _ = _peer()
        endpoint = MemoryRouter().endpoint("victim")
        self.penalties: list[str] = []
        self.replicator = Replicator(
            state=self.state,
            key_pair=key,
            pubsub=endpoint,
            exchange=endpoint,
            on_penalty=lambda p: self.penalties.append(p.peer),
        )

    def envelope(self, key, peer: str, *, certificate: bytes = b"", checkpoint: int | None = None):
        """`peer`'s own signed delta: its member record (and a checkpoint announcement)."""
        writer = RunWriter(RunState(self.run_id), peer)
        doc = writer.announce(role="diloco", addrs=[], lease_ms=60_000, certificate=certificate)
        if checkpoint is not None:
            doc.merge(writer.provide_checkpoint(checkpoint, b"\x01" * 32))
        return seal_delta(key, peer, run_id=self.run_id, seq=wall_clock_ms(), doc=doc).raw

    def certify(self, peer: str, *, role: str = "member", issuer=None, expires_ms=None) -> bytes:
        cert = MemberCertificate(
            run=self.run_id,
            peer=peer,
            role=role,
            expires_ms=expires_ms or wall_clock_ms() + HOUR_MS,
        )
        return sign_certificate(issuer or self.creator_key, cert)

    def send(self, key, peer: str, **kwargs) -> bool:
        return self.replicator.handle_gossip(peer, self.envelope(key, peer, **kwargs))


def test_an_invite_run_drops_a_strangers_deltas_before_storing_or_counting_them():
    run = Replica("invite")
    key, stranger = _peer()
    assert run.replicator.validate_gossip(stranger, run.envelope(key, stranger)) is False
    assert not run.send(key, stranger, checkpoint=10**9)
    assert stranger not in run.state.owners()
    assert run.state.checkpoints() == {}
    assert run.replicator.statistics().non_members == 2
    assert run.replicator.statistics().applied == 0
    assert stranger in run.penalties
    assert run.replicator.proofs.envelopes(stranger) == []  # nothing kept to forward


def test_a_certified_member_is_admitted_with_the_certificate_in_its_own_record():
    run = Replica("invite")
    key, member = _peer()
    assert run.send(key, member, certificate=run.certify(member), checkpoint=3)
    assert member in run.state.members()
    assert run.state.checkpoints()[3] == {b"\x01" * 32: frozenset({member})}


def test_only_the_creator_or_an_admin_it_named_may_certify_and_revoke():
    run = Replica("invite")
    admin_key, admin = _peer()
    stranger_key, _ = _peer()
    key, member = _peer()
    # a certificate signed by a stranger admits nobody
    assert not run.send(key, member, certificate=run.certify(member, issuer=stranger_key))
    assert member not in run.state.owners()
    # the admin's own certificate (from the creator) makes its certificates count
    assert run.send(admin_key, admin, certificate=run.certify(admin, role="admin"))
    assert run.send(key, member, certificate=run.certify(member, issuer=admin_key))
    assert member in run.state.members()
    # a member cannot certify anyone
    other_key, other = _peer()
    assert not run.send(other_key, other, certificate=run.certify(other, issuer=key))
    # revocation by a stranger is refused; by the admin it ends the membership
    with pytest.raises(NotAdmitted):
        run.state.admission.revoke(sign_revocation(stranger_key, run.run_id, member))
    run.state.admission.revoke(sign_revocation(admin_key, run.run_id, member))
    assert not run.send(key, member, certificate=run.certify(member, issuer=admin_key))


def test_an_expired_certificate_admits_nobody():
    run = Replica("invite")
    key, member = _peer()
    expired = run.certify(member, expires_ms=wall_clock_ms() - 1)
    assert not run.send(key, member, certificate=expired)
    assert member not in run.state.owners()


def test_certificates_are_checked_strictly():
    run = Replica("invite")
    _, member = _peer()
    raw = run.certify(member, role="anchor")
    cert = open_certificate(raw, run.run_id)
    assert (cert.peer, cert.role, cert.issuer) == (member, "anchor", run.creator)
    with pytest.raises(ProtocolError):
        open_certificate(raw, "another-run")
    tampered = bytearray(raw)
    tampered[-70] ^= 1
    with pytest.raises(ProtocolError):
        open_certificate(bytes(tampered), run.run_id)
    with pytest.raises(ProtocolError):
        open_certificate(raw + b"\x00" * 600, run.run_id)


def test_1024_fake_owners_cannot_block_an_honest_newcomer_of_an_open_run():
    run = Replica("open", max_owners=1024)
    fakes = [_peer() for _ in range(1024)]
    for key, fake in fakes:
        assert run.send(key, fake)
    assert len(run.state.owners()) == 1024
    newcomer_key, newcomer = _peer()
    assert run.send(newcomer_key, newcomer, checkpoint=1)
    assert newcomer in run.state.members()
    # the wave goes on: the newcomer is the youngest, the oldest fakes make room first
    for key, fake in [_peer() for _ in range(200)]:
        assert run.send(key, fake)
    assert newcomer in run.state.members()
    assert len(run.state.owners()) == 1024
    # the ones the training layer counted in a round, and the anchors, are never pushed out
    run.state.vouch(newcomer)
    assert run.send(run.creator_key, run.creator)
    for key, fake in [_peer() for _ in range(1100)]:
        run.send(key, fake)
    assert {newcomer, run.creator} <= set(run.state.members())


def test_installing_an_invite_policy_forgets_the_non_members_stored_before():
    run = Replica("invite")
    policy = run.state.admission
    run.state.admission = None  # a replica that replicated before it knew the run's policy
    member_key, member = _peer()
    stranger_key, stranger = _peer()
    assert run.send(member_key, member, certificate=run.certify(member), checkpoint=2)
    assert run.send(stranger_key, stranger, checkpoint=2)
    assert run.state.install_admission(policy) == [stranger]
    assert run.state.owners() == {member}
    assert run.state.checkpoints()[2] == {b"\x01" * 32: frozenset({member})}
    assert stranger in run.state.collect()  # so the replicator drops its proofs too


def test_a_revocation_travels_as_the_issuers_signed_delta_and_forgets_the_member():
    """`run revoke`: the creator's writer revokes; a replica that receives the creator's delta
    forgets the member and drops what it signs next. A stranger's revocation vote does nothing."""
    run = Replica("invite")
    key, member = _peer()
    assert run.send(key, member, certificate=run.certify(member), checkpoint=2)
    stranger_key, stranger = _peer()
    run.send(stranger_key, stranger)  # refused: a non-member's votes never reach the state
    creator = RunWriter(RunState(run.run_id), run.creator)  # the creator revokes
    doc = creator.announce(role="diloco", addrs=[], lease_ms=60_000)
    doc.merge(creator.revoke(member))
    raw = seal_delta(run.creator_key, run.creator, run_id=run.run_id, seq=wall_clock_ms(), doc=doc)
    assert run.replicator.handle_gossip(run.creator, raw.raw)
    assert member not in run.state.owners() and run.state.checkpoints() == {}
    assert not run.state.admission.admits(member)
    assert not run.send(key, member, certificate=run.certify(member), checkpoint=3)
    assert member in run.penalties


def test_a_revocation_signed_by_a_plain_member_revokes_nobody():
    run = Replica("invite")
    key, member = _peer()
    other_key, other = _peer()
    assert run.send(key, member, certificate=run.certify(member))
    assert run.send(other_key, other, certificate=run.certify(other))
    writer = RunWriter(RunState(run.run_id), member)
    doc = writer.announce(role="diloco", addrs=[], lease_ms=60_000)
    doc.merge(writer.revoke(other))
    raw = seal_delta(key, member, run_id=run.run_id, seq=wall_clock_ms() + 1, doc=doc)
    assert run.replicator.handle_gossip(member, raw.raw)
    assert other in run.state.members() and run.state.admission.admits(other)

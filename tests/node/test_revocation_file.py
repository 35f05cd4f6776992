"""An invite run's revocations survive a restart (issue 29, item 4): the node writes the run
state's revocation set beside the run's files, atomically, each time it grows, and a restarted
session loads it before it hears from anyone."""

from __future__ import annotations

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.crdt.admission import Admission
from peertrain.crdt.runstate import RunState
from peertrain.crdt.writer import RunWriter
from peertrain.node.runs.revocation_file import REVOCATIONS_FILE, keep_revocations
from peertrain.testing.crdt_network import new_run


def _replica(run_id: str, manifest: bytes, creator: str, directory) -> RunState:
    state = RunState(run_id)
    state.accept_manifest(manifest)
    keep_revocations(state, directory)  # as RunSession does, before the driver installs policy
    state.install_admission(Admission(run_id=run_id, creator=creator, mode="invite"))
    return state


def test_a_restarted_session_still_rejects_every_revoked_peer(tmp_path):
    key = create_new_key_pair()
    creator = ID.from_pubkey(key.public_key).to_base58()
    run_id, manifest = new_run(key)
    state = _replica(run_id, manifest, creator, tmp_path)
    writer = RunWriter(state, creator, key_pair=key)
    revoked = [ID.from_pubkey(create_new_key_pair().public_key).to_base58() for _ in range(20)]
    for peer in revoked:
        writer.revoke(peer)
    assert (tmp_path / REVOCATIONS_FILE).stat().st_size < 20 * 400
    assert not list(tmp_path.glob(".tmp-*"))  # written atomically, nothing left behind
    again = _replica(run_id, manifest, creator, tmp_path)  # the restart: nobody to ask yet
    assert all(again.admission.revoked(peer) for peer in revoked)
    assert again.revocations.digest() == state.revocations.digest()


def test_a_torn_file_is_logged_and_the_run_goes_on(tmp_path, caplog):
    key = create_new_key_pair()
    run_id, manifest = new_run(key)
    (tmp_path / REVOCATIONS_FILE).write_bytes(b"\x93\xc4")
    state = _replica(run_id, manifest, ID.from_pubkey(key.public_key).to_base58(), tmp_path)
    assert len(state.revocations) == 0
    assert "do not open" in caplog.text

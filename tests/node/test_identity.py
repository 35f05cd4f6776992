"""Identity: an Ed25519 key in the home, 0600, created once, refused when exposed or corrupt."""

from __future__ import annotations

import re
import stat

import pytest
from peertrain.node.errors import IdentityError
from peertrain.node.net.identity import KEY_FILE, load_or_create_identity
from peertrain.node.net.names import friendly_name


def test_first_use_creates_a_private_key_file(tmp_path):
    home = tmp_path / "home"
    identity = load_or_create_identity(home)
    key = home / KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) & 0o077 == 0
    assert identity.peer_id.to_base58().startswith("12D3KooW")  # Ed25519 peer IDs


def test_the_same_home_gives_the_same_identity(tmp_path):
    assert load_or_create_identity(tmp_path).peer_id == load_or_create_identity(tmp_path).peer_id


def test_a_key_readable_by_others_is_refused_with_the_fix(tmp_path):
    load_or_create_identity(tmp_path)
    (tmp_path / KEY_FILE).chmod(0o644)
    with pytest.raises(IdentityError, match="chmod 600"):
        load_or_create_identity(tmp_path)


def test_a_corrupt_key_is_refused_clearly(tmp_path):
    (tmp_path / KEY_FILE).write_bytes(b"not a key")
    (tmp_path / KEY_FILE).chmod(0o600)
    with pytest.raises(IdentityError, match="not a valid identity key"):
        load_or_create_identity(tmp_path)


def test_friendly_names_are_three_words_and_stable():
    peer = "12D3KooWHyDhHbr6UzPuPSf4dofhgr5e7RX3Sx8arWp8GLiJkg2Y"
    name = friendly_name(peer)
    assert re.fullmatch(r"[a-z]+-[a-z]+-[a-z]+", name)
    assert name == friendly_name(peer) == "lively-humble-lichen"  # frozen word lists
    names = {friendly_name(f"peer-{i}") for i in range(2000)}
    assert len(names) > 1950  # few collisions among 2000 peers

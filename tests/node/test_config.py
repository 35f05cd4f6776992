"""Config: flag > env > file > default, validated with errors that name the key and the fix."""

from __future__ import annotations

import pytest
from peertrain.node.config import control_socket_path, load_config
from peertrain.node.errors import NodeConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for key in list(os.environ):
        if key.startswith("PEERTRAIN_"):
            monkeypatch.delenv(key)


def write(home, text):
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(text)


def test_defaults(tmp_path):
    config = load_config(tmp_path)
    assert config.listen == ("/ip4/0.0.0.0/tcp/0",)
    assert config.bootstrap == () and config.psk is None


def test_flag_beats_env_beats_file_beats_default(tmp_path, monkeypatch):
    write(
        tmp_path,
        'log_level = "warning"\nlog_format = "json"\nlisten = ["/ip4/127.0.0.1/tcp/4001"]\n',
    )
    assert load_config(tmp_path).log_level == "warning"
    monkeypatch.setenv("PEERTRAIN_LOG_LEVEL", "error")
    config = load_config(tmp_path)
    assert (
        config.log_level == "error" and config.log_format == "json"
    )  # env over file, file over default
    assert load_config(tmp_path, {"log_level": "debug"}).log_level == "debug"
    assert load_config(tmp_path, {"log_level": None}).log_level == "error"  # None = flag not given


def test_list_options_from_env_are_comma_separated(tmp_path, monkeypatch):
    monkeypatch.setenv("PEERTRAIN_LISTEN", "/ip4/127.0.0.1/tcp/1,/ip4/127.0.0.1/tcp/2")
    assert load_config(tmp_path).listen == ("/ip4/127.0.0.1/tcp/1", "/ip4/127.0.0.1/tcp/2")


def test_unknown_key_names_the_key_and_the_nearest_match(tmp_path):
    write(tmp_path, 'bootstrapp = ["x"]\n')
    with pytest.raises(
        NodeConfigError, match=r"unknown key `bootstrapp`; did you mean `bootstrap`"
    ):
        load_config(tmp_path)


def test_invalid_toml_says_which_file(tmp_path):
    write(tmp_path, "listen = [\n")
    with pytest.raises(NodeConfigError, match="config.toml: not valid TOML"):
        load_config(tmp_path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"psk": "abc"}, "64 hex characters"),
        ({"listen": ["not-an-addr"]}, "not a multiaddr"),
        ({"bootstrap": ["/ip4/127.0.0.1/tcp/4001"]}, "lacks the peer ID"),
        ({"log_format": "xml"}, "log_format"),
        ({"dial_timeout": "soon"}, "number of seconds"),
        ({"sample_grid_every": -1}, "sample_grid_every"),
    ],
)
def test_bad_values_name_the_key(tmp_path, overrides, message):
    with pytest.raises(NodeConfigError, match=message):
        load_config(tmp_path, overrides)


def test_home_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PEERTRAIN_HOME", str(tmp_path / "h"))
    assert load_config().home == tmp_path / "h"


def test_control_socket_falls_back_when_the_home_path_is_too_long(tmp_path):
    deep = tmp_path / ("x" * 120)
    path = control_socket_path(deep)
    assert len(str(path)) < 100 and path == control_socket_path(deep)
    assert control_socket_path(tmp_path) == tmp_path / "control.sock"

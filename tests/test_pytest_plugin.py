"""A user's own test suite gets peertrain's fixtures from the installed plugin, no conftest."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

PLUGIN = "peertrain.testing.plugin"
ROOT = Path(__file__).resolve().parents[1]

USER_TEST = """
import pytest
import trio

@pytest.mark.trio
async def test_two_nodes_meet(test_swarm):
    from peertrain.testing import wait_until

    async with test_swarm(2) as (a, b):
        await wait_until(lambda: len(a.status()["peers"]) == 1, timeout=10, what="a meets b")

@pytest.mark.trio
async def test_a_memory_network_carries_a_message(memory_router):
    a, b = memory_router.endpoint("a"), memory_router.endpoint("b")
    inbox = await b.subscribe("topic")
    await a.publish("topic", b"hello")
    with trio.fail_after(5):
        assert (await inbox.receive()).data == b"hello"
"""


def plugin_args() -> list[str]:
    """How the child pytest gets the plugin. Normally from the installed entry point; but the
    installed metadata may be stale (an editable install made before the entry point existed),
    and then `-p` loads it by module name. Not both: with the entry point installed, `-p` would
    register the module a second time, which pytest refuses."""
    installed = any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", PLUGIN]


def test_a_users_tests_outside_the_repository_get_the_fixtures(tmp_path):
    (tmp_path / "test_user.py").write_text(USER_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args(), "."],
        cwd=tmp_path,  # no conftest and no pyproject of ours anywhere above
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout


def test_the_plugin_is_declared_as_the_peertrain_pytest11_entry_point():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"peertrain": PLUGIN}

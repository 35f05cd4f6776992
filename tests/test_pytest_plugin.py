"""A user's own test suite gets peertrain's fixtures from the installed plugin, no conftest."""

from __future__ import annotations

import subprocess
import sys

USER_TEST = '''
import pytest

@pytest.mark.trio
async def test_two_nodes_meet(test_swarm):
    from peertrain.testing import wait_until

    async with test_swarm(2) as (a, b):
        await wait_until(lambda: len(a.status()["peers"]) == 1, timeout=10, what="a meets b")
'''


def test_a_users_tests_outside_the_repository_get_the_swarm_fixture(tmp_path):
    (tmp_path / "test_user.py").write_text(USER_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,  # no conftest and no pyproject of ours anywhere above
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout

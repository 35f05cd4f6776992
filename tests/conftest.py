"""Shared fixtures: real in-process nodes and real CLI daemons (see peertrain.testing)."""

from __future__ import annotations

import pytest
from peertrain.testing import cli_daemons, open_test_swarm


@pytest.fixture
def test_swarm():
    """`async with test_swarm(3) as nodes:` — in-process daemons on loopback."""
    return open_test_swarm


@pytest.fixture
def daemons(tmp_path):
    """`with daemons(3) as ds:` — CLI daemon processes with homes under tmp_path."""

    def start(n, **kwargs):
        return cli_daemons(n, tmp_path, **kwargs)

    return start


LOG_TAIL_LINES = 60


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """When a test fails, attach the tail of every daemon log under its tmp_path: CI prints
    only the report, and a flaky multi-process test is undiagnosable without the daemons' view."""
    outcome = yield
    report = outcome.get_result()
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if not report.failed or tmp_path is None:
        return
    for log in sorted(tmp_path.rglob("daemon.log"))[:8]:
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        report.sections.append((f"daemon log {log.relative_to(tmp_path)}", "\n".join(lines)))

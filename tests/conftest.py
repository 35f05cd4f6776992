"""The suite's own hooks. The swarm fixtures come from peertrain's pytest plugin
(peertrain.testing.plugin), which the installed entry point loads; registered here too when
the entry point is absent (a checkout on PYTHONPATH without `pip install -e .`)."""

from __future__ import annotations

import pytest


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("peertrain-testing"):
        from peertrain.testing import plugin

        config.pluginmanager.register(plugin, "peertrain-testing")


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

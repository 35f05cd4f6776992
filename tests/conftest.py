"""The suite's fixtures and hooks come from peertrain's pytest plugin (peertrain.testing.plugin),
which the installed `pytest11` entry point loads. A checkout on PYTHONPATH whose installed
metadata predates the entry point (or names it differently) gets it registered here, once:
pytest refuses a plugin module registered twice, so the check is by module, not by name."""

from __future__ import annotations

from peertrain.testing import plugin


def pytest_configure(config):
    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, "peertrain")


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs two workers), every test that starts real processes
    (marked `slow`) runs on one worker, one after another, while the other worker takes the
    in-process tests: two multi-daemon tests at once on two cores starve each other's daemons
    past their timeouts, one of them beside in-process tests is what the suite's load-robust
    timings were measured against (a CPU burner on one core: 1233 passed)."""
    import pytest

    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.xdist_group("processes"))

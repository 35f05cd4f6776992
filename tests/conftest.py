"""The suite's fixtures and hooks come from peertrain's pytest plugin (peertrain.testing.plugin),
which the installed `pytest11` entry point loads. A checkout on PYTHONPATH whose installed
metadata predates the entry point (or names it differently) gets it registered here, once:
pytest refuses a plugin module registered twice, so the check is by module, not by name."""

from __future__ import annotations

from peertrain.testing import plugin


def pytest_configure(config):
    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, "peertrain")

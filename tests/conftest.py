"""The suite's fixtures and hooks come from peertrain's pytest plugin (peertrain.testing.plugin),
which the installed `pytest11` entry point loads. A checkout on PYTHONPATH whose installed
metadata predates the entry point (or names it differently) gets it registered here, once:
pytest refuses a plugin module registered twice, so the check is by module, not by name."""

from __future__ import annotations

import pytest
from peertrain.testing import plugin


def pytest_configure(config):
    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, "peertrain")


def pytest_collection_modifyitems(config, items):
    """The namespace internet is the machine's: under pytest-xdist (`--dist loadgroup`) every
    test in it runs on one worker, one after another, beside the other worker's tests."""
    for item in items:
        if item.get_closest_marker("netns"):
            item.add_marker(pytest.mark.xdist_group("netns"))

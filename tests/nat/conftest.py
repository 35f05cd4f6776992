"""NAT tests build a test internet in network namespaces once per session (root only).

The helpers live in `netns.py` beside this file; tests get that module from the `nat_world`
fixture (the tests folder is not a package).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _load_helpers():
    spec = importlib.util.spec_from_file_location(
        "peertrain_nat_netns", Path(__file__).with_name("netns.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


netns = _load_helpers()


@pytest.fixture(scope="session")
def nat_world():
    reason = netns.why_unavailable()
    if reason:
        pytest.skip(reason)
    try:
        netns.setup()
    except RuntimeError as exc:  # e.g. a kernel without nf_tables: the environment, not our code
        netns.teardown()
        pytest.skip(f"cannot build the NAT test internet here: {exc}")
    try:
        yield netns
    finally:
        netns.teardown()

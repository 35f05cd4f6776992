"""NAT tests build a test internet in network namespaces once per session (root only).

The helpers are `peertrain.testing.netns`; tests get that module from the `nat_world` fixture.
"""

from __future__ import annotations

import pytest
from peertrain.testing import netns


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

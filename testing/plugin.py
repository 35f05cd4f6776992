"""The pytest plugin: peertrain's swarm fixtures in any project's tests, with no conftest copying.

Registered as the `peertrain` entry point (`pytest11`), so `pip install peertrain` is all a user
needs:

    async def test_my_model_trains_in_a_group(test_swarm):
        async with test_swarm(3) as nodes:
            ...

    def test_my_cli_flow(daemons):
        with daemons(2) as (first, second):
            ...

Fixtures: `test_swarm` (in-process daemons), `daemons` (CLI processes), `dht_swarm` (DHT nodes
on seeded hosts), `memory_router` (a running seeded in-memory network), `stream_pair` (byte
streams), `one_torch_thread` (a module's tiny models on one torch thread). A failing test gets
the tail of every daemon log under its tmp_path in its report.
Async tests need pytest-trio (`trio_mode = true` or `@pytest.mark.trio`).
"""

from __future__ import annotations

import random

import pytest

from .byte_streams import byte_stream_pair

LOG_TAIL_LINES = 60


@pytest.fixture
def test_swarm():
    """`async with test_swarm(3) as nodes:` — in-process daemons on loopback, node i > 0
    bootstrapped from node 0."""
    from .swarms import open_test_swarm

    return open_test_swarm


@pytest.fixture
def daemons(tmp_path):
    """`with daemons(3) as ds:` — `peertrain` daemon processes with homes under tmp_path."""
    from .processes import cli_daemons

    def start(n, **kwargs):
        return cli_daemons(n, tmp_path, **kwargs)

    return start


@pytest.fixture
def dht_swarm(request):
    """`async with dht_swarm(16, config=...) as swarm:` — listening DHT nodes; call `join_all`.
    Peer IDs are seeded by the test's ID and `seed=`, so XOR geometry repeats run to run."""
    from .dht_swarm import dht_host, open_dht_swarm

    def start(n, **kwargs):
        rng = random.Random(f"{request.node.nodeid}/{kwargs.get('seed', 0)}")
        return open_dht_swarm(n, lambda: dht_host(rng), **kwargs)

    return start


@pytest.fixture
async def memory_router():
    """A running `MemoryRouter` without faults (build your own with `open_memory_router(faults=
    ...)`): `memory_router.endpoint(peer)` is a CRDT transport, `.group(topic)` an update gossip
    transport."""
    from .memory_router import open_memory_router

    async with open_memory_router() as router:
        yield router


@pytest.fixture
def stream_pair():
    """`a, b = stream_pair()`: two connected in-memory byte streams; `lockstep=True` for no
    buffer."""
    return byte_stream_pair


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module (`pytestmark = pytest.mark.usefixtures(...)`): tiny
    models run faster so, and OpenMP's spinning on a busy two-core host took 50× as long."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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

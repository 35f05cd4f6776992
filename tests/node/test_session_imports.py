"""A run session imports the training code (torch) in a worker thread: the daemon's event loop
keeps serving its peers meanwhile (node/runs/session.py, `import_off_the_loop`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

from peertrain.node.api.control import call_sync
from peertrain.testing import cli_daemons

SCRIPT = textwrap.dedent(
    """
    import sys, time, trio
    from peertrain.node.runs.session import DILOCO_MODULES, import_off_the_loop

    assert "torch" not in sys.modules, "the session module itself must not import torch"

    async def main():
        gaps = []
        async def tick():
            last = time.perf_counter()
            while True:
                await trio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            started = time.perf_counter()
            await import_off_the_loop(DILOCO_MODULES)
            took = time.perf_counter() - started
            nursery.cancel_scope.cancel()
        assert "torch" in sys.modules
        print(f"{took:.3f} {len(gaps)} {max(gaps):.3f}")

    trio.run(main)
    """
)


def test_importing_the_training_code_leaves_the_event_loop_running():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=True
    )
    took, ticks, longest_gap = done.stdout.split()
    # the loop ran all along: it ticked during the import, and never stood still for most of it
    assert int(ticks) >= 3, done.stdout
    assert float(longest_gap) < 0.8 * float(took), done.stdout


def test_creating_a_run_leaves_the_daemon_answering(tmp_path):
    # reading the spec imported the swarm packages (torch) on the event loop: a lone creator's
    # daemon did not answer `status` for 5.5 s of a 15 s create at load 12 (1.0 s of 12 after)
    spec = {"model": "mlp", "dataset": "digits", "batch_size": 8, "inner_steps": 2}
    with cli_daemons(1, tmp_path) as (daemon,):
        waits: list[float] = []
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                started = time.monotonic()
                daemon.status(timeout=60)
                waits.append(time.monotonic() - started)
                time.sleep(0.05)

        poller = threading.Thread(target=poll)
        poller.start()
        started = time.monotonic()
        try:
            params = {"name": "imports", "mode": "diloco", "spec": spec}
            call_sync(daemon.control_socket, "run.create", params, timeout=240)
        finally:
            took = time.monotonic() - started
            done.set()
            poller.join()
    assert len(waits) >= 3 and max(waits) < 0.2 * took, (took, sorted(waits)[-3:])


FREEZE = textwrap.dedent(
    """
    import gc, trio
    from peertrain.node.runs.session import DILOCO_MODULES, import_off_the_loop

    assert gc.get_freeze_count() == 0
    trio.run(import_off_the_loop, DILOCO_MODULES)
    print(gc.get_freeze_count())
    """
)


def test_what_the_training_code_loaded_is_out_of_the_collectors_full_passes():
    """Torch and the training code are ~250,000 objects that live as long as the daemon: left
    to the cyclic collector, its full passes walked them on the event loop mid-round (an update
    round's loop CPU 0.58 -> 0.89-1.29 s). In a fresh process, as a daemon imports them."""
    done = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) > 100_000


DAEMON_FREEZE = textwrap.dedent(
    """
    import gc, trio
    from peertrain.testing import open_test_swarm

    async def main():
        assert gc.get_freeze_count() == 0
        async with open_test_swarm(1):
            print(gc.get_freeze_count())

    trio.run(main)
    """
)


def test_a_serving_daemon_has_its_loaded_code_out_of_the_collectors_passes():
    """libp2p, trio and ours, once the daemon serves (the DHT benchmark's slowest first stores
    at 32 nodes: 277-283 ms with the collector walking them, 63-77 ms without)."""
    done = subprocess.run([sys.executable, "-c", DAEMON_FREEZE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) > 50_000

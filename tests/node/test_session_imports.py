"""A run session imports the training code (torch) in a worker thread: the daemon's event loop
keeps serving its peers meanwhile (node/runs/session.py, `import_off_the_loop`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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

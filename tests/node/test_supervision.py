"""A failing service is logged, shown, retried with backoff, quarantined when it loops — and the
nursery around it (the daemon) goes on."""

from __future__ import annotations

import pytest
import trio
from peertrain.node.supervision import Supervisor


class Flaky:
    """Serves, then fails `failures` times (once started), then serves for good."""

    def __init__(self, failures: int, *, before_start: bool = False):
        self.failures, self.before_start, self.starts = failures, before_start, 0

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED):
        self.starts += 1
        if self.before_start and self.starts <= self.failures:
            raise ValueError(f"cannot start #{self.starts}")
        task_status.started(f"started #{self.starts}")
        if self.starts <= self.failures:
            raise RuntimeError(f"bug #{self.starts}")
        await trio.sleep_forever()


async def test_a_failing_service_is_restarted_with_its_error_shown(autojump_clock, nursery):
    supervisor = Supervisor(backoff_min=1, backoff_max=4)
    flaky = Flaky(failures=2)
    assert await supervisor.start(nursery, "flaky", flaky.run) == "started #1"
    await trio.sleep(10)
    [health] = supervisor.status()
    assert health["state"] == "running" and health["restarts"] == 2 and flaky.starts == 3
    assert health["error"] == "RuntimeError: bug #2"


async def test_a_crash_loop_is_quarantined_not_spun(autojump_clock, nursery):
    supervisor = Supervisor(max_failures=3, window=60, backoff_min=1)
    flaky = Flaky(failures=1000)
    await supervisor.start(nursery, "loop", flaky.run)
    await trio.sleep(120)
    [health] = supervisor.status()
    assert health["state"] == "quarantined" and flaky.starts == 3


async def test_a_service_that_cannot_start_is_retried_in_the_background(autojump_clock, nursery):
    supervisor = Supervisor(backoff_min=1)
    flaky = Flaky(failures=1, before_start=True)
    assert await supervisor.start(nursery, "late", flaky.run) is None
    await trio.sleep(5)
    assert supervisor.status()[0]["state"] == "running" and flaky.starts == 2


async def test_a_critical_service_that_cannot_start_fails_its_starter(nursery):
    supervisor = Supervisor()
    with pytest.raises(ValueError, match="cannot start #1"):
        await supervisor.start(nursery, "host", Flaky(1, before_start=True).run, critical=True)


async def test_cancellation_still_stops_a_supervised_service(autojump_clock):
    supervisor = Supervisor()
    with trio.move_on_after(5):
        async with trio.open_nursery() as nursery:
            await supervisor.start(nursery, "forever", Flaky(0).run)
    assert supervisor.status()[0]["state"] == "running"  # it was running when cancelled

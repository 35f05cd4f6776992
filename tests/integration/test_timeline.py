"""The one-task call scheduler under the memory router and the scale simulation."""

import trio
from peertrain.testing.timeline import Timeline


async def _run_calls(
    timeline: Timeline, schedule: list[tuple[float, str]]
) -> list[tuple[float, str]]:
    made: list[tuple[float, str]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(timeline.run)
        start = trio.current_time()
        for delay, name in schedule:
            timeline.at(
                start + delay, lambda n: made.append((trio.current_time() - start, n)), name
            )
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    return made


async def test_calls_are_made_when_due_in_time_order_and_ties_in_scheduling_order(autojump_clock):
    schedule = [(2.0, "late"), (0.5, "first"), (1.0, "tie-a"), (1.0, "tie-b"), (0.0, "now")]
    for yield_each in (True, False):
        timeline = Timeline(yield_each=yield_each)
        made = await _run_calls(timeline, schedule)
        assert [name for _, name in made] == ["now", "first", "tie-a", "tie-b", "late"]
        for at, name in made:
            assert at == dict((n, d) for d, n in schedule)[name]  # MockClock: exact times
        assert timeline.calls == 5 and len(timeline) == 0


async def test_a_call_scheduled_ahead_of_the_waited_one_wakes_the_loop(autojump_clock):
    timeline = Timeline()
    made: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(timeline.run)
        timeline.at(trio.current_time() + 100, made.append, "far")
        await trio.sleep(1)
        timeline.at(trio.current_time() + 1, made.append, "near")
        await trio.sleep(2)
        assert made == ["near"]
        nursery.cancel_scope.cancel()

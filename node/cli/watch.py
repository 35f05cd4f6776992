"""CLI commands that wait on the daemon: `status --watch` and `run create/join --follow`.

Both poll `status` on the control socket and draw it: redrawn in place with progress bars on a
terminal (rich Live), as plain lines in a pipe or a log, where a follower prints when the round
or phase changes or every `PIPE_EVERY` s, so that a log is readable and still shows life.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..api.history import runs_of
from .progress_view import headline, progress_lines, progress_view

PIPE_EVERY = 5.0
FOLLOW_EVERY = 0.5


def watch_status(socket: Path, every: float, *, as_json: bool) -> int:
    """Redraw the status until Ctrl-C. A daemon that stops answering is said so, and the watch
    goes on (it may be restarting)."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console()
    if not console.is_terminal:
        while True:
            status, text = _ask(socket, every, as_json=as_json)
            lines = [] if as_json or status is None else progress_lines(status)[1:]
            print("\n".join([text, *lines, _footer()]) + "\n", flush=True)
            time.sleep(max(every, 0.2))
    with Live(Text("asking the daemon…"), console=console, auto_refresh=False) as live:
        while True:
            status, text = _ask(socket, every, as_json=as_json)
            live.update(_frame(text, None if as_json else status))
            live.refresh()
            time.sleep(max(every, 0.2))


def _frame(text: str, status: dict[str, Any] | None):
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = [Text(text)]
    if status is not None and runs_of(status):
        parts.append(progress_view(status))
    parts.append(Text(_footer()))
    return Group(*parts)


def _footer() -> str:
    return f"{time.strftime('%H:%M:%S')}  Ctrl-C to stop"


def _ask(socket: Path, every: float, *, as_json: bool) -> tuple[dict[str, Any] | None, str]:
    """(status or None, its text) — the text says why when the daemon does not answer."""
    from ..api.control import call_sync
    from ..errors import ControlError
    from .status_text import render_status

    try:
        status = call_sync(socket, "status", timeout=max(every, 2.0))
    except ControlError as exc:
        return None, f"{exc}\n(retrying every {every:g} s)"
    return status, json.dumps(status, indent=2) if as_json else render_status(status)


def follow_run(socket: Path, run_id: str) -> int:
    """Show the run's progress until it finishes (0), leaves this daemon (1: left, or
    quarantined after failing in a loop), or Ctrl-C (0: the run goes on in the daemon)."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console()
    if not console.is_terminal:
        return _follow_in_pipe(socket, run_id)
    with Live(Text("asking the daemon…"), console=console, auto_refresh=False) as live:
        while (run := _run(socket, run_id)) is not None and not _over(run):
            live.update(progress_view({"run": run}))
            live.refresh()
            time.sleep(FOLLOW_EVERY)
    return _ending(run)


def _follow_in_pipe(socket: Path, run_id: str) -> int:
    last: tuple[Any, ...] = ()
    printed = 0.0
    while (run := _run(socket, run_id)) is not None and not _over(run):
        key = (run["round"], run["phase"], bool((run.get("progress") or {}).get("waiting")))
        if key != last or time.monotonic() - printed >= PIPE_EVERY:
            print("\n".join(progress_lines({"run": run})), flush=True)
            last, printed = key, time.monotonic()
        time.sleep(FOLLOW_EVERY)
    return _ending(run)


def _run(socket: Path, run_id: str) -> dict[str, Any] | None:
    from ..api.control import call_sync

    status = call_sync(socket, "status", timeout=10)
    return next((r for r in runs_of(status) if r["run_id"] == run_id), None)


def _over(run: dict[str, Any]) -> bool:
    return bool(run.get("finished"))


def _ending(run: dict[str, Any] | None) -> int:
    if run is None:
        print("the run is no longer on this daemon", flush=True)
        return 1
    print(headline(run), flush=True)
    return 0 if run.get("finished") else 1

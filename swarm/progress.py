"""Progress of long waits: state downloads, waiting for members, inner steps.

One vocabulary for three readers: `status` carries the figures (`progress` of a run), the daemon
log says them in words every few seconds (and, in JSON logs, as fields), and the CLI draws bars
from the same status. No torch here: `peertrain status` imports this to word its lines.
A download's bytes are read from the transfer when asked (`verified_nbytes`), never pushed per
chunk, so following a download costs it nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

MB = 1e6
LOG_EVERY = 10.0  # seconds between two log lines of the same wait or download
POLL = 1.0


class Transfer(Protocol):
    """What a download in flight shows (protocol/tensors.py's TensorDownload)."""

    verified_nbytes: int

    @property
    def header(self) -> Any: ...


@dataclass
class Download:
    """A download in flight: what it fetches, from how many donors, how far it got."""

    what: str  # "state of round 12"
    donors: int
    started: float = field(default_factory=time.monotonic)
    transfer: Transfer | None = None  # set once the first donor sent the header

    def status(self) -> dict[str, Any]:
        elapsed = time.monotonic() - self.started
        done = self.transfer.verified_nbytes if self.transfer is not None else 0
        total = self.transfer.header.nbytes if self.transfer is not None else 0
        return {
            "what": self.what,
            "bytes_done": done,
            "bytes_total": total,
            "donors": self.donors,
            "elapsed_s": round(elapsed, 1),
            "bytes_per_s": round(done / elapsed) if elapsed > 0 else 0,
        }


@dataclass
class Waiting:
    """Waiting for `need` of something (members, their updates) while `have` are in."""

    what: str  # "members" | "members' updates" | "peers of the run"
    have: int
    need: int
    started: float = field(default_factory=time.monotonic)

    def status(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "have": self.have,
            "need": self.need,
            "elapsed_s": round(time.monotonic() - self.started, 1),
        }


def waiting_text(waiting: dict[str, Any]) -> str:
    more = max(waiting["need"] - waiting["have"], 0)
    return (
        f"waiting for {more} more {waiting['what']} (have {waiting['have']}, "
        f"need {waiting['need']}), {waiting['elapsed_s']:.0f} s"
    )


def download_text(download: dict[str, Any]) -> str:
    total = download["bytes_total"]
    size = f"{download['bytes_done'] / MB:.1f}/{total / MB:.1f} MB" if total else "asking"
    donors = download["donors"]
    return (
        f"downloading {download['what']}: {size}, {download['bytes_per_s'] / MB:.1f} MB/s, "
        f"{donors} donor{'s' if donors != 1 else ''}"
    )


def inner_text(progress: dict[str, Any]) -> str:
    return f"inner steps {progress['inner_step']}/{progress['inner_steps']}"


def progress_events(progress: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, Any]]]:
    """(event, words, fields) for what a run's `progress` shows now: the log lines' content."""
    if progress.get("waiting"):
        waiting = progress["waiting"]
        yield "waiting", waiting_text(waiting), waiting
    if progress.get("download"):
        download = progress["download"]
        yield "download", download_text(download), download
    if progress.get("inner_steps") and progress.get("phase") == "inner steps":
        fields = {k: progress[k] for k in ("round", "inner_step", "inner_steps")}
        yield "inner_steps", f"round {progress['round']}: {inner_text(progress)}", fields


class ProgressLog:
    """Logs a wait or a download when it starts, then every `every` s while it lasts; inner
    steps and the wait for a round's updates only once they have lasted `every` s (a quick
    round says enough in its own line)."""

    def __init__(self, logger: logging.Logger, every: float = LOG_EVERY) -> None:
        self.logger, self.every = logger, every
        self._last: dict[str, float] = {}  # event → when it was last logged (bounded: events)

    def update(self, progress: dict[str, Any], now: float) -> None:
        current = {}
        for event, words, fields in progress_events(progress):
            quiet = event == "inner_steps" or fields.get("what") == "members' updates"
            first = now if quiet else -float("inf")
            current[event] = self._last.get(event, first)
            if now - current[event] >= self.every:
                self.logger.info(words, extra={"event": event, "fields": fields})
                current[event] = now
        self._last = current  # an event that ended starts afresh next time


async def log_progress(
    logger: logging.Logger, progress: Callable[[], dict[str, Any]], every: float = LOG_EVERY
) -> None:
    """Forever: log what `progress()` shows (a run's `progress` status), see ProgressLog."""
    import trio  # here: `peertrain status` words its lines with this module, and stays quick

    lines = ProgressLog(logger, every)
    while True:
        lines.update(progress(), trio.current_time())
        await trio.sleep(POLL)

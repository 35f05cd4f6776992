"""Logging: stdlib `logging` everywhere; rich on a terminal, plain text in pipes, JSON on request.

py-libp2p logs remote misbehaviour (a peer that hangs up mid-handshake) as errors. Those are
not our user's problem, so its loggers are quiet unless `--log-level debug`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from pathlib import Path


class JsonLines(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg (+ exc when present; + event and
    its fields for progress events: waiting, download, download_done, inner_steps,
    round_closed)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        event = getattr(record, "event", None)
        if event is not None:  # a progress event (swarm/progress.py): its figures as fields
            out["event"] = event
            for key, value in (getattr(record, "fields", None) or {}).items():
                out.setdefault(key, value)  # never over ts, level, logger, msg
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


@functools.cache
def rich_console():
    """The terminal console the rich log lines go to; progress bars drawn on it stay below
    them (node/cli/runner.py)."""
    from rich.console import Console

    return Console(stderr=True)


LOG_FILE = "daemon.log"  # in the node's home: what `peertrain logs` prints
LOG_FILE_BYTES = 16 << 20  # rotated at this size, keeping LOG_FILE_BACKUPS older files (.1, .2)
LOG_FILE_BACKUPS = 2


def setup_logging(level: str = "info", fmt: str = "auto", log_file: Path | None = None) -> None:
    """Log records to stderr as `fmt` says and, when `log_file` is given, to that file too (plain
    text, or JSON lines with `fmt` json), unless stderr already is that file (a supervisor
    that sends the daemon's output there: node/cli/processes.py)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    if fmt == "auto":
        fmt = "rich" if sys.stderr.isatty() else "plain"
    handler: logging.Handler
    if fmt == "rich":
        from rich.logging import RichHandler

        handler = RichHandler(show_path=False, rich_tracebacks=False, console=rich_console())
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_formatter(fmt))
    root.addHandler(handler)
    if log_file is not None and not _is_stderr(log_file):
        root.addHandler(_file_handler(log_file, fmt))
    root.setLevel(level.upper())
    quiet = logging.DEBUG if level.lower() == "debug" else logging.CRITICAL
    for noisy in ("libp2p", "multiaddr", "async_service"):
        logging.getLogger(noisy).setLevel(quiet)


def _formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonLines()
    formatter = logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    formatter.converter = time.gmtime
    return formatter


def _file_handler(path: Path, fmt: str) -> logging.Handler:
    from logging.handlers import RotatingFileHandler

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    handler = RotatingFileHandler(
        path, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_BACKUPS, encoding="utf-8"
    )
    handler.setFormatter(_formatter("json" if fmt == "json" else "plain"))
    return handler


def _is_stderr(path: Path) -> bool:
    """Does our stderr already write to `path`?"""
    try:
        ours, theirs = os.fstat(sys.stderr.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):  # no such file yet, or no real stderr
        return False
    return (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino)

"""Logging: stdlib `logging` everywhere; rich on a terminal, plain text in pipes, JSON on request.

py-libp2p logs remote misbehaviour (a peer that hangs up mid-handshake) as errors. Those are
not our user's problem, so its loggers are quiet unless `--log-level debug`.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time


class JsonLines(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg (+ exc when present; + event and
    its fields for progress events: waiting, download, download_done, inner_steps)."""

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


def setup_logging(level: str = "info", fmt: str = "auto") -> None:
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
        if fmt == "json":
            handler.setFormatter(JsonLines())
        else:
            formatter = logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
            formatter.converter = time.gmtime
            handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = logging.DEBUG if level.lower() == "debug" else logging.CRITICAL
    for noisy in ("libp2p", "multiaddr", "async_service"):
        logging.getLogger(noisy).setLevel(quiet)

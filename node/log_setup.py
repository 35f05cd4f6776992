"""Logging: stdlib `logging` everywhere; rich on a terminal, plain text in pipes, JSON on request.

py-libp2p logs remote misbehaviour (a peer that hangs up mid-handshake) as errors. Those are
not our user's problem, so its loggers are quiet unless `--log-level debug`.
"""

from __future__ import annotations

import json
import logging
import sys
import time


class JsonLines(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg (+ exc when present)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(level: str = "info", fmt: str = "auto") -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    if fmt == "auto":
        fmt = "rich" if sys.stderr.isatty() else "plain"
    handler: logging.Handler
    if fmt == "rich":
        from rich.logging import RichHandler

        handler = RichHandler(show_path=False, rich_tracebacks=False)
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

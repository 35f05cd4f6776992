"""`peertrain logs [--follow] [--lines N] [--home H]`: the daemon's log, from its home.

Every daemon writes its log records to `<home>/daemon.log` besides stderr (node/log_setup.py;
rotated at 16 MiB into `daemon.log.1`, `.2`), so a daemon started in the background, by systemd
or by `peertrain swarm local` (which sends its whole output there) has one place to look.
`--follow` keeps printing what is appended, across a rotation, until Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import TextIO

from ..errors import NodeError

POLL_SECONDS = 0.25


def cmd_logs(args: argparse.Namespace) -> int:
    from ..config import NodeConfig, default_home
    from ..log_setup import LOG_FILE

    home = Path(args.home).expanduser() if args.home else default_home()
    path = NodeConfig(home=home).home / LOG_FILE
    if not path.exists():
        raise NodeError(
            f"no log in {home}: its daemon has not run yet (it writes {LOG_FILE} there); "
            "start one with `peertrain node start`, or give the --home it runs in"
        )
    with open(path, encoding="utf-8", errors="replace") as log:
        lines = deque(log, maxlen=args.lines) if args.lines else log
        sys.stdout.writelines(lines)
        sys.stdout.flush()
        if args.follow:
            _follow(path, log)
    return 0


def _follow(path: Path, log: TextIO) -> None:
    """Print what is appended to `path` until Ctrl-C; a rotated or truncated file is reopened
    and read from its start."""
    inode = os.fstat(log.fileno()).st_ino
    while True:
        chunk = log.read()
        if chunk:
            sys.stdout.write(chunk)
            sys.stdout.flush()
            continue
        time.sleep(POLL_SECONDS)
        try:
            now = os.stat(path)
        except FileNotFoundError:  # between the rotation's rename and the new file
            continue
        if now.st_ino != inode or now.st_size < log.tell():
            log.close()
            log = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - swapped in the loop
            inode = os.fstat(log.fileno()).st_ino

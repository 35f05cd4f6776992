"""An invite run's revocations, kept beside the run's state so a restart forgets none.

The run state's `RevocationSet` (crdt/revocations.py) is a grow-only set every replica keeps
whole; here it is loaded when the session starts and written again, atomically
(`write_atomic`), each time it grows. A file that does not open is logged and left for the
run's peers to repair by anti-entropy; it never stops the run.
"""

from __future__ import annotations

import logging
from pathlib import Path

from peertrain.crdt.runstate import RunState
from peertrain.protocol.errors import ProtocolError
from peertrain.swarm.checkpoint_files import write_atomic

REVOCATIONS_FILE = "revocations"

log = logging.getLogger(__name__)


def keep_revocations(state: RunState, directory: Path) -> int:
    """Load the saved revocations into `state` and save them whenever they grow; how many
    were loaded."""
    revocations = state.revocations
    if revocations is None:
        return 0
    path = directory / REVOCATIONS_FILE
    loaded = 0
    if path.exists():
        try:
            loaded = revocations.load(path.read_bytes())
        except ProtocolError as exc:
            log.warning("the saved revocations of run %s do not open: %s", state.run_id, exc)

    def save() -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, revocations.encode())

    revocations.listeners.append(save)
    return loaded

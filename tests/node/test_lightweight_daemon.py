"""The daemon stays light: no torch, numpy or numba until a run needs it; logs can be JSON lines."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from peertrain.node.log_setup import JsonLines


def test_starting_the_daemon_code_does_not_import_torch_numpy_or_numba():
    code = (
        "import sys, peertrain.node.daemon, peertrain.node.cli.main, peertrain.node.cli.runner;"
        "print(sorted(m for m in ('torch', 'numpy', 'numba') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_json_log_lines_are_one_object_per_record():
    record = logging.LogRecord(
        "peertrain.x", logging.WARNING, __file__, 1, "peer %s misbehaved", ("p1",), None
    )
    line = JsonLines().format(record)
    assert json.loads(line) == {
        "ts": round(record.created, 3),
        "level": "warning",
        "logger": "peertrain.x",
        "msg": "peer p1 misbehaved",
    }

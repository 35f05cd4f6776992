"""The attacker's toolkit, importable by the hostile tests (it moves into peertrain.testing)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "hostile_toolkit", Path(__file__).with_name("toolkit.py")
)
toolkit = importlib.util.module_from_spec(_spec)
sys.modules["hostile_toolkit"] = toolkit
_spec.loader.exec_module(toolkit)

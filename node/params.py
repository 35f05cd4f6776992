"""Typed access to control-call parameters: a wrong type is the caller's error, named by key.

Shared by every node sub-layer that registers control methods (services, runs, the daemon), so
it sits beside errors.py. `{"name": [1]}` once created a run named "[1]"; `{"mib": [1]}` ended
the daemon with a TypeError: every method reads its parameters through `param`.
"""

from __future__ import annotations

from typing import Any

from .errors import ControlError


def param(
    params: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...
) -> Any:
    """`params[key]` if it has the type a method expects; ControlError naming the key otherwise.

    bool is refused where int or float is asked (JSON true is not a count), and an int is
    accepted where a float is asked."""
    if key not in params or params[key] is None:
        if default is ...:
            raise ControlError(f"missing parameter {key!r}")
        return default
    value = params[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and bool not in kinds:
        raise ControlError(f"parameter {key!r} must be {_names(kinds)}, not a boolean")
    if not isinstance(value, kinds):
        raise ControlError(f"parameter {key!r} must be {_names(kinds)}, not {type(value).__name__}")
    return value


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kinds)

"""What each control method takes, said once: a small declarative schema per method.

A `Schema` is a tuple of `Field`s (name, type, default or required, bounds, choices). Every
control request's params pass `Schema.check` before any method runs, so a caller's mistake is
answered with one line naming the method and the field (`run.create: parameter 'name' must be
str, not list`), never an "internal error" from deep inside a method: `{"name": [1]}` once
created a run named "[1]", and `{"mib": [1]}` ended the daemon with a TypeError. Unknown fields
are refused too, so a misspelt option (`"timout"`) is said rather than silently ignored.

A JSON null counts as absent (the field's default), as the CLI sends options left unset so.
bool is refused where an int or float is asked (JSON true is not a count), and an int is
accepted where a float is asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ControlError

REQUIRED: Any = ...  # a Field default meaning the caller must give the field


@dataclass(frozen=True)
class Field:
    """One parameter: its `kind`, its `default` (REQUIRED: none), inclusive bounds `low` and
    `high` for numbers, and `choices` for strings."""

    name: str
    kind: type | tuple[type, ...]
    default: Any = REQUIRED
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def value(self, params: dict[str, Any]) -> Any:
        """The field's value in `params`, checked; ControlError naming the field otherwise."""
        given = params.get(self.name)
        if given is None:
            if self.default is REQUIRED:
                raise ControlError(f"missing parameter {self.name!r}")
            return self.default
        value = typed(self.name, given, self.kind)
        self._check_range(value)
        return value

    def _check_range(self, value: Any) -> None:
        if self.choices and value not in self.choices:
            among, wrong = ", ".join(self.choices), _short(value)
            raise ControlError(f"parameter {self.name!r} must be one of {among}, not {wrong}")
        if isinstance(value, (int, float)) and not (
            (self.low is None or value >= self.low) and (self.high is None or value <= self.high)
        ):
            raise ControlError(
                f"parameter {self.name!r} must be {_bound(self.low)}..{_bound(self.high)}, "
                f"not {value}"
            )


class Schema:
    """The fields one control method takes; `check` is the only way its params reach it."""

    def __init__(self, *fields: Field) -> None:
        self.fields = fields
        self.names = tuple(f.name for f in fields)

    def check(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Every field's value (defaults filled in); one-line ControlError on the first fault."""
        try:
            unknown = sorted(str(key) for key in params if key not in self.names)
            if unknown:
                takes = ", ".join(self.names) or "no parameters"
                raise ControlError(f"unknown parameter {_short(unknown[0])} (it takes: {takes})")
            return {f.name: f.value(params) for f in self.fields}
        except ControlError as exc:
            raise ControlError(f"{method}: {exc}") from None


def typed(name: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    """`value` if it has the type asked (an int where a float is asked, as that float)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and bool not in kinds:
        raise ControlError(f"parameter {name!r} must be {_names(kinds)}, not a boolean")
    if not isinstance(value, kinds):
        wrong = type(value).__name__
        raise ControlError(f"parameter {name!r} must be {_names(kinds)}, not {wrong}")
    return value


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kinds)


def _short(text: str) -> str:
    """`text` quoted, cut to a line's worth (a 64 KiB key is echoed no more than that)."""
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _bound(limit: float | None) -> str:
    return "" if limit is None else f"{limit:g}"

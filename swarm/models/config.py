"""Building component configs from plain mappings (a run manifest) with errors a user can act on.

Run manifests carry model, dataset and optimizer settings as plain msgpack/JSON mappings. A typo in
one of them must fail loudly at run creation, naming the valid keys, instead of silently training a
different model. Every config in the swarm layer is a frozen kw-only dataclass, so one helper covers
them all.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Mapping
from typing import Any, TypeVar

from ..errors import ConfigError  # defined in swarm/errors.py; imported from here too

C = TypeVar("C")


def config_from_dict(
    cls: type[C], values: Mapping[str, Any], *, what: str = "", under: str = ""
) -> C:
    """Build the dataclass `cls` from `values`; unknown keys raise `ConfigError` listing valid ones.

    Lists are turned into tuples for tuple-typed fields, since JSON and msgpack have no tuples and
    the configs are frozen (hashable) dataclasses. `what` names the config in errors (default:
    the class name); `under` is the spec key it sits under (`model_settings`), so an error names
    the key as `--set` takes it.
    """
    what = what or cls.__name__
    check_settings(cls, values, what=what, under=under)
    converted = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        return cls(**converted)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what}: {exc}") from exc


# a field's annotation (a string: `from __future__ import annotations`) → the values it takes
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "str": ((str,), "a string"),
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
}


def check_settings(cls: type, values: Mapping[str, Any], *, what: str, under: str = "") -> None:
    """Refuse, with one line naming the setting, what `cls` (a dataclass) must not be built from:
    an unknown key (with the nearest known one and the list), a value of the wrong type (with an
    example: its default), a non-finite number. A manifest comes from anyone: none of it may
    reach a constructor as an internal error ("'<' not supported between instances of 'str' and
    'int'"). `under`: the key `values` sit under in a spec (`model_settings`), named in errors."""
    prefix = f"{under}." if under else ""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in sorted(set(values) - set(fields), key=str):
        near = difflib.get_close_matches(str(key), list(fields), n=1)
        hint = f" (did you mean '{prefix}{near[0]}'?)" if near else ""
        raise ConfigError(
            f"{what}: unknown setting '{prefix}{key}'{hint}; valid settings are: "
            + ", ".join(sorted(fields))
            + f" ({RUN_OPTIONS_HINT})"
        )
    for key, value in values.items():
        kind = _kind(str(fields[key].type))
        if kind is None:
            continue
        types, words = kind
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ConfigError(
                f"{what} setting '{prefix}{key}' must be {words}, got {type(value).__name__} "
                f"{value!r:.40}{_example(fields[key], prefix + key)}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(
                f"{what} setting '{prefix}{key}' must be a finite number, got {value!r}"
            )


RUN_OPTIONS_HINT = "`peertrain run options` lists each with its type, default and meaning"


def _kind(annotation: str) -> tuple[tuple[type, ...], str] | None:
    """The values a field of `annotation` takes, and how an error says so; None: unchecked."""
    if annotation.startswith("tuple"):
        return (list, tuple), "a list"
    if annotation.startswith("Mapping"):
        return (Mapping,), "a map"
    return _KINDS.get(annotation)


def _example(field: dataclasses.Field, key: str) -> str:
    """How a user sets `key` right: its default as `--set`, when it has a plain one."""
    if field.default is dataclasses.MISSING:
        return ""
    try:
        value = json.dumps(
            list(field.default) if isinstance(field.default, tuple) else field.default
        )
    except (TypeError, ValueError):
        return ""
    return f" (its default: --set {key}={value})"


def config_to_dict(config: Any) -> dict[str, Any]:
    """The inverse of `config_from_dict`: a plain mapping suitable for a manifest."""
    return {
        f.name: list(v) if isinstance(v := getattr(config, f.name), tuple) else v
        for f in dataclasses.fields(config)
    }

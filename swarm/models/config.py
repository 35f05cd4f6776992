"""Building component configs from plain mappings (a run manifest) with errors a user can act on.

Run manifests carry model, dataset and optimizer settings as plain msgpack/JSON mappings. A typo in
one of them must fail loudly at run creation, naming the valid keys, instead of silently training a
different model. Every config in the swarm layer is a frozen kw-only dataclass, so one helper covers
them all.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from typing import Any, TypeVar

from ..errors import ConfigError  # defined in swarm/errors.py; imported from here too

C = TypeVar("C")


def config_from_dict(cls: type[C], values: Mapping[str, Any]) -> C:
    """Build the dataclass `cls` from `values`; unknown keys raise `ConfigError` listing valid ones.

    Lists are turned into tuples for tuple-typed fields, since JSON and msgpack have no tuples and
    the configs are frozen (hashable) dataclasses.
    """
    check_settings(cls, values, what=cls.__name__)
    converted = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        return cls(**converted)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{cls.__name__}: {exc}") from exc


# a field's annotation (a string: `from __future__ import annotations`) → the values it takes
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "str": ((str,), "a string"),
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"),
}


def check_settings(cls: type, values: Mapping[str, Any], *, what: str) -> None:
    """Refuse, with one line naming the setting, what `cls` (a dataclass) must not be built from:
    an unknown key (with the nearest known one and the list), a value of the wrong type, a
    non-finite number. A manifest comes from anyone: none of it may reach a constructor as an
    internal error ("'<' not supported between instances of 'str' and 'int'")."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in sorted(set(values) - set(fields)):
        near = difflib.get_close_matches(str(key), list(fields), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigError(
            f"{what}: unknown setting {key!r}{hint}; valid settings are: "
            + ", ".join(sorted(fields))
        )
    for key, value in values.items():
        annotation = str(fields[key].type)
        kind = _KINDS.get(annotation)
        if annotation.startswith("tuple"):
            kind = ((list, tuple), "a list")
        elif annotation.startswith("Mapping"):
            kind = ((Mapping,), "a map")
        if kind is None:
            continue
        types, words = kind
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ConfigError(
                f"{what} setting {key!r} must be {words}, got {type(value).__name__} {value!r:.40}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{what} setting {key!r} must be a finite number, got {value!r}")


def config_to_dict(config: Any) -> dict[str, Any]:
    """The inverse of `config_from_dict`: a plain mapping suitable for a manifest."""
    return {
        f.name: list(v) if isinstance(v := getattr(config, f.name), tuple) else v
        for f in dataclasses.fields(config)
    }

"""What every run spec shares: canonical bytes, strict decoding, and the model and dataset it names.

A run's spec is the manifest's opaque `spec` (crdt/manifest.py), and the manifest names the run by
the hash of its bytes, so a spec must encode canonically: msgpack of a key-sorted map, with no
floats that differ by platform (plain Python floats round-trip exactly). Decoding is strict:
unknown fields and invalid values are a `DecodeError`, as for any untrusted bytes. The DiLoCo
spec (diloco/member/run_spec.py) and the pipeline spec (pipeline/run_spec.py) add their own fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

from peertrain.protocol.errors import DecodeError
from peertrain.protocol.packing import pack, unpack

from .models.config import ConfigError, check_settings

MAX_SPEC_BYTES = 16 * 1024


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec:
    """Base of the frozen, keyword-only spec dataclasses: the settings of the model and dataset
    they name; `model` and `dataset` are each mode's own fields (their defaults differ). Field
    order does not reach the bytes (a key-sorted map), so a field here names the same run."""

    KIND: ClassVar[str] = "run spec"  # how errors name it

    if TYPE_CHECKING:
        model: str
        dataset: str
    # the model's own settings (model_settings.KEY below, per model)
    model_settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # the dataset's own settings (dataset_settings.KEY below, per dataset)
    dataset_settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return pack(canonical(dataclasses.asdict(self)))  # type: ignore[call-overload]

    @classmethod
    def from_bytes(cls, raw: bytes) -> Self:
        fields = unpack(raw, max_size=MAX_SPEC_BYTES, what=cls.KIND)
        if not isinstance(fields, dict):
            raise DecodeError(f"a {cls.KIND} is a map")
        try:
            return cls.checked(fields)
        except ConfigError as exc:
            raise DecodeError(f"invalid {cls.KIND}: {exc}") from None

    @classmethod
    def checked(cls, fields: Mapping[str, Any]) -> Self:
        """The spec of `fields` (a user's settings, or a stranger's bytes decoded); ConfigError,
        one line naming the field, for an unknown field, a wrong type or a non-finite number."""
        check_settings(cls, fields, what=cls.KIND)
        try:
            return cls(**fields)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{cls.KIND}: {exc}") from None

    def model_config(self):
        from .models import model_config

        return model_config(self.model, self.model_settings)

    def dataset_config(self):
        from .data import dataset_config

        return dataset_config(self.dataset, self.dataset_settings)


def canonical(value: Any) -> Any:
    """Maps key-sorted with string keys, tuples as lists: one encoding per value."""
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    return value

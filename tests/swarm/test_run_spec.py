"""Run specs are canonical bytes (a run's ID hashes them) and decode strictly, whatever the mode."""

from __future__ import annotations

import pytest
from peertrain.protocol.errors import DecodeError, MessageTooLarge
from peertrain.protocol.packing import pack
from peertrain.swarm.diloco.run_spec import DiLoCoSpec
from peertrain.swarm.pipeline.run_spec import PipelineSpec

SPECS = [DiLoCoSpec, PipelineSpec]


@pytest.mark.parametrize("kind", SPECS)
def test_round_trip_and_one_encoding_per_value(kind):
    a = kind(model="mlp", model_settings={"hidden": 32, "depth": 3}, dataset="digits")
    b = kind(model="mlp", model_settings={"depth": 3, "hidden": 32}, dataset="digits")
    assert a.to_bytes() == b.to_bytes()
    assert kind.from_bytes(a.to_bytes()) == a


@pytest.mark.parametrize("kind", SPECS)
def test_untrusted_bytes_give_a_decode_error_that_names_the_spec(kind):
    good = pack({"model": "mlp", "dataset": "digits"})
    assert kind.from_bytes(good).model == "mlp"
    for raw, why in (
        (pack({"model": "mlp", "dataset": "digits", "evil": 1}), "unknown"),
        (pack({"model": "mlp", "dataset": "digits", "batch_size": -3}), "invalid"),
        (pack([1, 2, 3]), "is a map"),
        (b"\xc1garbage", None),
    ):
        with pytest.raises(DecodeError, match=why):
            kind.from_bytes(raw)
    with pytest.raises(MessageTooLarge):  # refused before it is parsed
        kind.from_bytes(b"\x00" * (64 * 1024))
    with pytest.raises(DecodeError, match=kind.KIND):
        kind.from_bytes(pack({"nope": 1}))

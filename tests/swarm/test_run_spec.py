"""Run specs are canonical bytes (a run's ID hashes them) and decode strictly, whatever the mode."""

from __future__ import annotations

import hashlib

import pytest
from peertrain.protocol.errors import DecodeError, MessageTooLarge
from peertrain.protocol.packing import pack
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
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


def test_the_spec_bytes_and_so_the_run_ids_of_older_versions_do_not_change():
    # a run is named by its manifest's hash, the spec's bytes inside it: moving a field (here
    # the settings maps into RunSpec) must keep every spec's bytes, or old runs get new names
    from peertrain.swarm.diffusion.run_spec import DiffusionSpec

    specs = {
        "0b392e752a280c10": DiLoCoSpec(),
        "d80d6b27e7925ab1": DiLoCoSpec(
            model="mlp",
            dataset="digits",
            model_settings={"hidden": 8},
            dataset_settings={"eval_items": 100},
        ),
        "59fbeaf57972de6d": PipelineSpec(),
        "f3ec33894b424095": PipelineSpec(model_settings={"depth": 3}, stages=2),
        "8f4ddc57d7fda2b9": DiffusionSpec(),
        "1122196dc3088bdb": DiffusionSpec(dataset_settings={"limit": 100}),
    }
    for digest, spec in specs.items():
        raw = spec.to_bytes()
        assert hashlib.sha256(raw).hexdigest()[:16] == digest, spec
        assert type(spec).from_bytes(raw) == spec

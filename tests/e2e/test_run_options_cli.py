"""Run settings explain themselves (issue 32, item 3): a bad `--set` is one line naming the key as
`--set` takes it, the cause and the fix (did you mean, the known keys, or an example), never a
Python internal; `peertrain run options` and `--set help` list every setting with its type,
default and meaning, read from the spec classes. Real processes: a daemon and the CLI."""

from __future__ import annotations

import dataclasses
import json

import pytest
from peertrain.testing import cli_daemons
from peertrain.testing.processes import peertrain_cli

pytestmark = pytest.mark.slow  # a daemon starts (~5 s), then CLI processes

INTERNALS = ("__init__", "unexpected keyword", "not supported between", "internal error", "Error:")

BAD_SETTINGS = [
    # (--set, what the one line must say)
    (
        "nonsense=1",
        ["unknown setting 'nonsense'", "valid settings are: accumulation", "run options"],
    ),
    ("inner_step=5", ["unknown setting 'inner_step' (did you mean 'inner_steps'?)"]),
    (
        "model_settings.n_layr=2",
        ["unknown setting 'model_settings.n_layr' (did you mean 'model_settings.n_layer'?)"],
    ),
    (
        'model_settings.n_layer="x"',
        [
            "'model_settings.n_layer' must be an integer, got str 'x'",
            "--set model_settings.n_layer=",
        ],
    ),
    ('lr="fast"', ["setting 'lr' must be a number", "--set lr=0.0004"]),
    ("dataset_settings.bogus=2", ["unknown setting 'dataset_settings.bogus'", "block_size"]),
    ("aggregator_settings.foo=1", ["aggregator_settings", "unknown option(s) ['foo']", "accepts"]),
]


def test_a_bad_set_is_one_line_naming_the_key_the_cause_and_the_fix(tmp_path):
    with cli_daemons(1, tmp_path) as (daemon,):
        for setting, says in BAD_SETTINGS:
            result = peertrain_cli(
                "run", "create", "--name", "bad", "--set", setting,
                "--home", str(daemon.home), check=False,
            )  # fmt: skip
            message = result.stderr.strip()
            assert result.returncode == 1, (setting, result.stdout, message)
            assert "\n" not in message and message.startswith("peertrain: invalid run settings")
            assert all(part in message for part in says), (setting, message)
            assert not any(word in message for word in INTERNALS), (setting, message)
        assert not daemon.status()["run"]  # nothing was created


def test_run_options_lists_every_field_of_every_spec_with_type_default_and_meaning():
    from peertrain.swarm.diffusion.run_spec import DiffusionSpec
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
    from peertrain.swarm.models import GPTConfig
    from peertrain.swarm.pipeline.run_spec import PipelineSpec

    listed = json.loads(peertrain_cli("run", "options", "--json").stdout)
    expected = {
        "diloco": DiLoCoSpec,
        "pipeline": PipelineSpec,
        "diffusion": DiffusionSpec,
        "model gpt": GPTConfig,
    }
    for group, cls in expected.items():
        prefix = "model_settings." if group.startswith("model") else ""
        keys = {prefix + f.name for f in dataclasses.fields(cls) if f.init}
        assert {s["key"] for s in listed[group]} == keys, group
    for group, settings in listed.items():
        for s in settings:
            assert s["meaning"] and s["type"], (group, s)  # every field has a comment
    lr = next(s for s in listed["diloco"] if s["key"] == "lr")
    assert lr["type"] == "float" and lr["default"] == 4e-4 and "learning rate" in lr["meaning"]
    text = peertrain_cli("run", "options").stdout
    assert "model_settings.n_layer  (int, default 2)" in text and "transformer blocks" in text


def test_set_help_prints_the_listing_of_the_run_mode_without_a_daemon(tmp_path):
    result = peertrain_cli(
        "run", "create", "--name", "x", "--mode", "swarm", "--set", "help", "--home", str(tmp_path)
    )
    assert "SWARM pipeline runs" in result.stdout and "rebalance_period" in result.stdout
    assert "DiLoCo runs" not in result.stdout  # only the mode asked for

"""The CLI explains itself: run options carry help, choices and defaults; env lists split."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from peertrain import __version__
from peertrain.node.cli.main import build_parser
from peertrain.node.cli.options import RUN_OPTIONS, apply_env, run_spec_from_args
from peertrain.node.errors import NodeError


def _parse(argv, monkeypatch, **env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    parser = build_parser()
    args = parser.parse_args(argv)
    apply_env(args, parser)
    return args


def test_peertrain_set_from_the_environment_is_a_list_of_settings_not_of_characters(monkeypatch):
    args = _parse(
        ["run", "create", "--name", "r"],
        monkeypatch,
        PEERTRAIN_SET="model_settings.n_layer=4;model_settings.n_head=2\nseed=3",
    )
    spec = run_spec_from_args(args)
    assert spec == {"model_settings": {"n_layer": 4, "n_head": 2}, "seed": 3}


def test_a_single_setting_in_the_environment_works_too(monkeypatch):
    args = _parse(
        ["run", "create", "--name", "r"], monkeypatch, PEERTRAIN_SET="model_settings.n_layer=4"
    )
    assert run_spec_from_args(args) == {"model_settings": {"n_layer": 4}}


def test_an_env_value_outside_the_choices_is_refused_by_name(monkeypatch):
    with pytest.raises(NodeError, match="PEERTRAIN_CODEC='int3': --codec must be one of"):
        _parse(["run", "create", "--name", "r"], monkeypatch, PEERTRAIN_CODEC="int3")


def test_every_run_option_has_help_with_its_default():
    for flag, (_, _, text, _) in RUN_OPTIONS.items():
        assert "default" in text, f"{flag} says no default"
    out = subprocess.run(
        [sys.executable, "-m", "peertrain", "run", "create", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "{fp32,fp16,bf16,int8,int4}" in out and "rule for outer updates" in out


def test_version():
    out = subprocess.run(
        [sys.executable, "-m", "peertrain", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[0] == f"peertrain {__version__}"  # then commit and versions


def test_budget_and_data_options_reach_the_daemon_and_the_control_call(tmp_path):
    from peertrain.node.cli.options import data_params, parse_size

    assert parse_size("4G") == 4 << 30 and parse_size("512M") == 512 << 20
    assert parse_size("1000") == 1000
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size("lots")
    args = build_parser().parse_args(
        [
            "run",
            "join",
            "--run",
            "3f9a2c71",
            "--data",
            "c.txt",
            "--max-params",
            "5",
            "--max-memory",
            "1G",
        ]
    )
    assert args.name == "3f9a2c71"
    assert data_params(args) == {
        "data": str((Path.cwd() / "c.txt").absolute()),
        "max_params": 5,
        "max_memory": 1 << 30,
    }

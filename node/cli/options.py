"""The CLI's shared option groups and how options become settings.

Run options map flags onto a run spec (`--set key.sub=JSON` for anything else); role options say
what a node does in a swarm run; `apply_env` fills options not given on the command line from
PEERTRAIN_<OPTION> (flag > env > config.toml > default).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..config import ENV_PREFIX, field_names
from ..errors import NodeError


def add_role_options(p: argparse.ArgumentParser) -> None:
    """Swarm runs: what this node does in the run."""
    p.add_argument(
        "--role",
        choices=["server", "trainer"],
        default=None,
        help="swarm runs: server (default) or trainer",
    )
    p.add_argument(
        "--speed",
        type=float,
        default=None,
        help="swarm servers: artificial speed (with base_seconds)",
    )
    p.add_argument(
        "--stage",
        type=int,
        default=None,
        help="swarm servers: serve this stage (default: most need)",
    )


def role_params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        k: getattr(args, k)
        for k in ("role", "speed", "stage")
        if getattr(args, k, None) is not None
    }


RUN_OPTIONS = {  # flag → (spec field, type)
    "--model": ("model", str),
    "--dataset": ("dataset", str),
    "--inner-steps": ("inner_steps", int),
    "--batch-size": ("batch_size", int),
    "--lr": ("lr", float),
    "--codec": ("codec", str),
    "--aggregator": ("aggregator", str),
    "--rounds": ("rounds", int),
    "--min-members": ("min_members", int),
    "--round-timeout": ("round_timeout", float),
    "--seed": ("seed", int),
    "--stages": ("stages", int),
}


def add_run_options(p: argparse.ArgumentParser) -> None:
    for flag, (dest, kind) in RUN_OPTIONS.items():
        p.add_argument(flag, dest=dest, type=kind, default=None)
    p.add_argument(
        "--set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="any other run setting, e.g. model_settings.n_layer=4 (value parsed as JSON)",
    )


def run_spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for dest, _ in RUN_OPTIONS.values():
        if getattr(args, dest, None) is not None:
            spec[dest] = getattr(args, dest)
    for item in args.set or ():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise NodeError(f"--set {item!r}: expected KEY=VALUE")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        target = spec
        *parents, leaf = key.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return spec


def apply_env(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Fill options the user did not give from PEERTRAIN_<OPTION>, except node-config keys,
    which `load_config` merges itself (so that the file sits between env and default)."""
    config_keys = set(field_names()) | {"home"}
    for action in _all_actions(parser):
        dest = action.dest
        if dest in config_keys or not hasattr(args, dest) or getattr(args, dest) != action.default:
            continue
        raw = os.environ.get(ENV_PREFIX + dest.upper())
        if raw is None or raw == "":
            continue
        if isinstance(action, argparse._StoreTrueAction):
            value: Any = raw.lower() in ("1", "true", "yes", "on")
        else:
            try:
                value = action.type(raw) if action.type else raw
            except (TypeError, ValueError):
                raise NodeError(
                    f"{ENV_PREFIX}{dest.upper()}={raw!r} is not a valid value for "
                    f"--{dest.replace('_', '-')}"
                ) from None
        setattr(args, dest, value)


def _all_actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_actions(sub)

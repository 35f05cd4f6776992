"""The CLI's shared option groups and how options become settings.

Run options map flags onto a run spec (`--set key.sub=JSON` for anything else); role options say
what a node does in a swarm run; `apply_env` fills options not given on the command line from
PEERTRAIN_<OPTION> (flag > env > config.toml > default).

Why argparse and a dataclass config, not typer/click (`auto_envvar_prefix`) and pydantic-settings
(issue 18 asked to prefer them unless measured cost said otherwise). Measured on the shared
2-core machine, medians of 5 runs alternated, a prototype of `run create`/`node start` on typer
0.29 (click 8.5) + pydantic-settings 2.16 (pydantic 2.14) against this code:
- `peertrain run create --help`: 0.50 s vs 2.42 s wall; imports 0.17 s vs 1.34 s
  (`-X importtime`), 126 vs 507 modules; max RSS 15.3 vs 44.0 MiB.
- daemon start (CLI, config, slim libp2p, node.daemon imported): RSS 72.0 vs 83.1 MiB, which
  alone would take the idle daemon (75 MiB) past its 80 MiB target (benchmarks/idle_node.py).
- Alone: `import pydantic_settings` 0.87 s and 35 MiB (bare python 11 MiB); typer 0.26 s;
  click 0.03 s and +3.5 MiB. Click alone is cheap, but its auto_envvar_prefix names variables by
  command path (PEERTRAIN_RUN_CREATE_NAME, not the documented PEERTRAIN_NAME), and list splitting
  and the TOML layer would still be ours. So the ~150 lines here stay; tests/node/
  test_cli_options.py pins the env, list and precedence behaviour.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
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
    p.add_argument(
        "--group",
        default=None,
        metavar="expert-K|router",
        help="diffusion runs: train this group (default: the one with the most need)",
    )


def add_budget_options(p: argparse.ArgumentParser) -> None:
    """What this node agrees to hold for a run: a spec over it is refused before building."""
    p.add_argument(
        "--max-params",
        type=int,
        default=None,
        metavar="N",
        help="refuse runs whose model has more parameters (default 200000000)",
    )
    p.add_argument(
        "--max-memory",
        type=parse_size,
        default=None,
        metavar="BYTES",
        help="refuse runs estimated to need more memory, e.g. 4G (default: half the RAM)",
    )


def parse_size(text: str) -> int:
    """Bytes from `123`, `512M`, `4G` (binary units)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = units.get(text[-1:], 1)
    try:
        value = float(text[:-1] if text[-1:] in units else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 4G or 512M") from None
    if value < 0:
        raise argparse.ArgumentTypeError("a size is not negative")
    return int(value * scale)


def data_params(args: argparse.Namespace) -> dict[str, Any]:
    """--data (absolute: the daemon's working folder is not ours) and the budget options."""
    out: dict[str, Any] = {}
    if getattr(args, "data", None) is not None:
        out["data"] = str(Path(args.data).expanduser().absolute())
    for key in ("max_params", "max_memory"):
        if getattr(args, key, None) is not None:
            out[key] = getattr(args, key)
    return out


def role_params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        k: getattr(args, k)
        for k in ("role", "speed", "stage", "group")
        if getattr(args, k, None) is not None
    }


# The built-in names --help lists (the registries import torch, so they are named here;
# tests/e2e/test_cli_explains_itself.py checks them against swarm/models, swarm/data, diffusion)
MODEL_CHOICES = ("gpt", "gpt-25m", "mlp")
DIFFUSION_MODEL_CHOICES = ("dit-tiny", "dit-small")
DATASET_CHOICES = ("text", "tokens", "images", "digits")
DIFFUSION_DATASET_CHOICES = ("digits", "fashion-mnist")

# flag → (spec field, type, help, choices). Choices are imported lazily where they live (the
# aggregator names come from swarm/aggregation, which imports torch), so --help stays light.
RUN_OPTIONS: dict[str, tuple[str, type, str, tuple[str, ...] | None]] = {
    "--model": (
        "model",
        str,
        f"model to train: {', '.join(MODEL_CHOICES)} (diloco, swarm); "
        f"{', '.join(DIFFUSION_MODEL_CHOICES)} (diffusion); an installed plugin, "
        "package.module:factory or hf:PATH_OR_CONFIG (default: gpt for diloco, mlp for swarm, "
        "dit-tiny for diffusion)",
        None,
    ),
    "--dataset": (
        "dataset",
        str,
        f"dataset: {', '.join(DATASET_CHOICES)} (diloco, swarm); "
        f"{', '.join(DIFFUSION_DATASET_CHOICES)} (diffusion) (default: text for diloco, digits "
        "for swarm and diffusion)",
        None,
    ),
    "--inner-steps": ("inner_steps", int, "DiLoCo inner AdamW steps per round (default: 50)", None),
    "--batch-size": ("batch_size", int, "samples per inner step (default: 16)", None),
    "--lr": ("lr", float, "inner learning rate (default: 4e-4)", None),
    "--codec": (
        "codec",
        str,
        "outer-update codec (default: int8)",
        ("fp32", "fp16", "bf16", "int8", "int4"),
    ),
    "--aggregator": (
        "aggregator",
        str,
        "rule for outer updates (default: auto = flag for open runs, mean for invite runs)",
        ("auto", "mean", "median", "trimmed-mean", "multi-krum", "flag"),
    ),
    "--rounds": ("rounds", int, "outer rounds, 0 = until stopped (default: 0)", None),
    "--min-members": ("min_members", int, "members round 0 waits for (default: 1)", None),
    "--round-timeout": (
        "round_timeout",
        float,
        "seconds a round waits for updates after ours, plus 15%% of our inner phase (default: 60)",
        None,
    ),
    "--accumulation": (
        "accumulation",
        int,
        "DiLoCo micro-batches per inner step: a step sees batch-size × this (default: 1)",
        None,
    ),
    "--seed": (
        "seed",
        int,
        "seed for the model's initial weights and data order (default: 0)",
        None,
    ),
    "--fragments": (
        "fragments",
        int,
        "Streaming DiLoCo: the model in P fragments that sync in turn, each every round, so an "
        "exchange carries 1/P of it (default: 1, plain DiLoCo; inner-steps must be a multiple)",
        None,
    ),
    "--overlap": (
        "overlap",
        int,
        "Streaming DiLoCo: a fragment's outer step lands τ inner steps after it was sent, so its "
        "exchange overlaps training (default: 0)",
        None,
    ),
    "--mix": (
        "mix",
        float,
        "Streaming DiLoCo: α in θ_local ← α·θ_local + (1−α)·θ_global when a fragment lands "
        "(default: 0)",
        None,
    ),
    "--round-seconds": (
        "round_seconds",
        float,
        "Streaming DiLoCo: a round is a compute window of this many seconds; each member takes "
        "the inner steps it can and its update counts by its samples (default: 0, by steps)",
        None,
    ),
    "--stages": ("stages", int, "SWARM pipeline stages (default: 3)", None),
    "--admission": (
        "admission",
        str,
        "diloco: open (anyone may train; default) or invite (members hold a certificate from "
        "`peertrain run invite`)",
        ("open", "invite"),
    ),
    "--experts": (
        "experts",
        int,
        "diffusion: expert groups, one per data cluster (default: 4)",
        None,
    ),
}

# Env vars of list options: one item per line or separated by ';' (a KEY=VALUE may hold JSON,
# whose commas would be ambiguous), e.g. PEERTRAIN_SET='model_settings.n_layer=4;seed=3'.
LIST_ENV_SEPARATORS = ("\n", ";")


def add_run_options(p: argparse.ArgumentParser) -> None:
    for flag, (dest, kind, text, choices) in RUN_OPTIONS.items():
        p.add_argument(flag, dest=dest, type=kind, default=None, help=text, choices=choices)
    p.add_argument(
        "--eager",
        action="store_const",
        const=True,
        default=None,
        help="Streaming DiLoCo: apply our own outer gradient to a fragment at once while the "
        "others' are on their way (Eager Updates)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="any other run setting, e.g. model_settings.n_layer=4 (value parsed as JSON); "
        "env PEERTRAIN_SET takes several separated by ';'; `--set help` (or `peertrain run "
        "options`) lists every setting with its type, default and meaning",
    )


def model_option(model: str | None) -> str | None:
    """--model as the daemon reads it: an `hf:` file or folder made absolute (the daemon's
    working folder is not ours)."""
    if model and model.startswith("hf:") and Path(model[3:]).expanduser().exists():
        return "hf:" + str(Path(model[3:]).expanduser().absolute())
    return model


def run_spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for dest in [*(dest for dest, *_ in RUN_OPTIONS.values()), "eager"]:
        if getattr(args, dest, None) is not None:
            spec[dest] = getattr(args, dest)
    if "model" in spec:
        spec["model"] = model_option(spec["model"])
    if "help" in (args.set or ()):
        from .run_options import render

        print(render(None if getattr(args, "mode", "none") == "none" else args.mode))
        raise SystemExit(0)
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
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreConstAction):
            value: Any = raw.lower() in ("1", "true", "yes", "on")
        elif isinstance(action, argparse._AppendAction):
            value = [_convert(action, dest, item) for item in split_list_env(raw)]
        else:
            value = _convert(action, dest, raw)
        setattr(args, dest, value)


def split_list_env(raw: str) -> list[str]:
    """A list option's env value as its items (see LIST_ENV_SEPARATORS); blanks dropped."""
    for separator in LIST_ENV_SEPARATORS[1:]:
        raw = raw.replace(separator, LIST_ENV_SEPARATORS[0])
    return [item.strip() for item in raw.split(LIST_ENV_SEPARATORS[0]) if item.strip()]


def _convert(action: argparse.Action, dest: str, raw: str) -> Any:
    flag = f"--{dest.replace('_', '-')}"
    try:
        value = action.type(raw) if action.type else raw
    except (TypeError, ValueError):
        raise NodeError(
            f"{ENV_PREFIX}{dest.upper()}={raw!r} is not a valid value for {flag}"
        ) from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise NodeError(f"{ENV_PREFIX}{dest.upper()}={raw!r}: {flag} must be one of {choices}")
    return value


def name_env_vars(parser: argparse.ArgumentParser, loads_config: tuple[Any, ...]) -> None:
    """End the help of every option that an environment variable sets with its name, as
    `apply_env` (or `load_config`, for node-config keys in commands whose handler is one of
    `loads_config`) reads it."""
    config_keys = set(field_names())
    commands = [parser]
    while commands:
        command = commands.pop()
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                commands.extend(action.choices.values())
            elif _takes_env(action, command, config_keys, loads_config):
                action.help = f"{action.help or ''} (env {ENV_PREFIX}{action.dest.upper()})".strip()


def _takes_env(
    action: argparse.Action,
    command: argparse.ArgumentParser,
    config_keys: set[str],
    loads_config: tuple[Any, ...],
) -> bool:
    if not action.option_strings or action.help == argparse.SUPPRESS or action.required:
        return False  # a required option is checked before the environment is read
    if action.dest in ("help", "version", argparse.SUPPRESS) or ENV_PREFIX in (action.help or ""):
        return False
    return action.dest not in config_keys or command.get_default("handler") in loads_config


def _all_actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_actions(sub)

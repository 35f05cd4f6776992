"""The `peertrain swarm` commands' options: N daemons on loopback, their run, churn and
Byzantine members (the rest of the parser is in parser.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .commands import cmd_swarm_local
from .moments import moment
from .options import add_run_options


def add_swarm_commands(commands: Any) -> None:
    """swarm local: N daemons on loopback, with churn, Byzantine members or a SWARM pipeline."""
    swarm = commands.add_parser("swarm", help="local multi-node swarms").add_subparsers(
        metavar="ACTION"
    )
    p = swarm.add_parser("local", help="spawn N daemons on loopback and watch them")
    p.add_argument("--nodes", type=int, default=4, help="number of daemons (default 4)")
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run; 0 = until Ctrl-C")
    p.add_argument("--report", type=Path, help="write a JSON report here at the end")
    p.add_argument(
        "--data",
        type=Path,
        metavar="PATH",
        help="diloco: the run's data (--dataset text or tokens), given to the creator and every "
        "member, as on `run create` and `join`",
    )
    p.add_argument("--log-format", choices=["auto", "rich", "plain", "json"])
    p.add_argument(
        "--mode",
        choices=["none", "diloco", "swarm", "diffusion"],
        default="none",
        help="none: daemons only; diloco: train a DiLoCo run together; swarm: a SWARM pipeline; "
        "diffusion: expert groups and a router (--experts K)",
    )
    _add_fault_options(p)
    p.add_argument(
        "--trainers", type=int, default=2, help="swarm: trainer daemons besides the --nodes servers"
    )
    p.add_argument(
        "--speeds", default="1", metavar="S1,S2,…", help="swarm: server speeds, cycled over servers"
    )
    p.add_argument(
        "--kill-at",
        type=float,
        default=None,
        metavar="SECONDS",
        help="swarm: kill a stage-1 server then; diloco: kill a random member it started with "
        "(not the creator, not a late joiner) "
        "then, and restart it 3 s later",
    )
    _add_one_off_options(p)
    add_run_options(p)
    p.set_defaults(handler=cmd_swarm_local)


def _add_one_off_options(p: argparse.ArgumentParser) -> None:
    """A DiLoCo run told end to end: one late joiner, the model exported at the end."""
    p.add_argument(
        "--late-join",
        type=moment,
        default=None,
        metavar="S|rN",
        help="diloco: one more daemon joins the run S seconds in, or once the creator is at "
        "round N (it catches up by state download)",
    )
    p.add_argument(
        "--export",
        type=Path,
        default=None,
        metavar="DIR",
        help="diloco: write the run's model here at the end, as `run export` does",
    )
    p.add_argument(
        "--dashboard",
        metavar="HOST:PORT",
        default=None,
        help="none, diloco: the first daemon serves the dashboard and /metrics here "
        "(its --metrics-listen), e.g. 127.0.0.1:9464",
    )
    p.add_argument(
        "--export-format",
        choices=["safetensors", "torch", "hf"],
        default="safetensors",
        help="with --export: safetensors (default), torch, or hf (transformers models)",
    )


def _add_fault_options(p: argparse.ArgumentParser) -> None:
    """Churn and Byzantine members of a local swarm."""
    p.add_argument(
        "--kill-every",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="kill a random member (not the creator) this often, and restart it",
    )
    p.add_argument(
        "--hostile",
        "--byzantine",
        dest="byzantine",
        type=int,
        default=0,
        metavar="K",
        help="make the last K members hostile (fresh IDs, each an ordinary daemon with an attack)",
    )
    p.add_argument(
        "--attack",
        default="sign-flip",
        metavar="NAME[,NAME…]",
        help="their attack, cycled over them: updates: sign-flip, sign-flip-10, scaled, noise, "
        "alie, ipm, random, nan; states: future-round, poisoned-state; gossip: announce-flood "
        "(256 fresh keys announce ahead of every round); free riders: zero, copy; A/B@R: A "
        "until round R, then B (e.g. zero/scaled@10, honest/sign-flip-10@10)",
    )

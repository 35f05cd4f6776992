"""The `peertrain` argument parser: commands, their options, and the handler each one runs.

Options shared by several commands (`--home`, the daemon's addresses and logging) are parent
parsers; the run options live in options.py, where the environment-variable layer is too.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .commands import (
    cmd_id,
    cmd_join,
    cmd_node_start,
    cmd_run_create,
    cmd_run_export,
    cmd_run_join,
    cmd_run_leave,
    cmd_run_list,
    cmd_sample,
    cmd_status,
)
from .data_commands import add_data_commands
from .invite_commands import cmd_run_invite, cmd_run_revoke
from .logs import cmd_logs
from .node_stop import cmd_node_stop
from .options import add_budget_options, add_role_options, add_run_options, name_env_vars
from .run_options import cmd_run_options
from .run_show import cmd_run_show
from .swarm_parser import add_swarm_commands
from .version import VersionAction


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="peertrain", description="Decentralized peer-to-peer training."
    )
    parser.add_argument(
        "--version",
        action=VersionAction,
        help="the version, the git commit of a checkout, python, torch, trio and libp2p versions",
    )
    commands = parser.add_subparsers(metavar="COMMAND")
    home = _home_options()
    _add_node_commands(commands, home, _daemon_options(home))
    _add_run_commands(commands, home)
    add_swarm_commands(commands)
    add_data_commands(commands)
    name_env_vars(parser, loads_config=(cmd_node_start, cmd_join))
    return parser


def _home_options() -> argparse.ArgumentParser:
    """--home, shared by every command that talks to a node's home."""
    home = argparse.ArgumentParser(add_help=False)
    home.add_argument(
        "--home",
        type=Path,
        help="node home folder (env PEERTRAIN_HOME; default: per-user data dir)",
    )
    return home


def _daemon_options(home: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """What a command that runs the daemon takes: addresses, network key, logging."""
    daemon = argparse.ArgumentParser(add_help=False, parents=[home])
    daemon.add_argument(
        "--listen", action="append", metavar="MULTIADDR", help="listen address (repeatable)"
    )
    daemon.add_argument(
        "--bootstrap", action="append", metavar="MULTIADDR", help="peer to connect to (repeatable)"
    )
    daemon.add_argument(
        "--announce", action="append", metavar="MULTIADDR", help="extra address to advertise"
    )
    daemon.add_argument("--psk", metavar="HEX64", help="pre-shared key of a private network")
    daemon.add_argument(
        "--name",
        dest="public_name",
        metavar="NAME",
        help="this node's public name, shown in status (at most 32 printable characters; "
        "default: none, the friendly name of the peer ID stands for it)",
    )
    daemon.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="default info"
    )
    daemon.add_argument(
        "--log-format",
        choices=["auto", "rich", "plain", "json"],
        help="default auto: rich on a terminal, plain in a pipe; also in <home>/daemon.log",
    )
    _add_watching_options(daemon)
    daemon.add_argument("--attack", metavar="NAME", help=argparse.SUPPRESS)  # Byzantine test hook
    # a slower machine, for tests of members of unequal speed (Streaming DiLoCo)
    daemon.add_argument("--slowdown", type=float, metavar="N", help=argparse.SUPPRESS)
    # a home uplink on loopback (benchmarks/streaming_overlap.py): everything sent, N Mbit/s
    daemon.add_argument("--uplink-mbit", type=float, metavar="N", help=argparse.SUPPRESS)
    daemon.add_argument(
        "--device",
        metavar="auto|cpu|cuda[:N]|mps",
        help="where this node trains (default auto: a GPU when torch sees one, else the CPU)",
    )
    daemon.add_argument(
        "--ranks",
        type=int,
        metavar="N",
        help="train as one node of N processes, one device each (torch.distributed inside, one "
        "peer ID outside; default 1)",
    )
    daemon.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16"],
        help="autocast for forward and loss (default fp32; bf16 on CPUs and recent GPUs, "
        "fp16 on CUDA); weights, optimizer and outer updates stay fp32",
    )
    add_budget_options(daemon)
    return daemon


def _add_watching_options(daemon: argparse.ArgumentParser) -> None:
    """How others watch the node and its runs: the metrics endpoint, a TensorBoard log."""
    daemon.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics and the dashboard here, e.g. 127.0.0.1:9464 (default: off)",
    )
    daemon.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="log every run's metrics per round (loss, round, samples/s, update bytes) as "
        "TensorBoard event files under DIR/<run>-<id> (default: off; pip install "
        "'peertrain[tensorboard]')",
    )


def _add_node_commands(
    commands: Any, home: argparse.ArgumentParser, daemon: argparse.ArgumentParser
) -> None:
    """id, node start, join, status."""
    p = commands.add_parser(
        "id", parents=[home], help="print this home's peer ID and friendly name"
    )
    _json_and_handler(p, cmd_id)

    node = commands.add_parser("node", help="run a node").add_subparsers(metavar="ACTION")
    p = node.add_parser("stop", parents=[home], help="stop the daemon of this home and wait")
    p.set_defaults(handler=cmd_node_stop)
    p = node.add_parser("start", parents=[daemon], help="run the daemon in the foreground")
    p.set_defaults(handler=cmd_node_start)
    _add_logs_command(commands, home)

    p = commands.add_parser("join", parents=[daemon], help="run the daemon connected to PEER")
    p.add_argument(
        "peer",
        metavar="PEER",
        help="full multiaddr ending in /p2p/<peer id>, or a bare peer ID "
        "(then --bootstrap names any node to find it through)",
    )
    p.add_argument(
        "--run",
        metavar="ID|NAME",
        help="the training run to join: its ID, an ID prefix (8+ hex characters) or its name "
        "(refused when several runs carry it; `peertrain run list` shows them)",
    )
    p.add_argument(
        "--data", metavar="PATH", help="your copy of the run's data (checked against its digest)"
    )
    p.add_argument(
        "--role",
        choices=["server", "trainer"],
        default=None,
        help="SWARM runs: serve a stage (default) or feed microbatches",
    )
    _add_certificate_option(p)
    _add_trust_option(p)
    p.set_defaults(handler=cmd_join)

    p = commands.add_parser("status", parents=[home], help="status of the daemon on this home")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=1.0,
        default=None,
        metavar="SECONDS",
        help="redraw every SECONDS (default 1) until Ctrl-C",
    )
    p.set_defaults(handler=cmd_status)


def _add_logs_command(commands: Any, home: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "logs", parents=[home], help="print the log of this home's daemon (<home>/daemon.log)"
    )
    p.add_argument(
        "--follow", "-f", action="store_true", help="then print new lines as they come (Ctrl-C)"
    )
    p.add_argument("--lines", "-n", type=int, metavar="N", help="only the last N lines")
    p.set_defaults(handler=cmd_logs)


def _add_run_commands(commands: Any, home: argparse.ArgumentParser) -> None:
    """run create, join, export, list, invite, revoke: ask the daemon of this home."""
    run = commands.add_parser("run", help="training runs").add_subparsers(metavar="ACTION")
    p = run.add_parser("create", parents=[home], help="create a run on the running daemon")
    p.add_argument("--name", required=True, help="the run's name; others join with --run NAME")
    p.add_argument("--mode", default="diloco", choices=["diloco", "swarm", "diffusion"])
    add_run_options(p)
    add_role_options(p)
    _add_data_options(p, "the run trains on this file; the spec names it by its digest")
    p.add_argument("--json", action="store_true")
    _add_follow_option(p)
    p.set_defaults(handler=cmd_run_create)
    p = run.add_parser("join", parents=[home], help="join a run from the running daemon")
    p.add_argument(
        "--run",
        "--name",
        dest="name",
        required=True,
        metavar="ID|NAME",
        help="the run's ID, an ID prefix (8+ hex characters) or its name (if only one run has it)",
    )
    add_role_options(p)
    _add_data_options(p, "your copy of the run's data (checked against its digest)")
    _add_certificate_option(p)
    _add_trust_option(p)
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to look for the run's peers (default 60)",
    )
    p.add_argument("--json", action="store_true")
    _add_follow_option(p)
    p.set_defaults(handler=cmd_run_join)
    _add_invite_commands(run, home)
    p = run.add_parser("export", parents=[home], help="write the run's current model to a folder")
    _add_run_option(p)
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to write")
    p.add_argument(
        "--format",
        choices=["safetensors", "torch", "hf"],
        default="safetensors",
        help="safetensors (default): model.safetensors, loadable without peertrain; torch: "
        "model.pt; hf: save_pretrained (transformers models)",
    )
    _json_and_handler(p, cmd_run_export)
    p = run.add_parser("leave", parents=[home], help="stop taking part in a run")
    _add_run_option(p)
    _json_and_handler(p, cmd_run_leave)
    _add_listing_commands(run, home)
    _add_sample_command(commands, home)


def _add_listing_commands(run: Any, home: argparse.ArgumentParser) -> None:
    """run list (runs in the DHT), run show (a run's members), run options (every setting)."""
    p = run.add_parser("list", parents=[home], help="runs announced in the DHT")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_run_list)
    p = run.add_parser(
        "show",
        parents=[home],
        help="a run this node is in: every member's round, checksum, samples/s, device, "
        "version and name, and whether they agree",
    )
    p.add_argument(
        "run", nargs="?", default="", metavar="RUN", help="name or ID prefix (default: the only)"
    )
    _json_and_handler(p, cmd_run_show)
    p = run.add_parser(
        "options", help="every run setting (--set KEY=VALUE) with its type, default and meaning"
    )
    p.add_argument(
        "--mode", choices=["diloco", "swarm", "diffusion"], help="only this mode's settings"
    )
    _json_and_handler(p, cmd_run_options)


def _add_sample_command(commands: Any, home: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "sample",
        parents=[home],
        help="images from a diffusion run's newest experts (any node, member or not), or "
        "text from a text run this node is in (--prompt)",
    )
    p.add_argument("--run", required=True, metavar="ID|NAME", help="the diffusion run")
    p.add_argument("--n", type=int, default=64, help="images to draw (default 64)")
    p.add_argument(
        "--strategy",
        default="top1",
        help="how experts mix: top1 (default), top2, full, sample1 (per step), pick1 (per image), "
        "threshold0.2",
    )
    p.add_argument("--steps", type=int, default=50, help="Euler steps from noise (default 50)")
    p.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    p.add_argument("--fresh", action="store_true", help=argparse.SUPPRESS)  # refetch (benchmark)
    p.add_argument(
        "--out", type=Path, help="a .png grid or an .npz of the images ([-1, 1]); diffusion runs"
    )
    p.add_argument(
        "--prompt",
        help="text runs (gpt): continue this prompt from the run's newest model instead",
    )
    p.add_argument(
        "--tokens", type=int, default=160, help="text runs: tokens to write (default 160)"
    )
    _json_and_handler(p, cmd_sample)


def _add_run_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", metavar="ID|NAME", default="", help="the run (default: the only one)")


def _json_and_handler(p: argparse.ArgumentParser, handler: Any) -> None:
    """`--json` (the answer as JSON, for scripts) and the function that runs the command."""
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=handler)


def _add_follow_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--follow",
        action="store_true",
        help="then show the run's progress (rounds, inner steps, state download, waits) until "
        "it finishes; Ctrl-C stops watching, not the run",
    )


def _add_certificate_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--certificate",
        metavar="TOKEN",
        help="invite runs: the certificate token the run's creator (or an admin) gave you",
    )


def _add_invite_commands(run: Any, home: argparse.ArgumentParser) -> None:
    """run invite, run revoke: members of an invite run, by its creator or an admin."""
    p = run.add_parser("invite", parents=[home], help="certify a peer as a member of an invite run")
    p.add_argument("peer", metavar="PEER_ID", help="the invitee's peer ID (`peertrain id`)")
    _add_run_option(p)
    p.add_argument(
        "--role",
        choices=["member", "admin", "anchor"],
        default="member",
        help="member trains; admin may also invite and revoke; anchor: a member whose state "
        "attestations count (default: member)",
    )
    p.add_argument(
        "--expires", default="30d", metavar="DURATION", help="e.g. 12h, 30d (default: 30d)"
    )
    _json_and_handler(p, cmd_run_invite)
    p = run.add_parser("revoke", parents=[home], help="end a member's part in an invite run")
    p.add_argument("peer", metavar="PEER_ID")
    _add_run_option(p)
    _json_and_handler(p, cmd_run_revoke)


def _add_trust_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        metavar="PACKAGE.MODULE:FACTORY|hf:DIR",
        help="the run's model, when it is one by import path: this node may import it (peertrain "
        "imports only code you name; config key trusted_models); or your copy of the hf: folder "
        "whose weights the run starts from (checked against its digest)",
    )


def _add_data_options(p: argparse.ArgumentParser, data_help: str) -> None:
    p.add_argument("--data", metavar="PATH", type=Path, help=data_help)
    add_budget_options(p)

"""The `peertrain` command.

    peertrain id                      peer ID and friendly name of this home's identity
    peertrain node start              run the daemon in the foreground
    peertrain join PEER               run the daemon, connected to PEER (a /p2p/ multiaddr, or a
                                      bare peer ID found through the DHT from --bootstrap)
    peertrain status [--json]         ask the daemon running on this home
    peertrain run create --name N     start a training run on the daemon of this home
    peertrain run join --name N       join a run from the daemon of this home (swarm: --role)
    peertrain swarm local --nodes N   N daemons on loopback, as separate processes

Every option is also an environment variable: `--log-format json` is PEERTRAIN_LOG_FORMAT=json,
`--nodes 4` is PEERTRAIN_NODES=4. Precedence: flag > env > config.toml > default.
Heavy imports (libp2p, torch) happen inside the commands that need them, so `status` is quick.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from peertrain import __version__

from ..errors import NodeError
from .options import (
    add_role_options,
    add_run_options,
    apply_env,
    role_params,
    run_spec_from_args,
)

EXIT_ERROR = 1
EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return EXIT_USAGE
    try:
        apply_env(args, parser)
        return args.handler(args) or 0
    except NodeError as exc:
        print(f"peertrain: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="peertrain", description="Decentralized peer-to-peer training."
    )
    parser.add_argument("--version", action="version", version=f"peertrain {__version__}")
    commands = parser.add_subparsers(metavar="COMMAND")

    home = argparse.ArgumentParser(add_help=False)
    home.add_argument(
        "--home",
        type=Path,
        help="node home folder (env PEERTRAIN_HOME; default: per-user data dir)",
    )

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
    daemon.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    daemon.add_argument("--log-format", choices=["auto", "rich", "plain", "json"])
    daemon.add_argument("--attack", metavar="NAME", help=argparse.SUPPRESS)  # Byzantine test hook

    p = commands.add_parser(
        "id", parents=[home], help="print this home's peer ID and friendly name"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_id)

    node = commands.add_parser("node", help="run a node").add_subparsers(metavar="ACTION")
    p = node.add_parser("start", parents=[daemon], help="run the daemon in the foreground")
    p.set_defaults(handler=cmd_node_start)

    p = commands.add_parser("join", parents=[daemon], help="run the daemon connected to PEER")
    p.add_argument(
        "peer",
        metavar="PEER",
        help="full multiaddr ending in /p2p/<peer id>, or a bare peer ID "
        "(then --bootstrap names any node to find it through)",
    )
    p.add_argument("--run", metavar="NAME", help="the training run to join")
    p.add_argument(
        "--role",
        choices=["server", "trainer"],
        default=None,
        help="SWARM runs: serve a stage (default) or feed microbatches",
    )
    p.set_defaults(handler=cmd_join)

    p = commands.add_parser("status", parents=[home], help="status of the daemon on this home")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_status)

    run = commands.add_parser("run", help="training runs").add_subparsers(metavar="ACTION")
    p = run.add_parser("create", parents=[home], help="create a run on the running daemon")
    p.add_argument("--name", required=True, help="the run's name; others join with --run NAME")
    p.add_argument("--mode", default="diloco", choices=["diloco", "swarm"])
    add_run_options(p)
    add_role_options(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_run_create)
    p = run.add_parser("join", parents=[home], help="join a run from the running daemon")
    p.add_argument("--name", required=True, help="the run's name (or ID)")
    add_role_options(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_run_join)

    swarm = commands.add_parser("swarm", help="local multi-node swarms").add_subparsers(
        metavar="ACTION"
    )
    p = swarm.add_parser("local", help="spawn N daemons on loopback and watch them")
    p.add_argument("--nodes", type=int, default=4, help="number of daemons (default 4)")
    p.add_argument("--duration", type=float, default=0.0, help="seconds to run; 0 = until Ctrl-C")
    p.add_argument("--report", type=Path, help="write a JSON report here at the end")
    p.add_argument("--log-format", choices=["auto", "rich", "plain", "json"])
    p.add_argument(
        "--mode",
        choices=["none", "diloco", "swarm"],
        default="none",
        help="none: daemons only; diloco: train a DiLoCo run together; swarm: a SWARM pipeline",
    )
    p.add_argument(
        "--kill-every",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="kill a random member (not the creator) this often, and restart it",
    )
    p.add_argument(
        "--byzantine", type=int, default=0, metavar="K", help="make the last K members Byzantine"
    )
    p.add_argument(
        "--attack",
        default="sign-flip",
        help="their attack: sign-flip, sign-flip-10, noise, alie, ipm, random, nan",
    )
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
        help="swarm: kill a stage-1 server then",
    )
    add_run_options(p)
    p.set_defaults(handler=cmd_swarm_local)
    return parser


def _load(args: argparse.Namespace, **extra: Any):
    from ..config import load_config

    overrides = {
        "listen": args.listen,
        "bootstrap": args.bootstrap,
        "announce": args.announce,
        "psk": args.psk,
        "log_level": args.log_level,
        "log_format": args.log_format,
        "attack": getattr(args, "attack", None),
        **extra,
    }
    return load_config(args.home, overrides)


def _home(args: argparse.Namespace) -> Path:
    from ..config import default_home

    return Path(args.home).expanduser() if args.home else default_home()


def cmd_id(args: argparse.Namespace) -> int:
    from ..net.identity import load_or_create_identity

    identity = load_or_create_identity(_home(args))
    if args.json:
        print(json.dumps({"peer_id": identity.peer_id.to_base58(), "name": identity.name}))
    else:
        print(f"{identity.peer_id.to_base58()}  {identity.name}")
    return 0


def cmd_node_start(args: argparse.Namespace, config=None) -> int:
    from ..net import slim_imports

    slim_imports.install()  # before libp2p loads: keeps its unused dependencies out of memory
    import trio

    from ..log_setup import setup_logging
    from .runner import serve_until_signalled

    config = config or _load(args)
    setup_logging(config.log_level, config.log_format)
    # OpenMP's default spin-waiting turns every parallel torch op into a wait for the scheduler
    # when other processes hold the cores (measured: int8 encode 3-5x slower); set before torch
    # loads
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    trio.run(serve_until_signalled, config)
    _exit_now()
    return 0


def _exit_now() -> None:
    """End the process once the daemon has stopped cleanly. Interpreter finalisation after torch
    has run can take seconds in C code (thread pools, allocators) that nothing of ours needs:
    everything worth keeping is already on disk, so flush and leave, within the 5 s promise."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def cmd_join(args: argparse.Namespace) -> int:
    from ..net import slim_imports

    slim_imports.install()  # before .host imports libp2p (see cmd_node_start)
    if "/" not in args.peer:  # a bare peer ID: the DHT finds it once bootstrapped
        return _join_by_peer_id(args)
    from ..net.host import parse_peer_addr

    parse_peer_addr(args.peer)  # fail early with a clear message
    bootstrap = [args.peer, *(args.bootstrap or [])]
    config = _load(args, bootstrap=bootstrap, run=args.run, run_role=args.role)
    return cmd_node_start(args, config)


def _join_by_peer_id(args: argparse.Namespace) -> int:
    import multihash
    import trio
    from libp2p.peer.id import ID

    from ..errors import ConfigError
    from ..log_setup import setup_logging

    try:
        multihash.decode(ID.from_base58(args.peer).to_bytes())
    except Exception:
        raise ConfigError(
            f"{args.peer!r} is neither a peer address (/ip4/…/p2p/…) nor a peer ID (12D3KooW…)"
        ) from None
    config = _load(args, run=args.run, run_role=args.role)
    if not config.bootstrap:
        raise ConfigError(
            f"to join {args.peer} by its peer ID, also give --bootstrap with the address of "
            "any node of the network: the DHT finds the peer from there"
        )
    setup_logging(config.log_level, config.log_format)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see cmd_node_start
    trio.run(_serve_and_join, config, args.peer)
    _exit_now()
    return 0


async def _serve_and_join(config, peer: str) -> None:
    import trio

    from .keep_joined import keep_joined
    from .runner import serve_until_signalled

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_joined, config.control_socket, peer)
        await serve_until_signalled(config)
        nursery.cancel_scope.cancel()


def cmd_status(args: argparse.Namespace) -> int:
    from ..api.control import call_sync
    from ..config import NodeConfig
    from .status_text import render_status

    status = call_sync(NodeConfig(home=_home(args)).control_socket, "status")
    print(json.dumps(status, indent=2) if args.json else render_status(status))
    return 0


def cmd_run_create(args: argparse.Namespace) -> int:
    from ..api.control import call_sync
    from ..config import NodeConfig

    result = call_sync(
        NodeConfig(home=_home(args)).control_socket,
        "run.create",
        {
            "name": args.name,
            "mode": args.mode,
            "spec": run_spec_from_args(args),
            **role_params(args),
        },
        timeout=60,
    )
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"created run {result['name']} ({result['run_id'][:16]}…); "
            f"others join with --run {result['name']}"
        )
    return 0


def cmd_run_join(args: argparse.Namespace) -> int:
    from ..api.control import call_sync
    from ..config import NodeConfig

    result = call_sync(
        NodeConfig(home=_home(args)).control_socket,
        "run.join",
        {"name": args.name, "timeout": 60, **role_params(args)},
        timeout=120,
    )
    print(
        json.dumps(result)
        if args.json
        else f"joined run {result['name']} ({result['run_id'][:16]}…)"
    )
    return 0


def cmd_swarm_local(args: argparse.Namespace) -> int:
    from .local_swarm import LocalSwarmOptions, run_local_swarm

    if args.mode == "swarm":
        from .local_swarm import run_swarm_pipeline

        return run_swarm_pipeline(args, run_spec_from_args(args))
    if args.nodes < 1:
        raise NodeError("--nodes must be at least 1")
    options = LocalSwarmOptions(
        nodes=args.nodes,
        duration=args.duration,
        report=args.report,
        mode=args.mode,
        spec=run_spec_from_args(args),
        kill_every=args.kill_every,
        byzantine=args.byzantine,
        attack=args.attack,
    )
    return run_local_swarm(options)


if __name__ == "__main__":
    raise SystemExit(main())

"""What each `peertrain` command does (the parser in parser.py picks one per invocation).

Heavy imports (libp2p, torch, trio) happen inside the commands that need them, so `status` and
`id` answer quickly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import NodeError
from .options import data_params, role_params, run_spec_from_args


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
        "max_params": getattr(args, "max_params", None),
        "max_memory": getattr(args, "max_memory", None),
        "metrics_listen": getattr(args, "metrics_listen", None),
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
    config = _load(args, bootstrap=bootstrap, **_run_options(args))
    return cmd_node_start(args, config)


def _join_by_peer_id(args: argparse.Namespace) -> int:
    import multihash
    import trio
    from libp2p.peer.id import ID

    from ..errors import ConfigError
    from ..log_setup import setup_logging

    try:
        multihash.decode(ID.from_base58(args.peer).to_bytes())
    except ValueError:  # base58's and multihash's error for what is no peer ID
        raise ConfigError(
            f"{args.peer!r} is neither a peer address (/ip4/…/p2p/…) nor a peer ID (12D3KooW…)"
        ) from None
    config = _load(args, **_run_options(args))
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


def _run_options(args: argparse.Namespace) -> dict[str, Any]:
    data = data_params(args).get("data")
    if data is not None and not args.run:
        raise NodeError("--data belongs to a run: give --run too")
    if args.certificate and not args.run:
        raise NodeError("--certificate belongs to a run: give --run too")
    options: dict[str, Any] = {
        "run": args.run,
        "run_role": args.role,
        "run_data": data,
        "run_certificate": args.certificate,
    }
    if args.model:  # added to the configured ones (PEERTRAIN_TRUSTED_MODELS, config.toml)
        from ..config import load_config

        configured = load_config(args.home).trusted_models
        options["trusted_models"] = [*configured, args.model]
    return options


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

    socket = NodeConfig(home=_home(args)).control_socket
    if getattr(args, "watch", None):
        return _watch_status(socket, args.watch, as_json=args.json)
    status = call_sync(socket, "status")
    print(json.dumps(status, indent=2) if args.json else render_status(status))
    return 0


def _watch_status(socket: Path, every: float, *, as_json: bool) -> int:
    """Redraw the status until Ctrl-C: in place on a terminal, one frame after another in a pipe
    or log. A daemon that stops answering is said so, and the watch goes on (it may be
    restarting)."""
    import time

    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console()
    if not console.is_terminal:
        while True:
            print(_status_frame(socket, every, as_json=as_json), flush=True)
            time.sleep(max(every, 0.2))
    with Live(Text("asking the daemon…"), console=console, auto_refresh=False) as live:
        while True:
            live.update(Text(_status_frame(socket, every, as_json=as_json)))
            live.refresh()
            time.sleep(max(every, 0.2))


def _status_frame(socket: Path, every: float, *, as_json: bool) -> str:
    import time

    from ..api.control import call_sync
    from ..errors import ControlError
    from .status_text import render_status

    try:
        status = call_sync(socket, "status", timeout=max(every, 2.0))
        text = json.dumps(status, indent=2) if as_json else render_status(status)
    except ControlError as exc:
        text = f"{exc}\n(retrying every {every:g} s)"
    return f"{text}\n{time.strftime('%H:%M:%S')}  Ctrl-C to stop\n"


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
            **data_params(args),
        },
        timeout=60,
    )
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"created run {result['name']} ({result['run_id'][:16]}…); "
            f"others join with --run {result['run_id'][:16]}"
        )
    return 0


def cmd_run_join(args: argparse.Namespace) -> int:
    from ..api.control import call_sync
    from ..config import NodeConfig

    result = call_sync(
        NodeConfig(home=_home(args)).control_socket,
        "run.join",
        {
            "name": args.name,
            "timeout": args.timeout,
            **({"model": args.model} if args.model else {}),
            **({"certificate": args.certificate} if args.certificate else {}),
            **role_params(args),
            **data_params(args),
        },
        timeout=args.timeout + 60,  # the lookup, then building the member
    )
    print(
        json.dumps(result)
        if args.json
        else f"joined run {result['name']} ({result['run_id'][:16]}…)"
    )
    return 0


def cmd_run_export(args: argparse.Namespace) -> int:
    from ..api.control import call_sync
    from ..config import NodeConfig

    out = Path(args.out).expanduser().absolute()  # the daemon's working folder is not ours
    result = call_sync(
        NodeConfig(home=_home(args)).control_socket,
        "run.export",
        {"run": args.run, "out": str(out), "format": args.format},
        timeout=300,
    )
    if args.json:
        print(json.dumps(result))
    else:
        files = ", ".join(result["files"])
        print(f"exported run {result['run']} at round {result['round']} to {out}: {files}")
    return 0


def cmd_run_invite(args: argparse.Namespace) -> int:
    from ..api.control import call_sync
    from ..config import NodeConfig

    params = {"run": args.run, "peer": args.peer, "role": args.role, "expires": args.expires}
    result = call_sync(NodeConfig(home=_home(args)).control_socket, "run.invite", params)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"certified {result['peer']} as {result['role']} of run {result['name']} until "
            f"{_when(result['expires_ms'])}. Give them this command:\n"
            f"  peertrain join <your address> --run {result['run_id']} "
            f"--certificate {result['certificate']}"
        )
    return 0


def _when(ms: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ms / 1000))


def cmd_run_revoke(args: argparse.Namespace) -> int:
    from ..api.control import call_sync
    from ..config import NodeConfig

    params = {"run": args.run, "peer": args.peer}
    result = call_sync(NodeConfig(home=_home(args)).control_socket, "run.revoke", params)
    print(json.dumps(result) if args.json else f"revoked {result['peer']}")
    return 0


def cmd_run_list(args: argparse.Namespace) -> int:
    from ..api.control import call_sync
    from ..config import NodeConfig
    from .status_text import render_runs

    result = call_sync(NodeConfig(home=_home(args)).control_socket, "run.list", timeout=30)
    print(json.dumps(result["runs"], indent=2) if args.json else render_runs(result["runs"]))
    return 0


def cmd_swarm_local(args: argparse.Namespace) -> int:
    from .local_swarm import run_local_swarm

    if args.mode == "swarm":
        from .swarm_pipeline import PipelineSwarm, pipeline_options

        pipeline = pipeline_options(args, run_spec_from_args(args))
        return run_local_swarm(
            lambda base, console: PipelineSwarm(pipeline, base, console), pipeline.report
        )
    from .swarm_mesh import LocalSwarmOptions, MeshSwarm

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
    return run_local_swarm(lambda base, console: MeshSwarm(options, base, console), options.report)

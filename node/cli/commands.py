"""What each `peertrain` command does (the parser in parser.py picks one per invocation).

Heavy imports (libp2p, torch, trio) happen inside the commands that need them, so `status` and
`id` answer quickly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import NodeError
from .options import data_params, model_option, role_params, run_spec_from_args


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
        "slowdown": getattr(args, "slowdown", None),
        "uplink_mbit": getattr(args, "uplink_mbit", None),
        "max_params": getattr(args, "max_params", None),
        "max_memory": getattr(args, "max_memory", None),
        "metrics_listen": getattr(args, "metrics_listen", None),
        "device": getattr(args, "device", None),
        "precision": getattr(args, "precision", None),
        "ranks": getattr(args, "ranks", None),
        "public_name": getattr(args, "public_name", None),
        # the daemon may run elsewhere than the shell's folder later (a unit's WorkingDirectory)
        "tensorboard": _absolute(getattr(args, "tensorboard", None)),
        **extra,
    }
    return load_config(args.home, overrides)


def _absolute(folder: str | None) -> str | None:
    return str(Path(folder).expanduser().absolute()) if folder else folder


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

    from ..log_setup import LOG_FILE, setup_logging
    from .runner import serve_until_signalled

    config = config or _load(args)
    setup_logging(config.log_level, config.log_format, config.home / LOG_FILE)
    # OpenMP's default spin-waiting turns every parallel torch op into a wait for the scheduler
    # when other processes hold the cores (measured: int8 encode 3-5x slower); set before torch
    # loads
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    _check_device(config)
    ranks, followers = _start_ranks(config)
    try:
        trio.run(serve_until_signalled, config, ranks)
    finally:
        _stop_ranks(ranks, followers)
    _exit_now()
    return 0


def _check_device(config) -> None:
    """A named device this machine lacks fails now, with what torch sees, not at the first
    step of a run (torch is imported only when there is something to check)."""
    if config.device in ("auto", "cpu") and config.precision == "fp32":
        return
    from peertrain.swarm.devices import autocast_dtype, resolve_device

    autocast_dtype(resolve_device(config.device), config.precision)


def _start_ranks(config) -> tuple[Any, list]:
    """The ranks of a `--ranks N` node (node/cli/ranks.py); (None, []) for one process."""
    if config.ranks == 1:
        return None, []
    from .ranks import start_ranks

    return start_ranks(config)


def _stop_ranks(ranks: Any, followers: list) -> None:
    if followers:
        from .ranks import stop_ranks

        stop_ranks(ranks, followers)


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

    from ..errors import NodeConfigError
    from ..log_setup import LOG_FILE, setup_logging

    try:
        multihash.decode(ID.from_base58(args.peer).to_bytes())
    except ValueError:  # base58's and multihash's error for what is no peer ID
        raise NodeConfigError(
            f"{args.peer!r} is neither a peer address (/ip4/…/p2p/…) nor a peer ID (12D3KooW…)"
        ) from None
    config = _load(args, **_run_options(args))
    if not config.bootstrap:
        raise NodeConfigError(
            f"to join {args.peer} by its peer ID, also give --bootstrap with the address of "
            "any node of the network: the DHT finds the peer from there"
        )
    setup_logging(config.log_level, config.log_format, config.home / LOG_FILE)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see cmd_node_start
    _check_device(config)
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
        options["trusted_models"] = [*configured, model_option(args.model)]
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
        from .watch import watch_status

        return watch_status(socket, args.watch, as_json=args.json)
    status = call_sync(socket, "status")
    print(json.dumps(status, indent=2) if args.json else render_status(status))
    return 0


def cmd_run_create(args: argparse.Namespace) -> int:
    params = {"name": args.name, "mode": args.mode, "spec": run_spec_from_args(args)}
    return _enter_run(
        args,
        "run.create",
        params,
        # building the model and its initial state: seconds for a small one on a quiet machine,
        # over a minute on a busy one (the soak's 19 daemons on 2 cores) or for a large model
        timeout=300,
        text=lambda result: (
            f"created run {result['name']} ({result['run_id'][:16]}…); "
            f"others join with --run {result['run_id'][:16]}"
        ),
    )


def _enter_run(
    args: argparse.Namespace,
    method: str,
    params: dict[str, Any],
    *,
    timeout: float,
    text: Callable[[dict[str, Any]], str],
) -> int:
    """run.create or run.join, with this node's role and data options; prints the run the
    daemon is now in (`text` of it, or JSON), then follows it with `--follow`."""
    params = {**params, **role_params(args), **data_params(args)}
    result = call_daemon(args, method, params, timeout=timeout)
    print(json.dumps(result) if args.json else text(result), flush=True)
    return _follow(args, result["run_id"])


def call_daemon(
    args: argparse.Namespace,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    timeout: float = 10.0,
) -> Any:
    """`method` on the daemon of this command's home, through its control socket."""
    from ..api.control import call_sync
    from ..config import NodeConfig

    return call_sync(NodeConfig(home=_home(args)).control_socket, method, params, timeout=timeout)


def _follow(args: argparse.Namespace, run_id: str) -> int:
    """`--follow`: the run's progress until it ends (see watch.py)."""
    if not getattr(args, "follow", False):
        return 0
    from ..config import NodeConfig
    from .watch import follow_run

    return follow_run(NodeConfig(home=_home(args)).control_socket, run_id)


def cmd_run_join(args: argparse.Namespace) -> int:
    params = {
        "name": args.name,
        "timeout": args.timeout,
        **({"model": model_option(args.model)} if args.model else {}),
        **({"certificate": args.certificate} if args.certificate else {}),
    }
    return _enter_run(
        args,
        "run.join",
        params,
        timeout=args.timeout + 60,  # the lookup, then building the member
        text=lambda result: f"joined run {result['name']} ({result['run_id'][:16]}…)",
    )


def cmd_run_export(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser().absolute()  # the daemon's working folder is not ours
    result = call_daemon(
        args,
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


def cmd_run_leave(args: argparse.Namespace) -> int:
    result = call_daemon(args, "run.leave", {"run": args.run}, timeout=30)
    print(
        json.dumps(result)
        if args.json
        else f"left run {result['name']} ({result['run_id'][:16]}…); run join resumes it"
    )
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    if args.prompt is not None:
        return _sample_text(args)
    if args.out is None:
        raise NodeError("give --out FILE.png (diffusion runs) or --prompt TEXT (text runs)")
    out = Path(args.out).expanduser().absolute()  # the daemon writes it; its folder is not ours
    result = call_daemon(
        args,
        "diffusion.sample",
        {
            "run": args.run,
            "n": args.n,
            "strategy": args.strategy,
            "steps": args.steps,
            "seed": args.seed,
            "out": str(out),
            "fresh": args.fresh,
        },
        timeout=300,
    )
    if args.json:
        print(json.dumps(result))
    else:
        rounds = ", ".join(f"{g} round {s['round']}" for g, s in result["groups"].items())
        print(
            f"wrote {result['n']} samples ({result['strategy']}, {result['steps']} steps) to "
            f"{result['out']} in {result['seconds']:.1f} s ({result['bytes_fetched']:,} bytes "
            f"fetched); {rounds}"
        )
    return 0


def _sample_text(args: argparse.Namespace) -> int:
    """`sample --prompt`: the `run.sample` control call on a text run this node is in."""
    params = {"run": args.run, "prompt": args.prompt, "tokens": args.tokens}
    result = call_daemon(args, "run.sample", params, timeout=120)
    print(json.dumps(result) if args.json else result["text"])
    return 0


def cmd_run_list(args: argparse.Namespace) -> int:
    from .status_text import render_run_list

    result = call_daemon(args, "run.list", timeout=30)
    print(json.dumps(result["runs"], indent=2) if args.json else render_run_list(result))
    return 0


def cmd_swarm_local(args: argparse.Namespace) -> int:
    from .local_swarm import run_local_swarm

    if args.mode == "swarm":
        from .swarm_pipeline import PipelineSwarm, pipeline_options

        pipeline = pipeline_options(args, run_spec_from_args(args))
        return run_local_swarm(
            lambda base, console: PipelineSwarm(pipeline, base, console), pipeline.report
        )
    from .swarm_mesh import MeshSwarm, mesh_options

    options = mesh_options(args, run_spec_from_args(args))
    if args.mode == "diffusion":
        from .swarm_diffusion import DiffusionSwarm

        return run_local_swarm(
            lambda base, console: DiffusionSwarm(options, base, console), options.report
        )
    return run_local_swarm(lambda base, console: MeshSwarm(options, base, console), options.report)

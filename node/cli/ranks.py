"""`--ranks N`: this daemon is rank 0 of a node of N processes, one device each.

The daemon starts the N-1 followers (`python -m peertrain.node.cli.rank_follower`, no network
of their own, their output in the daemon's), joins their torch.distributed group on a loopback
port, and lends the group to one DiLoCo run at a time (node/runs/ranks.py). Followers end with
the daemon. Design: swarm/diloco/member/intra_node.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from typing import Any

from ..errors import NodeError


def start_ranks(config: Any) -> tuple[Any, list[subprocess.Popen]]:
    """Start the followers and meet them: (RankLease, follower processes)."""
    from peertrain.swarm.diloco.member.intra_node import IntraNode, RankLease

    port = _free_port()
    followers = [subprocess.Popen(_follower_command(config, rank, port))
                 for rank in range(1, config.ranks)]  # fmt: skip
    met: dict[str, Any] = {}

    def meet() -> None:
        met["node"] = IntraNode.join(rank=0, world=config.ranks, port=port, device=config.device)

    thread = threading.Thread(target=meet, daemon=True)  # never holds the process open
    thread.start()
    while thread.is_alive():
        thread.join(0.5)
        if any(f.poll() is not None for f in followers):
            stop_ranks(None, followers)
            raise NodeError(
                "a follower rank exited before the node's ranks met (its output is above)"
            )
    if "node" not in met:
        stop_ranks(None, followers)
        raise NodeError(f"the node's {config.ranks} ranks could not meet on port {port}")
    return RankLease(met["node"]), followers


def stop_ranks(lease: Any, followers: list[subprocess.Popen]) -> None:
    """Say goodbye (followers wait for a next run between runs), then make sure they end."""
    if lease is not None and lease.holder is None:  # else a run's collective would be crossed
        goodbye = threading.Thread(target=_goodbye, args=(lease.node,), daemon=True)
        goodbye.start()
        goodbye.join(timeout=5)
    for follower in followers:
        try:
            follower.wait(timeout=5)
        except subprocess.TimeoutExpired:
            break
    for follower in followers:
        if follower.poll() is None:
            follower.terminate()
    for follower in followers:
        try:
            follower.wait(timeout=5)
        except subprocess.TimeoutExpired:
            follower.kill()
            follower.wait()


def _goodbye(node: Any) -> None:
    from peertrain.swarm.diloco.member.intra_node import send_job

    try:
        send_job(node, None)
    except RuntimeError:  # gloo's error: the followers are gone already (a signal to the group)
        pass


def _follower_command(config: Any, rank: int, port: int) -> list[str]:
    command = [sys.executable, "-m", "peertrain.node.cli.rank_follower", "--rank", str(rank)]
    command += ["--world", str(config.ranks), "--port", str(port), "--device", config.device]
    return command + ["--precision", config.precision]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

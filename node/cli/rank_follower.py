"""A follower rank of a `--ranks N` node: no network, no home; it trains each DiLoCo run that
rank 0 (the daemon) sends it, as rank 0 commands (diloco/member/intra_node.py), until killed."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time


def main() -> None:
    from peertrain.swarm.diloco.member.build import run_follower
    from peertrain.swarm.diloco.member.intra_node import IntraNode, serve_jobs
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec

    parser = argparse.ArgumentParser(prog="peertrain rank follower")
    for name in ("--rank", "--world", "--port"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="fp32")
    args = parser.parse_args()
    _end_with_the_daemon()
    node = IntraNode.join(rank=args.rank, world=args.world, port=args.port, device=args.device)
    me = f"rank {args.rank}/{args.world} on {node.device}"
    print(f"{me}: joined the node", file=sys.stderr, flush=True)

    def follow(job: dict) -> None:
        spec = DiLoCoSpec.from_bytes(job["spec"])
        rounds, _ = run_follower(spec, node, data=job["data"], precision=args.precision)
        print(f"{me}: followed a run for {rounds} rounds", file=sys.stderr, flush=True)

    serve_jobs(node, follow)
    print(f"{me}: the node stopped", file=sys.stderr, flush=True)


def _end_with_the_daemon() -> None:
    """Ctrl-C reaches the whole process group: the daemon, not us, decides how ranks stop. A
    daemon that died without stopping us (SIGKILL) leaves us orphaned: then we exit too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    main()

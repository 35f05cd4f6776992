"""A bare host running the dial-back check, for the namespace tests (run as a script in a netns).

    python dialback_node.py --listen /ip4/IP/tcp/PORT [--ask FULL_ADDR ...]

Prints one JSON line {"addr": …} once listening. With --ask it connects to those peers, checks
its reachability until decided (20 s at most), prints {"verdict": …} and exits; without, it
serves the check until stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

import trio
from multiaddr import Multiaddr
from peertrain.node.nat.reachability import ReachabilityCheck
from peertrain.node.net.host import build_host, parse_peer_addr
from peertrain.node.net.identity import Identity
from peertrain.testing import wait_until


async def main(listen: str, ask: list[str]) -> None:
    host = build_host(Identity.generate(), dial_timeout=5.0)
    async with host.run([Multiaddr(listen)]), trio.open_nursery() as nursery:
        check = ReachabilityCheck(host, interval=3600, retry=0.5)
        await nursery.start(check.run) if not ask else check.server.register()
        print(json.dumps({"addr": f"{host.get_addrs()[0]}"}), flush=True)
        if not ask:
            await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        else:
            for addr in ask:
                await host.connect(parse_peer_addr(addr))

            async def decided() -> bool:  # each pass asks the peers again
                return (await check.check()).status != "unknown"

            with contextlib.suppress(TimeoutError):  # undecided is a verdict the test reads
                await wait_until(decided, timeout=20, interval=0.5, what="a verdict")
            print(json.dumps({"verdict": check.current.as_dict()}), flush=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--ask", action="append", default=[])
    args = parser.parse_args()
    trio.run(main, args.listen, args.ask)

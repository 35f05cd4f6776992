"""A ban bites: the banned peer is disconnected, its reconnects are closed, its streams refused."""

from __future__ import annotations

import trio
from libp2p.peer.peerinfo import PeerInfo
from peertrain.node.net.host import build_host, connect
from peertrain.node.net.identity import Identity
from peertrain.testing import open_test_swarm, wait_until


async def _junk(attacker, victim) -> None:
    with trio.move_on_after(3):
        try:
            stream = await attacker.new_stream(victim.host.get_id(), ["/meshsub/1.1.0"])
            await stream.write(b"\x09" + b"\xff" * 9)
            await trio.sleep(0.2)
        except Exception:  # noqa: BLE001 - once banned, the victim resets or hangs up on us
            pass


async def test_a_peer_banned_for_junk_is_disconnected_and_cannot_come_back():
    async with open_test_swarm(1) as (victim,):
        attacker = build_host(Identity.generate())
        async with attacker.run([]):
            info = PeerInfo(victim.host.get_id(), victim.host.get_addrs())
            await connect(attacker, info)
            me = attacker.get_id()
            for _ in range(6):  # 25 points each: banned at 100
                await _junk(attacker, victim)
                if victim.scoreboard.is_banned(me.to_base58()):
                    break
            assert victim.scoreboard.is_banned(me.to_base58())
            await wait_until(lambda: me not in victim.host.get_connected_peers(), timeout=5)

            try:
                await connect(attacker, info)
            except Exception:  # noqa: BLE001 - refused outright is as good as closed at once
                pass
            await wait_until(lambda: me not in victim.host.get_connected_peers(), timeout=5)
            assert victim.bans.disconnections >= 1

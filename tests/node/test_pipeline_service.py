"""SWARM pipeline services on real in-process daemons (libp2p on loopback): stage servers and a
trainer find each other through RunState, microbatches cross the network, servers refuse bad
input with an error and a penalty and keep serving."""

from __future__ import annotations

import math

import pytest
import torch
import trio
from libp2p.peer.id import ID
from peertrain.dht import stage_key
from peertrain.node.runs.pipeline_transport import NetworkStageTransport
from peertrain.protocol.framing import read_message, write_message
from peertrain.protocol.messages import ErrorResponse
from peertrain.protocol.tensors import TensorHeader, root_checksum
from peertrain.swarm.pipeline.boundary import pack
from peertrain.swarm.pipeline.errors import ServerUnavailable
from peertrain.swarm.pipeline.membership import servers as stage_servers
from peertrain.swarm.pipeline.wire import PIPELINE, StageCall, StageReply
from peertrain.testing import open_test_swarm, wait_until

SPEC = {"stages": 3, "batch_size": 16, "target_batch": 64, "in_flight": 4, "lr": 0.003}


async def start_pipeline(nodes, *, trainers: int = 1, spec: dict = SPEC):
    """Node 0 creates the run and serves; the next servers join; the last `trainers` train."""
    session = await nodes[0].runs.create(
        name="pipe", mode="swarm", spec=spec, role={"role": "server"}
    )
    for node in nodes[1:]:
        await wait_until(lambda node=node: len(node.host.get_connected_peers()) > 0, timeout=10)
    # each joiner claims its stage before the next one looks for the stage with the most need
    # (the first waits for the creator's claim by itself, which comes once the creator has built
    # its pipeline: a second or more when torch is imported cold)
    servers = nodes[: len(nodes) - trainers]
    for node in servers[1:]:
        await node.runs.join("pipe", timeout=10, role={"role": "server"})
        me = node.identity.peer_id.to_base58()
        await wait_until(
            lambda me=me: me in stage_servers(session.state, spec["stages"]), timeout=10
        )
    for node in nodes[len(servers) :]:
        await node.runs.join("pipe", timeout=10, role={"role": "trainer"})
    return session


def run_status(node) -> dict:
    return next(iter(node.runs.sessions.values())).status()


async def test_three_servers_and_a_trainer_train_over_the_network_with_int8_boundaries():
    async with open_test_swarm(4) as nodes:
        session = await start_pipeline(nodes, spec={**SPEC, "codec": "int8"})
        await wait_until(
            lambda: all(run_status(n)["phase"] == "serving" for n in nodes[:3]), timeout=20
        )
        stages = sorted(run_status(n)["stage"] for n in nodes[:3])
        assert stages == [0, 1, 2]  # joiners took the stage with most need, one each
        trainer = nodes[3]
        await wait_until(
            lambda: run_status(trainer).get("completed", 0) >= 120, timeout=60, interval=0.2
        )
        status = run_status(trainer)
        assert status["lost_microbatches"] == 0
        assert status["loss"] < status["initial_loss"] - 0.3  # it learns
        steps = [run_status(n)["steps"] for n in nodes[:3]]
        assert min(steps) >= 2  # every stage averaged (alone here) and stepped
        for server in nodes[:3]:  # and each is findable in the DHT under its stage key
            key = stage_key(session.run_id[:64], run_status(server)["stage"])
            with trio.fail_after(20):
                while server.identity.peer_id.to_base58() not in await trainer.dht.dht.get(key):  # noqa: ASYNC110
                    await trio.sleep(0.2)


async def test_a_server_refuses_bad_input_penalises_the_sender_and_keeps_serving():
    async with open_test_swarm(4) as nodes:
        session = await start_pipeline(nodes)
        client = nodes[3]  # a trainer, misbehaving by hand
        transport = NetworkStageTransport(client.host, session.run_id, timeout=5)
        await wait_until(
            lambda: all(run_status(n)["phase"] == "serving" for n in nodes[:3]), timeout=20
        )
        stage0 = next(n for n in nodes[:3] if run_status(n)["stage"] == 0)
        peer = stage0.identity.peer_id.to_base58()
        me = client.identity.peer_id.to_base58()
        board = stage0.scoreboard
        good = pack(torch.randn(4, 64))
        nan = pack(torch.full((4, 64), float("nan")))
        narrow = pack(torch.randn(4, 7))
        for bad in (nan, narrow):
            with pytest.raises(ServerUnavailable, match="RemoteError"):
                await transport.forward(peer, stage=0, x=bad)
        with pytest.raises(ServerUnavailable, match="serves stage 0"):
            await transport.forward(peer, stage=1, x=good)
        reply = await oversized_call(client, peer, session.run_id)
        assert isinstance(reply, ErrorResponse) and "limit" in reply.reason
        assert board.score(me) >= 3 * 25
        out = await transport.forward(peer, stage=0, x=good)  # still serving, the same peer too
        assert out.shape == (4, 64) and math.isfinite(float(out.payload.float().sum()))


async def oversized_call(client, peer: str, run_id: str):
    """A call announcing a 1 GiB activation: refused from its header, before any allocation."""
    rows, width = 1 << 22, 64
    fields = dict(
        name="boundary",
        dtype="float32",
        shape=(rows, width),
        codec="fp32",
        block_size=1,
        nbytes=rows * width * 4,
        chunk_size=1 << 30,
        chunk_digests=bytes(32),
    )
    header = TensorHeader(**fields, checksum=root_checksum(**fields))
    call = StageCall(run=run_id, op="forward", stage=0, tensors=(header,))
    stream = await client.host.new_stream(ID.from_base58(peer), [str(PIPELINE)])
    try:
        await write_message(stream, call, idle_timeout=5)
        return await read_message(stream, (StageReply, ErrorResponse), idle_timeout=5)
    finally:
        await stream.close()


async def test_stage_calls_from_a_non_member_are_refused_before_their_tensors_are_read():
    """Issue 14: a peer with no member record in the run (a stranger that never joined) gets
    nothing computed: refused, penalised, and counted in the server's `dropped`."""
    async with open_test_swarm(4) as nodes:
        session = await start_pipeline(nodes[:3], trainers=0)
        stranger = nodes[3]
        await wait_until(
            lambda: all(run_status(n)["phase"] == "serving" for n in nodes[:3]), timeout=20
        )
        stage0 = next(n for n in nodes[:3] if run_status(n)["stage"] == 0)
        peer = stage0.identity.peer_id.to_base58()
        transport = NetworkStageTransport(stranger.host, session.run_id, timeout=5)
        calls = run_status(stage0)["calls"]
        for _ in range(3):
            with pytest.raises(ServerUnavailable, match="no member of this run"):
                await transport.forward(peer, stage=0, x=pack(torch.randn(4, 64)))
        status = run_status(stage0)
        assert status["dropped"]["stage_calls"] == 3 and status["calls"] == calls
        assert stage0.scoreboard.score(stranger.identity.peer_id.to_base58()) > 0


GPT_SPEC = {
    "model": "gpt",
    "stages": 3,
    "model_settings": {"n_layer": 3, "n_embd": 32, "n_head": 2, "block_size": 16},
    "dataset_settings": {"max_bytes": 200_000},
    "batch_size": 8,
    "target_batch": 16,
    "in_flight": 4,
    "lr": 0.003,
}


async def test_a_gpt_cut_into_three_stages_trains_over_the_network():
    # token ids into stage 0, (rows, seq, n_embd) activations across the cuts, (rows, seq)
    # labels flat in the last stage's call: nothing refused, nothing lost, the loss falls
    async with open_test_swarm(4) as nodes:
        await start_pipeline(nodes, spec=GPT_SPEC)
        trainer = nodes[3]
        await wait_until(
            lambda: run_status(trainer).get("completed", 0) >= 60, timeout=120, interval=0.2
        )
        status = run_status(trainer)
        assert status["lost_microbatches"] == 0 and status["retries"] == 0
        assert [run_status(n)["refused"] for n in nodes[:3]] == [0, 0, 0]
        assert status["initial_loss"] > 4.0 and status["loss"] < status["initial_loss"] - 0.5

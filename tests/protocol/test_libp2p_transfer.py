"""A tensor and messages over a real py-libp2p TCP + Noise + Yamux stream on loopback."""

from __future__ import annotations

import torch
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.config import ConnectionConfig
from libp2p.peer.peerinfo import PeerInfo
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from multiaddr import Multiaddr
from peertrain.protocol.errors import StreamEnded
from peertrain.protocol.ids import protocol_id
from peertrain.protocol.tensor_transfer import fetch_chunks, request_header, serve_tensor_request
from peertrain.protocol.tensors import prepare_tensor

TENSOR_PROTOCOL = protocol_id("tensor", "1.0.0")


def _host():
    key_pair = create_new_key_pair()
    noise = NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)
    return new_host(
        key_pair=key_pair,
        sec_opt={NOISE_ID: noise},
        muxer_opt={YAMUX_ID: Yamux},
        connection_config=ConnectionConfig(max_connections_per_peer=1),
    )


async def test_tensor_download_over_noise_and_yamux():
    update = torch.randn(3_000_000, generator=torch.Generator().manual_seed(9))
    prepared = prepare_tensor("delta", update, codec="int8", chunk_size=1 << 20)  # 3 MB, 3 chunks
    holder, client = _host(), _host()

    async def handle(stream):
        try:
            while True:
                await serve_tensor_request(stream, {prepared.header.checksum: prepared}.get)
        except StreamEnded:
            pass
        finally:
            await stream.close()

    holder.set_stream_handler(TProtocol(str(TENSOR_PROTOCOL)), handle)
    listen = [Multiaddr("/ip4/127.0.0.1/tcp/0")]
    with trio.fail_after(30):
        async with holder.run(listen_addrs=listen), client.run(listen_addrs=listen):
            await client.connect(PeerInfo(holder.get_id(), holder.get_addrs()))
            stream = await client.new_stream(holder.get_id(), [TProtocol(str(TENSOR_PROTOCOL))])
            download = await request_header(stream, prepared.header.checksum, max_nbytes=1 << 30)
            first, count = download.next_missing_range()
            await fetch_chunks(stream, download, first_chunk=first, count=count)
            await stream.close()
            decoded = await trio.to_thread.run_sync(download.finish)
    assert download.complete
    assert float((decoded - update).norm() / update.norm()) < 0.01

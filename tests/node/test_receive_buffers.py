"""Receive buffers are reused only once nothing can read them any more."""

from __future__ import annotations

import torch
from peertrain.node.net.receive_buffers import ReceiveBuffers


def test_a_buffer_is_reused_after_its_last_reader_is_gone():
    pool = ReceiveBuffers()
    first = pool.acquire(1000)
    address = first.data_ptr()
    del first
    again = pool.acquire(1000)
    assert again.data_ptr() == address and (pool.allocated, pool.reused) == (1, 1)


def test_views_of_every_kind_keep_a_buffer_lent():
    for make_view in (
        lambda t: memoryview(t.numpy()),
        lambda t: t.numpy(),
        lambda t: t[10:20],
        lambda t: t.view(torch.int8),
        lambda t: torch.frombuffer(memoryview(t.numpy()), dtype=torch.uint8),
    ):
        pool = ReceiveBuffers()
        lease = pool.acquire(1000)
        address = lease.data_ptr()
        view = make_view(lease)
        del lease
        assert pool.idle(1000) == 0
        assert pool.acquire(1000).data_ptr() != address  # still read through `view`: not reused
        del view
        assert pool.idle(1000) == 2


def test_sizes_do_not_mix_and_idle_buffers_are_bounded():
    pool = ReceiveBuffers(max_free=2)
    leases = [pool.acquire(100) for _ in range(4)] + [pool.acquire(200)]
    del leases
    assert pool.idle(100) == 2 and pool.idle(200) == 0  # the free list holds at most two
    assert pool.acquire(300).numel() == 300


def test_reserve_faults_in_buffers_for_later():
    pool = ReceiveBuffers()
    pool.reserve(3, 4096)
    assert pool.idle(4096) == 3 and pool.allocated == 3
    pool.reserve(2, 4096)  # already there: nothing new
    assert pool.allocated == 3
    leases = [pool.acquire(4096) for _ in range(3)]
    assert pool.reused == 3 and len({t.data_ptr() for t in leases}) == 3


def test_a_members_encoder_writes_its_payloads_into_idle_buffers_only():
    """The member's own update reuses an old round's payload memory (no 100 MB faulted in per
    round), never one still referenced: a payload kept (served on, replayed) keeps its bytes."""
    from peertrain.swarm.exchange.codec import ErrorFeedbackEncoder, ProtocolCodec

    numel = 10_000
    codec = ProtocolCodec("int8")
    pool, encoder = ReceiveBuffers(), ErrorFeedbackEncoder(codec, numel)
    encoder.allocate = pool.acquire
    pool.reserve(1, codec.payload_bytes(numel))
    deltas = [torch.randn(numel, generator=torch.Generator().manual_seed(k)) for k in range(3)]
    kept = encoder.encode(deltas[0])
    kept_bytes = bytes(kept)
    assert (pool.allocated, pool.reused) == (1, 1)  # the reserved buffer
    second = encoder.encode(deltas[1])
    assert pool.allocated == 2 and bytes(kept) == kept_bytes  # `kept` is still read: a new one
    second_bytes = bytes(second)
    del second
    third = encoder.encode(deltas[2])
    assert pool.allocated == 2 and pool.reused == 2  # the second round's memory again
    assert bytes(kept) == kept_bytes and bytes(third) != second_bytes

"""Tensor transfer: header checks before allocation, chunk verification, resuming elsewhere."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from peertrain.protocol.errors import (
    ChecksumMismatch,
    DecodeError,
    MessageTooLarge,
    ProtocolError,
    RemoteError,
    StreamEnded,
)
from peertrain.protocol.messages import decode, encode
from peertrain.protocol.tensor_transfer import fetch_chunks, request_header, serve_tensor_request
from peertrain.protocol.tensors import (
    PreparedTensor,
    TensorDownload,
    TensorHeader,
    check_header,
    prepare_tensor,
    root_checksum,
)

CHUNK = 1 << 16
MAX = 1 << 30
WEIGHTS = torch.randn(
    100_000, generator=torch.Generator().manual_seed(5)
)  # int8: 2 chunks of 64 KiB
UPDATE = torch.randn(250, 1000, generator=torch.Generator().manual_seed(6))


def _prepared(codec: str = "int8", tensor: torch.Tensor = UPDATE) -> PreparedTensor:
    return prepare_tensor("blocks.0.mlp", tensor, codec=codec, chunk_size=CHUNK)


def _rehash(header: TensorHeader, **changes) -> TensorHeader:
    """A header with `changes` and a checksum that matches them (a self-consistent forgery)."""
    fields = {f.name: getattr(header, f.name) for f in dataclasses.fields(header)} | changes
    fields.pop("checksum")
    return TensorHeader(**fields, checksum=root_checksum(**fields))


def test_header_round_trips_and_checks():
    header = _prepared().header
    assert header.num_chunks == 4
    back = decode(encode(header), TensorHeader)
    check_header(back, max_nbytes=MAX, expected_checksum=header.checksum)


def test_a_header_claiming_a_terabyte_is_refused_before_allocating():
    header = _rehash(_prepared("fp32").header, shape=(2**38,), nbytes=2**40)
    with pytest.raises(MessageTooLarge):
        TensorDownload(header, max_nbytes=MAX)
    hostile = _rehash(_prepared().header, shape=(2**48,) * 8)
    with pytest.raises(DecodeError, match="does not fit shape"):
        TensorDownload(hostile, max_nbytes=MAX)


def test_an_int4_tensor_passes_the_checks_of_its_own_size():
    """Two values a byte: a header limited to its payload's size still fits."""
    prepared = _prepared("int4")
    assert prepared.header.nbytes < UPDATE.numel()
    check_header(prepared.header, max_nbytes=prepared.header.nbytes)


@pytest.mark.parametrize(
    "changes",
    [
        dict(shape=(1000, 250)),
        dict(dtype="float16"),
        dict(dtype="bfloat16"),
        dict(name="blocks.1.mlp"),
        dict(chunk_digests=b"\x00" * 128),
    ],
)
def test_tampered_headers_fail_their_checksum(changes):
    header = dataclasses.replace(_prepared().header, **changes)
    with pytest.raises(ChecksumMismatch):
        check_header(header, max_nbytes=MAX)


def test_a_consistent_header_that_was_not_announced_is_refused():
    forged = _rehash(_prepared().header, name="other")
    with pytest.raises(ChecksumMismatch, match="not the one announced"):
        check_header(forged, max_nbytes=MAX, expected_checksum=_prepared().header.checksum)


@pytest.mark.parametrize(
    "changes, error",
    [
        (dict(nbytes=10), DecodeError),
        (dict(codec="int4"), DecodeError),
        (dict(dtype="int64"), DecodeError),
        (dict(chunk_size=3 * CHUNK), DecodeError),
        (dict(chunk_digests=b"\x00" * 96), DecodeError),
    ],
)
def test_inconsistent_headers_are_decode_errors(changes, error):
    with pytest.raises(error):
        check_header(_rehash(_prepared().header, **changes), max_nbytes=MAX)


@settings(max_examples=300, deadline=None)
@given(
    shape=st.lists(st.integers(0, 2**48), max_size=8).map(tuple),
    nbytes=st.integers(0, 2**62),
    chunk_size=st.sampled_from([1 << 16, 1 << 20, 3 << 16, 1 << 30]),
    n_digests=st.integers(0, 64),
    codec=st.sampled_from(["fp32", "int8", "int8-f16", "zip"]),
    block_size=st.integers(1, 1 << 16),
)
def test_random_headers_raise_only_protocol_errors_and_never_overallocate(
    shape, nbytes, chunk_size, n_digests, codec, block_size
):
    fields = dict(
        name="x",
        dtype="float32",
        shape=shape,
        codec=codec,
        block_size=block_size,
        nbytes=nbytes,
        chunk_size=chunk_size,
        chunk_digests=b"d" * 32 * n_digests,
    )
    header = TensorHeader(**fields, checksum=root_checksum(**fields))
    try:
        download = TensorDownload(header, max_nbytes=1 << 20)
    except ProtocolError:
        return
    assert download.payload.numel() <= 1 << 20


async def _serve(stream, prepared_tensors, *, cut_after: int | None = None):
    """A holder answering requests on `stream` until it ends; `cut_after` bytes, then it dies."""
    by_checksum = {p.header.checksum: p for p in prepared_tensors}
    sent = 0

    class Cutting:
        async def read(self, n=None):
            return await stream.read(n)

        async def write(self, data):
            nonlocal sent
            if cut_after is not None and sent + len(data) > cut_after:
                await stream.write(bytes(data[: cut_after - sent]))
                await stream.close()
                raise trio.ClosedResourceError
            sent += len(data)
            await stream.write(data)

    try:
        while True:
            await serve_tensor_request(Cutting(), by_checksum.get)
    except (StreamEnded, trio.ClosedResourceError):
        pass


async def _fetch_all(stream, download):
    while (missing := download.next_missing_range()) is not None:
        await fetch_chunks(stream, download, first_chunk=missing[0], count=missing[1])


@pytest.mark.parametrize("codec", ["fp32", "bf16", "int8"])
async def test_download_from_one_holder(codec, stream_pair):
    prepared = _prepared(codec)
    client, holder = stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve, holder, [prepared])
        download = await request_header(client, prepared.header.checksum, max_nbytes=MAX)
        await _fetch_all(client, download)
        await client.close()
    expected = torch.from_numpy(prepared.payload.numpy().copy())
    assert torch.equal(download.payload, expected)
    assert download.finish().shape == UPDATE.shape


async def test_download_resumes_from_another_holder_after_a_failure(stream_pair):
    prepared = _prepared("fp32")  # 1 MB: 16 chunks
    a_client, a_holder = stream_pair()
    b_client, b_holder = stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _serve(a_holder, [prepared], cut_after=5 * CHUNK + 1000))
        nursery.start_soon(_serve, b_holder, [prepared])
        download = await request_header(a_client, prepared.header.checksum, max_nbytes=MAX)
        with pytest.raises(StreamEnded):
            await _fetch_all(a_client, download)
        assert download.next_missing_range() == (5, 11)  # chunks 0-4 arrived before the cut
        await _fetch_all(b_client, download)
        await b_client.close()
    assert torch.equal(download.finish(), UPDATE)


async def test_a_lying_holder_is_caught_at_its_first_bad_chunk(stream_pair):
    honest = _prepared("fp32")
    corrupted = honest.payload.clone()
    corrupted[2 * CHUNK + 7] ^= 1
    liar = PreparedTensor(header=honest.header, payload=corrupted)
    l_client, l_holder = stream_pair()
    h_client, h_holder = stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve, l_holder, [liar])
        nursery.start_soon(_serve, h_holder, [honest])
        download = await request_header(l_client, honest.header.checksum, max_nbytes=MAX)
        with pytest.raises(ChecksumMismatch, match="chunk 2"):
            await _fetch_all(l_client, download)
        assert download.missing_chunks()[0] == 2
        await _fetch_all(h_client, download)
        for c in (l_client, h_client):
            await c.close()
    assert torch.equal(download.finish(), UPDATE)


async def test_unknown_tensors_and_bad_ranges_are_refused(stream_pair):
    prepared = _prepared()
    client, holder = stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve, holder, [prepared])
        with pytest.raises(RemoteError, match="no such tensor"):
            await request_header(client, b"x" * 32, max_nbytes=MAX)
        download = await request_header(client, prepared.header.checksum, max_nbytes=MAX)
        with pytest.raises(RemoteError, match="outside"):
            await fetch_chunks(client, download, first_chunk=3, count=2)
        await client.close()


async def test_a_substituted_header_is_refused(stream_pair):
    prepared, other = _prepared(), _prepared("fp16")
    client, holder = stream_pair()
    async with trio.open_nursery() as nursery:
        # The holder answers every checksum with the other tensor's header.
        nursery.start_soon(
            _serve,
            holder,
            [
                dataclasses.replace(
                    other,
                    header=dataclasses.replace(other.header, checksum=prepared.header.checksum),
                )
            ],
        )
        with pytest.raises(ChecksumMismatch):
            await request_header(client, prepared.header.checksum, max_nbytes=MAX)
        await client.close()

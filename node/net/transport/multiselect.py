"""Multistream-select for the dialer, pipelined: the header and the first protocol in one write.

py-libp2p 0.8.1's client writes `/multistream/1.0.0`, waits for the peer's header, then writes
the protocol and waits for its echo: a round trip more than needed, and it negotiates three
times per connection (security, muxer) and once per stream. The spec lets the dialer send both
lines at once (go-libp2p's `SelectProtoOrFail` does); a listener answers the header, then the
protocol, so the first choice costs one round trip. Refused ("na"), the rest of the list goes
the upstream way, one protocol at a time. Nothing changes on the wire but the timing.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio
from libp2p.abc import IHost, IMultiselectCommunicator
from libp2p.custom_types import TProtocol
from libp2p.io.exceptions import IOException
from libp2p.protocol_muxer.exceptions import (
    MultiselectClientError,
    MultiselectCommunicatorError,
    ProtocolNotSupportedError,
)
from libp2p.protocol_muxer.multiselect_client import (
    DEFAULT_NEGOTIATE_TIMEOUT,
    MULTISELECT_PROTOCOL_ID,
    PROTOCOL_NOT_FOUND_MSG,
    MultiselectClient,
    is_valid_handshake,
)
from libp2p.utils import encode_delim

__all__ = ["PipelinedMultiselectClient", "use_pipelined_negotiation"]

_HEADER = encode_delim(MULTISELECT_PROTOCOL_ID.encode())


class PipelinedMultiselectClient(MultiselectClient):
    async def select_one_of(
        self,
        protocols: Sequence[TProtocol],
        communicator: IMultiselectCommunicator,
        negotiate_timeout: int = DEFAULT_NEGOTIATE_TIMEOUT,
    ) -> TProtocol:
        if not protocols:
            raise MultiselectClientError("no protocol to select")
        with trio.move_on_after(negotiate_timeout):
            first = protocols[0]
            await _write(communicator, _HEADER + encode_delim(str(first).encode()))
            header = await _read(communicator)
            if not is_valid_handshake(header):
                raise MultiselectClientError(
                    f"multiselect protocol ID mismatch: expected {MULTISELECT_PROTOCOL_ID},"
                    f" got {header!r}"
                )
            answer = await _read(communicator)
            if answer == str(first):
                return first
            if answer != PROTOCOL_NOT_FOUND_MSG:
                raise MultiselectClientError(
                    f"unrecognized response {answer!r}, expected {str(first)!r} or 'na'"
                )
            for protocol in protocols[1:]:
                try:
                    return await self.try_select(communicator, protocol)
                except ProtocolNotSupportedError:
                    continue
            raise ProtocolNotSupportedError(f"the peer supports none of {list(protocols)}")
        raise MultiselectClientError(
            f"response timed out after {negotiate_timeout}s, protocols tried: {list(protocols)}"
        )


async def _write(communicator: IMultiselectCommunicator, data: bytes) -> None:
    try:
        await communicator.read_writer.write(data)  # type: ignore[attr-defined]
    except (IOException, AssertionError, ValueError) as exc:  # what upstream's write catches
        raise MultiselectClientError(f"multiselect write failed: {exc}") from exc


async def _read(communicator: IMultiselectCommunicator) -> str:
    try:
        return await communicator.read()
    except MultiselectCommunicatorError as exc:
        raise MultiselectClientError(f"multiselect read failed: {exc}") from exc


def use_pipelined_negotiation(host: IHost) -> None:
    """Security, muxer and stream protocols of `host` negotiated the pipelined way (call after
    `use_registered_muxers`, which replaces the muxer negotiation)."""
    client = PipelinedMultiselectClient()
    upgrader = host.get_network().upgrader  # type: ignore[attr-defined]
    upgrader.security_multistream._selector.multiselect_client = client
    upgrader.muxer_multistream._selector.multiselect_client = client
    host.multiselect_client = client  # type: ignore[attr-defined]

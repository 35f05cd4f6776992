"""Ending a libp2p stream that the other side may already have ended.

`close()` or `reset()` on a stream the peer reset, or whose connection died, raises one of
several upstream types (StreamReset, MuxedStreamError, a closed-resource error from trio): the
stream is gone either way, which is all the caller wanted, so nothing is worth reporting.
"""

from __future__ import annotations

from libp2p.abc import INetStream


async def close_quietly(stream: INetStream) -> None:
    """Close `stream`; a stream already reset or cut off counts as closed."""
    try:
        await stream.close()
    except Exception:  # noqa: BLE001 - already reset by the peer or cut off: it is closed
        pass


async def reset_quietly(stream: INetStream) -> None:
    """Reset `stream`; a stream already reset or cut off counts as reset."""
    try:
        await stream.reset()
    except Exception:  # noqa: BLE001 - already reset by the peer or cut off: it is gone
        pass

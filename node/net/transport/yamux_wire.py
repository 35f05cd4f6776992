"""Yamux's wire constants and header layout (hashicorp/yamux spec.md), shared by muxer and stream.

A frame is a 12-byte header `version:u8 type:u8 flags:u16 stream_id:u32 length:u32`
(big-endian), followed by `length` payload bytes for DATA frames only. For WINDOW_UPDATE the
length is a window increment, for PING an opaque value, for GO_AWAY an error code. Every
stream starts with a 256 KiB receive window on both sides; only WINDOW_UPDATE grows it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID

__all__ = ["PROTOCOL_ID", "HEADER", "header"]

VERSION = 0

DATA = 0x0
WINDOW_UPDATE = 0x1
PING = 0x2
GO_AWAY = 0x3

SYN = 0x1
ACK = 0x2
FIN = 0x4
RST = 0x8

GO_AWAY_NORMAL = 0x0
GO_AWAY_PROTOCOL_ERROR = 0x1
GO_AWAY_INTERNAL_ERROR = 0x2

INITIAL_WINDOW = 256 * 1024
MAX_STREAM_ID = (1 << 32) - 1

HEADER = struct.Struct(">BBHII")


def header(frame_type: int, flags: int, stream_id: int, length: int) -> bytes:
    return HEADER.pack(VERSION, frame_type, flags, stream_id, length)


MAX_PEER_FRAME = 1 << 20  # rust-yamux rejects DATA bodies above 1 MiB


@dataclass(frozen=True, slots=True, kw_only=True)
class YamuxConfig:
    max_window: int = 16 << 20  # per-stream receive window ceiling (go-yamux's default too)
    max_frame: int = 1 << 20  # payload bytes per DATA frame we send (rust-yamux takes <= 1 MiB)
    max_streams: int = 1024  # open streams per connection, both directions
    accept_backlog: int = 256  # inbound streams not yet accepted

    def __post_init__(self) -> None:
        if self.max_window < INITIAL_WINDOW:
            raise ValueError(f"max_window must be at least the initial {INITIAL_WINDOW} bytes")
        if not 0 < self.max_frame <= min(self.max_window, MAX_PEER_FRAME):
            raise ValueError(
                f"max_frame must be positive, at most max_window and at most {MAX_PEER_FRAME}"
                " (rust-libp2p's Yamux refuses larger DATA frames)"
            )

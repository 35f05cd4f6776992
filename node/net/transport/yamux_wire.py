"""Yamux's wire constants and header layout (hashicorp/yamux spec.md), shared by muxer and stream.

A frame is a 12-byte header `version:u8 type:u8 flags:u16 stream_id:u32 length:u32`
(big-endian), followed by `length` payload bytes for DATA frames only. For WINDOW_UPDATE the
length is a window increment, for PING an opaque value, for GO_AWAY an error code. Every
stream starts with a 256 KiB receive window on both sides; only WINDOW_UPDATE grows it.
"""

from __future__ import annotations

import struct

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

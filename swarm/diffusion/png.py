"""A grid of images as a PNG, written with zlib alone (no imaging library is a dependency)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
from torch import Tensor


def image_grid(images: Tensor, *, columns: int = 8, padding: int = 1, scale: int = 1) -> np.ndarray:
    """[N, C, H, W] images in [-1, 1] tiled into one uint8 [rows, cols] (C = 1) or [.., .., 3]."""
    n, c, h, w = images.shape
    pixels = ((images.detach().float().clamp(-1, 1) + 1) * 127.5).round().numpy().astype(np.uint8)
    pixels = pixels.repeat(scale, axis=2).repeat(scale, axis=3)
    h, w = h * scale, w * scale
    rows = -(-n // columns)
    grid = np.zeros(
        (rows * (h + padding) + padding, columns * (w + padding) + padding, c), np.uint8
    )
    for i in range(n):
        top, left = (
            padding + (i // columns) * (h + padding),
            padding + (i % columns) * (w + padding),
        )
        grid[top : top + h, left : left + w] = pixels[i].transpose(1, 2, 0)
    return grid[:, :, 0] if c == 1 else grid


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))
        + kind
        + payload
        + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)
    )


def png_bytes(pixels: np.ndarray) -> bytes:
    """An 8-bit greyscale ([H, W]) or RGB ([H, W, 3]) PNG."""
    height, width = pixels.shape[:2]
    colour_type = 0 if pixels.ndim == 2 else 2
    rows = np.ascontiguousarray(pixels, dtype=np.uint8).reshape(height, -1)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)  # filter type 0 on every row
    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )


def write_png(path: str | Path, pixels: np.ndarray) -> None:
    Path(path).write_bytes(png_bytes(pixels))

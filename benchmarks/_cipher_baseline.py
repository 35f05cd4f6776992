"""The stream benchmark's cipher baseline: ChaCha20-Poly1305 alone, on one core, in one process.

Every byte of an encrypted stream is sealed once (sender) and opened once (receiver). This
process does both for the whole payload, in the largest Noise messages (65 519 plaintext bytes,
65 535 sealed: "64 KiB messages"), with the same library and calls our transport uses
(`cryptography`'s `encrypt_into` / `decrypt_into`, no allocation per message). Its rate,
payload / (seal time + open time), is what one core moves when it does a stream's whole crypto
work and nothing else; seal-only and open-only rates are reported beside it.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Any

PLAINTEXT = 65519  # Noise's largest transport message (65 535 bytes) less its 16-byte tag
_NONCE = struct.Struct("<4xQ")


def cipher_trial(total: int) -> dict[str, Any]:
    """Seal, then open, `total` bytes in PLAINTEXT-byte messages; wall and CPU seconds of each."""
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    cipher = ChaCha20Poly1305(os.urandom(32))
    plain = memoryview(os.urandom(PLAINTEXT))
    count = -(-total // PLAINTEXT)
    ring = [bytearray(PLAINTEXT + 16) for _ in range(64)]  # sealed messages, cache-sized reuse
    nonce_of = [0] * len(ring)
    opened = bytearray(PLAINTEXT)
    start = time.perf_counter(), time.process_time()
    for index in range(count):
        slot = index % len(ring)
        cipher.encrypt_into(_NONCE.pack(index), plain, None, ring[slot])
        nonce_of[slot] = index
    middle = time.perf_counter(), time.process_time()
    for index in range(count):  # every open checks its tag: a wrong byte raises InvalidTag
        slot = index % len(ring)
        cipher.decrypt_into(_NONCE.pack(nonce_of[slot]), ring[slot], None, opened)
    end = time.perf_counter(), time.process_time()
    seal_wall, seal_cpu = middle[0] - start[0], middle[1] - start[1]
    open_wall, open_cpu = end[0] - middle[0], end[1] - middle[1]
    moved = count * PLAINTEXT
    return {
        "seconds": seal_wall + open_wall,
        "tx_cpu": seal_cpu,
        "rx_cpu": open_cpu,
        "MBps": moved / (seal_wall + open_wall) / 1e6,
        "seal_MBps": moved / seal_wall / 1e6,
        "open_MBps": moved / open_wall / 1e6,
        "cpu_MBps": moved / (seal_cpu + open_cpu) / 1e6,
        "ok": opened == plain,
    }

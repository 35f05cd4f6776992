"""How a DHT node is tuned: its mode and the Kademlia parameters, checked once at construction.

A module of its own because every part of the node reads it (`node.py`, `walker.py`,
`values.py`, `resolution.py`) and none of them should import another just for its settings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DhtMode(enum.Enum):
    SERVER = "server"
    CLIENT = "client"


@dataclass(frozen=True, kw_only=True, slots=True)
class DhtConfig:
    mode: DhtMode = DhtMode.SERVER
    bucket_size: int = 20  # k
    alpha: int = 3  # lookups in flight per get / find
    replicas: int = 8  # peers a put stores at; also the width of lookups
    request_timeout: float = 3.0
    refresh_interval: float = 60.0
    identify_wait: float = 10.0  # how long a new connection's identify may take to say it serves
    peer_record_ttl: float = 600.0
    publish_peer_record: bool = True
    max_records: int = 100_000
    max_record_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        if not (1 <= self.alpha <= 32 and 1 <= self.replicas <= 32 and 1 <= self.bucket_size <= 64):
            raise ValueError("alpha and replicas must be 1..32, bucket_size 1..64")
        if self.request_timeout <= 0 or self.refresh_interval <= 0 or self.peer_record_ttl <= 0:
            raise ValueError("timeouts, intervals and ttls must be positive")


DEFAULT_CONFIG = DhtConfig()

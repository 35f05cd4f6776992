"""peertrain.dht: discovery on libp2p — signed, expiring, namespaced records in a Kademlia DHT.

See `node.py` for the tour. Public names:

    Dht, DhtConfig, DhtMode, DhtStatistics     the node
    Record                                     one writer's verified entry, as `get` returns it
    Namespace, NamespaceRegistry, default_registry, and key builders (stage_key, …)
    keep_announced                             re-announce a record before it expires
    DHTError, StoreFailed, PeerNotFound, RecordRejected, RejectReason
"""

from .announce import keep_announced
from .config import DhtConfig, DhtMode
from .errors import DHTError, PeerNotFound, RecordRejected, RejectReason, StoreFailed
from .messages import DHT_PROTOCOL
from .namespaces import (
    Namespace,
    NamespaceRegistry,
    checkpoint_key,
    default_registry,
    group_key,
    members_key,
    peer_record_key,
    runs_key,
    stage_key,
)
from .node import Dht, DhtStatistics
from .records import Record

__all__ = [
    "DHT_PROTOCOL",
    "DHTError",
    "Dht",
    "DhtConfig",
    "DhtMode",
    "DhtStatistics",
    "Namespace",
    "NamespaceRegistry",
    "PeerNotFound",
    "Record",
    "RecordRejected",
    "RejectReason",
    "StoreFailed",
    "checkpoint_key",
    "default_registry",
    "group_key",
    "keep_announced",
    "members_key",
    "peer_record_key",
    "runs_key",
    "stage_key",
]

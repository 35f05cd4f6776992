"""The root of peertrain's error tree, for users: `from peertrain.errors import PeertrainError`.

    PeertrainError                  protocol/errors.py (the root lives in the bottom layer)
    ├── ProtocolError, RemoteError  protocol/errors.py: the remote peer sent bad bytes / refused
    ├── DHTError                    dht/errors.py
    ├── CRDTError                   crdt/errors.py
    ├── SwarmError                  swarm/errors.py (ConfigError, aggregation, DiLoCo, pipeline)
    └── NodeError                   node/errors.py (and node/net/transport/errors.py)

Each layer raises only its own branch; remote misbehaviour is blamed on the peer inside it.
"""

from peertrain.protocol.errors import PeertrainError

__all__ = ["PeertrainError"]

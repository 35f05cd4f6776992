"""peertrain: a decentralized peer-to-peer training network.

The repository root is this package; its top-level folders are the layers
(protocol → dht, crdt → swarm → node). See docs/architecture.md for the map.
"""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`peertrain.DiLoCo` and `peertrain.Node` (a node in this process) load torch and libp2p
    only when asked for: `import peertrain` stays light for the CLI."""
    if name == "DiLoCo":
        from .node.api.diloco import DiLoCo

        return DiLoCo
    if name == "Node":
        from .node.api.embedded import EmbeddedNode

        return EmbeddedNode
    raise AttributeError(f"module 'peertrain' has no attribute {name!r}")

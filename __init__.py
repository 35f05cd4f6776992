"""peertrain: a decentralized peer-to-peer training network.

The repository root is this package; its top-level folders are the layers
(protocol → dht, crdt → swarm → node). See docs/architecture.md for the map.
"""


def __getattr__(name: str) -> object:
    """`peertrain.DiLoCo` and `peertrain.Node` (a node in this process) load torch and libp2p
    only when asked for: `import peertrain` stays light for the CLI. `peertrain.__version__`
    is the installed distribution's (pyproject.toml's `version`), read from its metadata."""
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("peertrain")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            return "unknown"
    if name == "DiLoCo":
        from .node.api.diloco import DiLoCo

        return DiLoCo
    if name == "Node":
        from .node.api.embedded import EmbeddedNode

        return EmbeddedNode
    raise AttributeError(f"module 'peertrain' has no attribute {name!r}")

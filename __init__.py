"""peertrain: a decentralized peer-to-peer training network.

The repository root is this package; its top-level folders are the layers
(protocol → dht, crdt → swarm → node). See DESIGN.md for the map.
"""

__version__ = "0.1.0"

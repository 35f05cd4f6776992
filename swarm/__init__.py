"""peertrain.swarm — what nodes do together: models, data, DiLoCo groups, SWARM pipelines,
update gossip, Byzantine-robust aggregation, attacks; training policy written against transport
interfaces, so the in-memory harness and the daemon run the same code.

May import protocol/, dht/ and crdt/; never node/ (tests/test_layering.py).
"""

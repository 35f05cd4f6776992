"""peertrain.node.services — what a node offers its peers: DHT, gossip, peer exchange,
content-addressed tensors (served by tensors.py, fetched by tensor_fetch.py).

May import node/net/ and node/nat/; never runs/, the daemon, api/ or cli/.
"""

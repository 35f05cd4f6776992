"""peertrain.node.net — the host and what every connection needs: identity, our Noise/Yamux
transport, addresses, private network, peers and penalties, rpc, stream admission, and the
libp2p quirk helpers (connections.py: peerstore and connection access; streams.py: quiet close).

Lowest sub-layer of node/: imports only protocol/, dht/, crdt/, swarm/ and node/errors.py,
never nat/, services/, runs/, the daemon, api/ or cli/.
"""

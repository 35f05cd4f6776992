"""peertrain.node — the daemon: everything that turns the layers below into a running node.

May import every layer (protocol, dht, crdt, swarm); inside, sub-layers import only downwards:
net (host, transport, identity, peers) ← nat (reachability, relays, punching) ← services (dht,
gossip, peer exchange, tensors) ← runs (manager, one session per mode) ← daemon.py ← api
(control socket) ← cli (the `peertrain` command). errors.py is shared by all of them.
"""

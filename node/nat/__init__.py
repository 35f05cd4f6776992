"""peertrain.node.nat — being reachable: dial-back reachability checks, circuit-relay hop and
reservations, hole punching, UPnP.

May import node/net/ (and the layers below node/); never services/, runs/, the daemon, api/ or
cli/.
"""

"""peertrain.node.runs — training runs in the daemon: the run manager and one session per mode, each
a thin adapter from a swarm/ driver to the node's services (`NodeServices`, never the Daemon).

May import net/, nat/ and services/; never the daemon, api/ or cli/.
"""

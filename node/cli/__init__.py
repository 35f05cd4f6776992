"""peertrain.node.cli — the `peertrain` command: parser, options, human status text, CLI daemon
processes and the local-swarm supervisors.

Top of node/: may import everything.
"""

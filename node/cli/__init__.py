"""peertrain.node.cli — the `peertrain` command: parser, options, human status text and progress
bars, CLI daemon processes and the one local-swarm supervisor (every mode).

Top of node/: may import everything.
"""

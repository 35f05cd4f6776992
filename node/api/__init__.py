"""peertrain.node.api — how the node's owner talks to it: the control socket (JSON over a Unix
socket), and when asked, Prometheus metrics and a dashboard over HTTP (web.py).

May import every node sub-layer below it and the daemon; never cli/.
"""

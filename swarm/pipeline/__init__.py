"""SWARM pipelines (see module docstrings; the transport interface is in transport.py)."""

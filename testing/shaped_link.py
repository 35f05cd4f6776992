"""A link of fixed bandwidth for in-memory transports: the daemon's own token bucket
(node/net/uplink.py), so a shaped daemon and a shaped in-memory peer behave alike."""

from peertrain.node.net.uplink import TokenBucket

__all__ = ["TokenBucket"]

"""Re-export of the error tree's root, for users: `from peertrain.errors import PeertrainError`."""

from peertrain.protocol.errors import PeertrainError

__all__ = ["PeertrainError"]

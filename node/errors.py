"""The node layer's branch of the error tree.

PeertrainError
└── NodeError                  the daemon could not do what the user asked
    ├── ConfigError            a bad config key or value (names the key, says what to do)
    ├── IdentityError          the identity key file is unreadable, corrupt or too open
    ├── ConnectError           a peer could not be reached or refused us
    │   └── PskMismatch        the private-network key differs (or one side has none)
    └── ControlError           no daemon answers on this home, or it answered an error
"""

from __future__ import annotations

from peertrain.protocol.errors import PeertrainError


class NodeError(PeertrainError):
    """The daemon could not do what was asked."""


class ConfigError(NodeError):
    """A configuration key or value is wrong; the message names it and says what to do."""


class IdentityError(NodeError):
    """The identity key in the node's home is unusable."""


class ConnectError(NodeError):
    """A peer could not be reached, or refused the connection."""


class PskMismatch(ConnectError):
    """The two sides of a connection do not share the same private-network key."""


class ControlError(NodeError):
    """The local control API could not be reached, or answered with an error."""

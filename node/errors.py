"""The node layer's branch of the error tree (shared by every node sub-layer).

PeertrainError
├── SwarmError (swarm/errors.py)
│   └── ConfigError                a bad setting, whichever layer read it (also a ValueError)
└── NodeError                      the daemon could not do what the user asked
    ├── NodeConfigError            a bad key or value in the node's config file, options or
    │                              environment (names the key, says what to do); also a
    │                              ConfigError, so one `except ConfigError` catches both
    ├── IdentityError              the identity key file is unreadable, corrupt or too open
    ├── ConnectError               a peer could not be reached or refused us
    │   ├── PskMismatch            the private-network key differs (or one side has none)
    │   └── DialBackedOff          not dialled: every address failed moments ago (no new cause)
    ├── ControlError               no daemon answers on this home, or it answered an error
    ├── BadRequest                 an HTTP client sent no valid request head within the limits
    ├── BudgetExceeded             a request would take more than the daemon's resource budget
    ├── SlimmedDependencyUsed      code used a package the daemon keeps out of memory (an
    │                              ImportError too, so optional-package fallbacks still work)
    ├── DialbackUnavailable        a peer could not or would not run the dial-back check for us
    ├── TransferFailed             no holder could supply a tensor
    └── TransportError             node/net/transport/errors.py: Noise and Yamux failures
"""

from __future__ import annotations

from peertrain.protocol.errors import PeertrainError
from peertrain.swarm.errors import ConfigError


class NodeError(PeertrainError):
    """The daemon could not do what was asked."""


class NodeConfigError(NodeError, ConfigError):
    """A node configuration key or value is wrong; the message names it and says what to do.

    The one `ConfigError` is swarm's (swarm/errors.py); this is the node's kind of it."""


class IdentityError(NodeError):
    """The identity key in the node's home is unusable."""


class ConnectError(NodeError):
    """A peer could not be reached, or refused the connection."""


class PskMismatch(ConnectError):
    """The two sides of a connection do not share the same private-network key."""


class DialBackedOff(ConnectError):
    """libp2p did not dial: every address of the peer failed moments ago (its negative cache).
    It carries no cause of its own; the failure before it had one."""


class ControlError(NodeError):
    """The local control API could not be reached, or answered with an error."""


class BadRequest(NodeError):
    """An HTTP client (metrics, dashboard) sent no HTTP/1.x request head within the limits."""


class BudgetExceeded(NodeError):
    """A request would take more of a resource than the daemon's budget allows."""


class SlimmedDependencyUsed(NodeError, ImportError):
    """Code used a package that the daemon keeps out of memory (see node/net/slim_imports.py).

    It is an ImportError too: code that falls back when an optional package is missing does so.
    """


class DialbackUnavailable(NodeError):
    """A peer could not or would not run the dial-back check for us."""


class TransferFailed(NodeError):
    """No holder could supply a tensor."""

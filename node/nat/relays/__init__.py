"""Circuit relay v2 in the daemon: a bounded hop for others when public (hop.py), reservations
on public peers when not (reservations.py), and dialing that races direct addresses and
circuits (dialing.py). What py-libp2p gives and what we add is in each module's docstring.
"""

from ...net.connections import CIRCUIT, connection_kind, connections_by_kind
from .dialing import RacingDialer
from .hop import HopLimits, PacedRelay
from .reservations import Reservation, ReservationKeeper

__all__ = [
    "CIRCUIT",
    "RacingDialer",
    "HopLimits",
    "PacedRelay",
    "Reservation",
    "ReservationKeeper",
    "connection_kind",
    "connections_by_kind",
]

"""Re-export: `ConnectionEvents` lives in protocol/connection_events.py, below dht/ (its user)."""

from peertrain.protocol.connection_events import ConnectionEvents as ConnectionEvents

"""The update exchange: how a group's members trade their outer updates each round, for DiLoCo
groups, Streaming DiLoCo fragments and diffusion expert groups alike.

Layer: below swarm/diloco/ and swarm/diffusion/; imports protocol/, crdt/, swarm/aggregation/ and
swarm/models/ only. `interface.py` is what a member sees (`UpdateExchange`, `Contribution`);
`gossip.py` is today's exchange (signed announcements by gossip, payloads pulled point to point),
with one round's state in `gossip_round.py`, its pace in `round_pace.py` and its signed record in
`round_record.py`; `codec.py` encodes updates (int8/int4 with error feedback) and
`payload_source.py` reads received int8 updates in place.
"""

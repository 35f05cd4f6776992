"""The DiLoCo group: the member run in a node under trio, against transport interfaces. The
driver (`driver.py`, Streaming DiLoCo's `streaming_driver.py` and `streaming_loop.py`), state
agreement (`state_sync.py`, `adoption.py`, `replay.py`), whom to believe (`trust.py`) and whose
updates count (`roster.py`).

Layer: imports member/ and swarm/exchange/; attack simulations reach it through the driver's
`Adversary` seam (adversary/), never the other way round.
"""

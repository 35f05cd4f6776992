"""Simulated attackers for tests, benchmarks and `--attack`: a member whose updates are forged
(`forger.py`) and one that claims hostile states (`hostile_states.py`). They plug into the
driver through its `Adversary` seam; the driver never imports them.

Layer: the top of swarm/diloco/; imports group/, member/ and swarm/exchange/.
"""

from peertrain.swarm.diloco.adversary.attacker import Attacker, adversary_for

__all__ = ["Attacker", "adversary_for"]

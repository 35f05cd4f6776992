"""What a process has loaded lives as long as it: keep it out of the garbage collector's passes.

Python's cyclic collector walks every tracked object in a full (generation 2) pass, and a pass
runs on whichever thread happens to allocate when the counts say so: in a daemon, most often
the event loop in the middle of a transfer. Modules, classes and functions never become
garbage, yet a daemon holds about 250,000 of them once torch and the training code are loaded
(a full pass: 128 ms on the 2-core machine the suite runs on). `gc.freeze()` moves every object
alive now into a permanent generation the passes skip; objects made afterwards are collected
as before. Measured: an update round of 4 x 20M floats spent 0.89-1.29 s of event-loop CPU
(0.58-0.61 s frozen; benchmarks/update_round.py), and the DHT benchmark's slowest first stores
at 32 nodes took 277-283 ms with the collector on, 63-77 ms with it off (benchmarks/dht.py).

Called where the loaded code stops growing: when the daemon serves (node/daemon.py) and when a
run session has imported torch and the training code (node/runs/session.py).
"""

from __future__ import annotations

import gc


def freeze_what_is_loaded() -> None:
    # collect first: garbage of the moment (a process that ran other daemons or sessions
    # before, as a test worker does) would otherwise be kept for good. Once, at a start.
    gc.collect()
    gc.freeze()

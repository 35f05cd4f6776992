"""The DiLoCo member: torch-side and synchronous. H inner AdamW steps (`inner_loop.py`), the
pseudo-gradient and the outer Nesterov step (`outer_step.py`), the flat parameter layout, state
hashes, checkpoints, Streaming DiLoCo's fragments and member, multi-rank nodes, and building a
member from a run's spec (`build.py`, `run_spec.py`).

Layer: imports swarm/exchange/ (the codec and the `UpdateExchange` interface), never group/.
"""

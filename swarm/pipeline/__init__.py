"""SWARM pipelines: a model cut into stages, many unreliable servers per stage (DESIGN.md §5).

Modules, each one concept:

    wiring.py      per stage, which server gets the next task (throughput-weighted min-heap)
    rebalance.py   which server moves to which stage each period; which stage a joiner serves
    stage.py       a stage server's compute: forward, recompute-on-backward, accumulate, step
    averaging.py   averaging within a stage over the network: numbered all-gather rounds
    drift.py       state checksums compared at equal rounds; a copy outvoted by its stage re-syncs
    migration.py   a stage's state (parameters + Adam moments) as one flat tensor, for movers
    membership.py  who serves which stage, read from RunState: the view everyone decides from
    boundary.py    tensors crossing stage boundaries (fp32 / fp16 / int8 blockwise payloads)
    slices.py      cutting a model (the digits MLP) into stage slices
    run_spec.py    what a swarm run trains: the manifest's spec (stages, model, data, knobs)
    transport.py   THE interface between trainers and servers (StageTransport)
    trainer.py     a trainer: microbatches through one server per stage, retries, no loss
    harness.py     a whole swarm in one process (threads), for tests and benchmarks
    local_run.py   one in-process run with the report of `peertrain swarm local --mode swarm`

On the network (node/, which may import libp2p; this package may not):

    node/runs/pipeline_wire.py       the `/peertrain/pipeline/1.0.0` messages; tensors as TensorHeader +
                                raw verified frames, never msgpacked
    node/runs/pipeline_transport.py  `StageTransport` over libp2p streams; a failure: ServerUnavailable
    node/runs/pipeline_server.py     a stage server as a run service: serve, measure, announce in
                                RunState and the DHT, average within the stage, rebalance
    node/runs/pipeline_drift.py      the stage's server-to-server calls: contributions carrying
                                checksums, state downloads for movers and drifted copies
    node/runs/pipeline_trainer.py    a trainer as a run service: wiring kept in step with RunState
    node/runs/pipeline_session.py    a swarm run's session: RunState first, then the node's role
    node/cli/pipeline_local.py      `peertrain swarm local --mode swarm`: daemons as processes + report

Choices, and why (each module's docstring says more): backward recomputes the forward, so any
server of a stage can take any microbatch's backward and a dying server costs a retry, not a
microbatch (stage.py); the view of who serves what is RunState, a CRDT every peer converges on,
not the DHT, whose gets stop at the first replica (membership.py); a stage steps by an
all-gather round that whoever is ready first starts, summed in peer-ID order so the stage's
copies stay bitwise identical (averaging.py), and a copy that still drifts (a peer left out by
some servers only) is outvoted at the next round and re-syncs (drift.py); one deterministic
mover per period, decided by everyone on the same view at the middle of the period (rebalance.py,
node/runs/pipeline_server.py).
"""

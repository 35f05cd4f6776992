"""SWARM pipelines: a model cut into stages, many unreliable servers per stage (docs/design.md §5).

Modules, each one concept:

    wiring.py      per stage, which server gets the next task (throughput-weighted min-heap)
    rebalance.py   which server moves to which stage each period; which stage a joiner serves
    stage.py       a stage server's compute: forward, recompute-on-backward, accumulate, step
    averaging.py   averaging within a stage over the network: numbered all-gather rounds
    drift.py       state checksums compared at equal rounds; a copy outvoted by its stage re-syncs
    migration.py   a stage's state (parameters + Adam moments) as one flat tensor, for movers
    membership.py  who serves which stage, read from RunState: the view everyone decides from
    boundary.py    tensors crossing stage boundaries (fp32 / fp16 / int8 blockwise payloads)
    slices.py      cutting a model into stage slices of contiguous blocks (the GPT: embeddings
                   first, norm + head last), each knowing what may cross its boundaries
    checkpoint.py  a stage's state on disk: safetensors + sidecar, atomic, verified on load
    run_spec.py    what a swarm run trains: the manifest's spec (stages, model, data, knobs)
    transport.py   THE interfaces: StageTransport (trainer -> servers), StagePeerTransport
                   (a server -> its stage's other servers)
    wire.py        the `/peertrain/pipeline/1.0.0` messages; tensors as TensorHeader + raw
                   verified frames, never msgpacked
    trainer.py     a trainer: microbatches through one server per stage, retries, no loss
    stage_service.py  a stage server of a run: serve, measure, announce in RunState, average
                   within the stage, repair drift, answer rounds and state downloads
    stage_moves.py the joiner's stage and the settled-view rebalancing loop of a stage service
    stage_checkpointing.py  a stage service's checkpoints every few rounds; resuming from them
                   when no live server of the stage can hand its state
    trainer_loop.py   a trainer of a run: wiring kept in step with RunState, static phase, steps

In one process, for tests and benchmarks only (testing/, which no product layer imports):
testing/pipeline_memory.py (both transports: callers reach StageServices directly),
testing/pipeline_harness.py (a whole swarm: the real services and loops on it) and
testing/pipeline_local_run.py (one in-process run with a throughput report).

On the network (node/, which may import libp2p; this package may not), thin adapters only:

    node/runs/pipeline_transport.py  both transports over libp2p streams (a failure:
                                ServerUnavailable) and the stream handler that calls StageService
    node/runs/pipeline_session.py    a swarm run's session: RunState first, then a StageService or
                                a TrainerLoop on the node's transport; the DHT stage key
    node/cli/swarm_pipeline.py       `peertrain swarm local --mode swarm`: daemons + report

Choices, and why (each module's docstring says more): backward recomputes the forward, so any
server of a stage can take any microbatch's backward and a dying server costs a retry, not a
microbatch (stage.py); the view of who serves what is RunState, a CRDT every peer converges on,
not the DHT, whose gets stop at the first replica (membership.py); a stage steps by an
all-gather round that whoever is ready first starts, summed in peer-ID order so the stage's
copies stay bitwise identical (averaging.py), and a copy that still drifts (a peer left out by
some servers only) is outvoted at the next round and re-syncs (drift.py); one deterministic
mover per period, decided by everyone on the same view at the middle of the period (rebalance.py,
stage_moves.py).
"""

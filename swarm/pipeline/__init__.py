"""SWARM pipelines: a model cut into stages, many unreliable servers per stage (DESIGN.md §5).

Modules, each one concept:

    wiring.py     per stage, which server gets the next task (throughput-weighted min-heap)
    rebalance.py  which server moves to which stage each period; which stage a joiner serves
    stage.py      a stage server's compute: forward, recompute-on-backward, accumulate, step
    boundary.py   tensors crossing stage boundaries (fp32 / fp16 / int8 blockwise payloads)
    slices.py     cutting a model (the digits MLP) into stage slices
    transport.py  THE interface between trainers and servers (StageTransport)
    trainer.py    a trainer: microbatches through one server per stage, retries, no loss
    harness.py    a whole swarm in one process (threads), for tests and benchmarks
    local_run.py  one in-process run with the report of `peertrain swarm local --mode swarm`

Wiring it onto the network (node/, not done here) needs four things, all behind interfaces that
already exist in this package:

0. The CLI: `peertrain swarm local --mode swarm --nodes N --stages S --trainers T --speeds ...
   --kill-at SECONDS --report FILE` can call `run_local(LocalRunConfig(...))` today and write
   `report.to_json()`; the daemon version keeps the report and replaces the harness by 1-4.
1. A `StageTransport` over our protocol: three request/response calls, `forward`, `backward`,
   `loss_backward` (see transport.py for their exact arguments). A `BoundaryTensor` is a protocol
   TensorHeader (codec, shape, block size) plus its uint8 payload; targets are a small int64
   tensor. Every failure of one server must surface as `ServerUnavailable`.
2. A stage server daemon service wrapping `StageServer`: handlers call its (sync) methods through
   `trio.to_thread.run_sync` with a CapacityLimiter(1), refuse requests for another stage, and
   after each backward check whether the stage's accumulated samples reached the target batch.
3. The stage all-reduce: `StageServer.step(average)` takes the server's (flat sample-weighted
   gradient sum, samples) and calls `average(local, n) -> (total, N)`, a blocking all-reduce over
   the stage's live servers (e.g. our tensor exchange, in a worker thread), then steps with the
   totals; the server keeps serving while `average` runs.
4. Announcements: each server periodically puts (stage, measured throughput) under the run's
   per-stage DHT key / RunState; trainers feed them to `StageWiring.announce`, and every server
   runs `plan_move` on the same view each period (the mover downloads `StageServer.state()` from
   a server of its new stage, `load_state`, then re-announces); joiners use `stage_for_new_peer`.
"""

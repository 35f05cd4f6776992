"""What `status()` says about runs: the `run` part of `peertrain status --json`.

TypedDicts, not dataclasses: the status is JSON on the control socket, and tests, the CLI's
status text and the local-swarm supervisors read it by key; these types name those keys.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from .run_view import RunView


class RunStatus(TypedDict):
    """Every run, whatever its mode."""

    name: str
    run_id: str
    mode: str  # "diloco" | "swarm"
    creator: str  # peer ID of the node that signed the manifest
    members: list[str]
    round: int
    phase: str  # "starting" until the driver or pipeline service runs
    loss: float | None
    error: str | None
    # what non-members of an invite run sent and we dropped unseen, by kind: "deltas" (run
    # state, checkpoint announcements included), "announcements" and "records" (update gossip),
    # "stage_calls" (SWARM pipeline); open runs drop nothing here
    dropped: dict[str, int]


class DiLoCoRunStatus(RunStatus):
    initial_loss: float | None
    rounds_completed: int
    state_checksum: str
    resyncs: int
    rounds_alone: int  # rounds closed with our own update alone while others were live
    checkpoint_failures: int  # checkpoints not written (a full disk, the disk budget)
    checkpoint_error: str  # why the last one was not ("" when none failed)
    unreliable_anchors: dict[str, str]  # signers whose attested state kept failing → why
    state_downloads: int  # states adopted by download (a replay costs none)
    state_donors: list[str]  # peers a state download asked, newest last (the last 16)
    rejected_updates: int
    rejected_by_reason: dict[str, int]  # swarm/diloco/member/member.py rejection_kind → count
    bytes_published: int
    bytes_fetched: int
    finished: bool
    params: int
    inner_steps: int
    model: str
    device: str  # where this member trains ("" until built)
    ranks: int  # processes this member trains on (`--ranks N`: intra_node.py)
    # phase, round, inner_step/inner_steps, download {what, bytes_done, bytes_total, donors,
    # elapsed_s, bytes_per_s} | None, waiting {what, have, need, elapsed_s} | None
    # (swarm/progress.py); None until the driver runs
    progress: dict[str, Any] | None
    # Streaming DiLoCo runs (swarm/diloco/group/streaming_driver.py), else None: fragments, overlap,
    # round_seconds, fragment_states [{fragment, round, checksum}], samples_by_member {peer: n},
    # last_round {round, steps, samples, fragments_landed}, loop {steps, compute_s, idle_s,
    # idle_fraction}
    streaming: dict[str, Any] | None
    # the run-wide view (run_view.py): each live member's own report (at most 64 rows), the
    # agreement at the newest round, the run's length, summed samples/s and an ETA
    view: RunView


class SwarmRunStatus(RunStatus):
    """A swarm run: its role settings, then what the pipeline says (node/runs/pipeline_*):
    stages, stage sizes, the spec, and the server's or trainer's own figures."""

    role: NotRequired[str]
    speed: NotRequired[float]
    stage: NotRequired[int]
    stages: NotRequired[int]
    stage_sizes: NotRequired[list[int]]
    spec: NotRequired[dict[str, Any]]


class DiffusionRunStatus(RunStatus):
    """A diffusion run (node/runs/diffusion_session.py): our group and its DiLoCo figures, every
    group's members, steps, round and loss, and our group's update traffic by sender's group."""

    group: NotRequired[str | None]
    experts: NotRequired[int]
    dataset: NotRequired[str]
    model: NotRequired[str]
    groups: NotRequired[dict[str, dict[str, Any]]]
    traffic: NotRequired[dict[str, Any]]
    bytes_published: NotRequired[int]
    bytes_fetched: NotRequired[int]
    router_accuracy: NotRequired[float | None]
    sample_grid: NotRequired[dict[str, Any] | None]  # {png: base64 PNG, round, caption}
    initial_loss: NotRequired[float | None]
    finished: NotRequired[bool]
    state_checksum: NotRequired[str]
    rounds_completed: NotRequired[int]
    resyncs: NotRequired[int]
    rejected_updates: NotRequired[int]
    rejected_by_reason: NotRequired[dict[str, int]]


class ManyRunsStatus(TypedDict):
    """A node in several runs: one status each (a node in one run shows that run's alone)."""

    runs: list[RunStatus]

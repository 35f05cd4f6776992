"""The report of `peertrain swarm local --mode swarm`, and how its polls and summary read.

The keys (docs/usage.md documents them) are explained in swarm_pipeline.py's docstring; here they
are computed from the last good status of every daemon.
"""

from __future__ import annotations

from typing import Any, Protocol


class PipelineSwarmView(Protocol):
    """What the report reads of a local pipeline swarm (swarm_pipeline.py's `PipelineSwarm`)."""

    options: Any  # PipelineLocalOptions
    killed: dict[str, Any] | None
    stage_sizes: list[dict[str, Any]]
    started_wall: float


def pipeline_report(swarm: PipelineSwarmView, runs: list[dict[str, Any] | None]) -> dict[str, Any]:
    """The report's figures from the last good status of every daemon."""
    opts = swarm.options
    servers = [r for r in runs[: opts.nodes] if r]
    trainers = [r for r in runs[opts.nodes :] if r]
    statics = [t["static"]["throughput"] for t in trainers if t.get("static")]

    def mean(key: str) -> float | None:
        values = [t[key] for t in trainers if t.get(key) is not None]
        return sum(values) / len(values) if values else None

    return {
        "throughput": sum(
            t["swarm_samples"] / t["swarm_seconds"] for t in trainers if t.get("swarm_seconds")
        ),
        **_ideals(swarm, runs, trainers or servers),
        "static_throughput": sum(statics) if len(statics) == len(trainers) and statics else None,
        "lost_microbatches": sum(t["lost_microbatches"] for t in trainers),
        "retries": sum(t["retries"] for t in trainers),
        "completed": sum(t["completed"] for t in trainers),
        "samples": sum(t["samples"] for t in trainers),
        "initial_loss": mean("initial_loss"),
        "final_loss": mean("loss"),
        "stage_sizes": swarm.stage_sizes,
        "moves": _moves(swarm, runs),
        "killed": swarm.killed,
        "servers": [_server(r) for r in servers],
    }


def _ideals(
    swarm: PipelineSwarmView, runs: list[dict[str, Any] | None], reporters: list[dict[str, Any]]
) -> dict[str, float | None]:
    """`ideal_throughput` (the layout asked for), `final_ideal_throughput` (the live layout at
    the end), both from speeds and base_seconds; `measured_ideal_throughput` from the
    throughputs the live servers announced."""
    opts = swarm.options
    killed = (swarm.killed or {}).get("node")
    alive = [r for i, r in enumerate(runs[: opts.nodes]) if r and i != killed]
    spec = (reporters or [{}])[0].get("spec", {})
    demand = spec.get("demand") or [1.0] * opts.stages
    capacity = [
        sum(r["throughput"] for r in alive if r["stage"] == s) / demand[s]
        for s in range(opts.stages)
    ]
    base = spec.get("base_seconds", 0.0)

    def nominal(layout: list[tuple[int, float]]) -> float | None:
        """Σ of the slowest stage's server capacities, from speeds and base_seconds."""
        if not base:
            return None
        return min(
            sum(v for s, v in layout if s == stage) / (demand[stage] * base)
            for stage in range(opts.stages)
        )

    initial = nominal(opts.server_plan())
    measured = min(capacity) if capacity else None
    return {
        "ideal_throughput": initial if initial is not None else measured,
        "final_ideal_throughput": nominal([(r["stage"], r["speed"]) for r in alive]),
        "measured_ideal_throughput": measured,
    }


def _moves(swarm: PipelineSwarmView, runs: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Every rebalancing move the servers recorded, timed from the supervisor's start."""
    moves = [
        {"node": i, "t": round(m["at"] - swarm.started_wall, 2), "from": m["from"], "to": m["to"]}
        for i, r in enumerate(runs[: swarm.options.nodes])
        if r
        for m in r.get("moves", [])
    ]
    return sorted(moves, key=lambda m: m["t"])


def _server(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "stage": run["stage"],
        "speed": run["speed"],
        "throughput": run["throughput"],
        "calls": run["calls"],
        "steps": run["steps"],
        "moves": len(run["moves"]),
        "resyncs": run.get("resyncs", 0),
    }


def line(elapsed: float, statuses: list[dict[str, Any] | None], nodes: int) -> str:
    parts = []
    for index, run in enumerate(statuses):
        if run is None:
            parts.append("down")
        elif index < nodes:
            parts.append(f"s{run.get('stage', '?')}:{run.get('calls', 0)}")
        else:
            loss = run.get("loss")
            parts.append(
                f"T {run.get('phase', '?')[:6]} {run.get('completed', 0)} {loss:.3f}"
                if loss is not None
                else f"T {run.get('phase', '?')[:6]}"
            )
    return f"[{elapsed:6.1f} s] " + " | ".join(parts)


def summarise(console, report: dict[str, Any]) -> None:
    console.rule("summary")

    def fmt(value: Any, digits: int = 1) -> str:
        return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"

    console.print(
        f"servers {report['nodes']} over {report['stages']} stages, trainers {report['trainers']}, "
        f"started in {report.get('startup_s', '-')} s, total {report.get('total_s')} s"
    )
    if "throughput" in report:
        console.print(
            f"throughput {fmt(report['throughput'])} samples/s; "
            f"ideal {fmt(report['ideal_throughput'])} (from measured capacities at the end "
            f"{fmt(report['measured_ideal_throughput'])}); "
            f"static {fmt(report['static_throughput'])}"
        )
        console.print(
            f"loss {fmt(report['initial_loss'], 3)} → {fmt(report['final_loss'], 3)}; "
            f"lost microbatches {report['lost_microbatches']} (retries {report['retries']}); "
            f"stage sizes {[s['sizes'] for s in report['stage_sizes']]}"
        )

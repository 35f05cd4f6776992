"""`peertrain status` for people: the daemon's status dictionary as a few aligned lines.

Kept apart from the CLI's parsing so the rendering can be tested on plain dictionaries.
"""

from __future__ import annotations

from typing import Any


def render_status(status: dict[str, Any]) -> str:
    lines: list[str] = []
    lines.append(f"{status['name']}  {status['peer_id']}")
    if status.get("public_name"):
        lines.append(f"  public name  {status['public_name']}")
    lines.append(f"  give others  {status['share']}")
    lines.append(f"  uptime       {status['uptime_s']:.0f} s")
    failures = status.get("bootstrap_failures") or {}
    if "reachability" in status:
        lines.append(f"  reachable    {_reachable(status['reachability'], failures)}")
    for why in failures.values():  # "could not connect to <peer>: <cause and fix>"
        lines.append(f"  bootstrap    {why}")
    run = status["run"]
    runs = [] if not run else list(run["runs"]) if "runs" in run else [run]
    if not runs:
        lines.append("  run          -")
    for one in runs:  # each run's lines, whether the node takes part in one or several
        lines += run_lines(one)
    for service in status.get("services", []):
        if service["state"] in ("restarting", "quarantined") or service.get("error"):
            lines.append(
                f"  service      {service['name']} {service['state']}"
                f" (restarts {service['restarts']}): {service.get('error') or '-'}"
            )
    lines.append(f"  peers        {len(status['peers'])}")
    for peer in status["peers"]:
        lines.append(f"    {status['peer_names'].get(peer, '')}  {peer}")
    return "\n".join(lines)


def _reachable(reachability: dict[str, Any], failures: dict[str, str]) -> str:
    """The verdict, but not "connect to more peers (--bootstrap)" when the bootstrap peers we
    have fail: their lines below say why (a key the peer refuses, an address nobody answers)."""
    if reachability.get("status") == "unknown" and failures:
        return "not known yet: a bootstrap peer below failed (peers to ask come through it)"
    return reachability["text"]


def run_lines(run: dict[str, Any]) -> list[str]:
    """A run's lines in `status`: its name and kind, its round, loss, members and phase (a
    DiLoCo run: the round of its rounds and its state checksum), then what it waits on."""
    from .progress_view import progress_lines

    lines = [f"  run          {run['name']} ({run['mode']}, {run['run_id'][:12]}…)"]
    if run["mode"] == "swarm":
        lines.append(f"    {swarm_line(run)}")
    elif run["mode"] == "diffusion":
        lines.extend(f"    {line}" for line in diffusion_lines(run))
    else:
        loss = f"{run['loss']:.4f}" if run["loss"] is not None else "-"
        total = (run.get("progress") or {}).get("rounds") or 0
        of = f" of {total}" if total else ""
        state = f"  state {run['state_checksum'][:12]}" if run.get("state_checksum") else ""
        lines.append(
            f"    round {run['round']}{of}  loss {loss}  members {len(run['members'])}"
            f"  phase {run['phase']}{state}"
        )
        if run.get("checkpoint_failures"):  # a full disk: training goes on, unsaved
            lines.append(
                f"    checkpoints  {run['checkpoint_failures']} not written;"
                f" last: {run.get('checkpoint_error', '')}"
            )
    # inner steps, a download, a wait (and the error, if any), under the run's line
    return lines + [f"  {line}" for line in progress_lines({"run": run})[1:]]


def swarm_line(run: dict[str, Any]) -> str:
    """One line for a SWARM pipeline run: this node's role and what it does, and the stage sizes."""
    sizes = "/".join(str(n) for n in run.get("stage_sizes", []))
    role, phase = run.get("role", "?"), run.get("phase", "?")
    if phase == "starting":
        what = "loading the model"
    elif role == "server":
        what = (
            f"serving stage {run.get('stage')}  {run.get('throughput', 0):.1f} samples/s"
            f"  {run.get('calls', 0)} calls  {run.get('steps', 0)} steps"
        )
    elif role == "trainer":
        loss = run.get("loss")
        what = (
            f"{run.get('completed', 0)} microbatches  {run.get('throughput', 0):.1f} samples/s"
            f"  loss {'-' if loss is None else f'{loss:.4f}'}"
            f"  lost {run.get('lost_microbatches', 0)}"
        )
    else:
        what = ""
    return f"{role} ({phase})  {what}  stages {sizes}"


def diffusion_lines(run: dict[str, Any]) -> list[str]:
    """A diffusion run: our group and phase, then one line per group (members, steps, loss)."""
    accuracy = run.get("router_accuracy")
    lines = [
        f"training {run.get('group') or '-'} ({run.get('phase', '?')})  round {run['round']}"
        + (f"  router top-1 at t=0.1 {accuracy:.2f}" if accuracy is not None else "")
    ]
    for group, figures in run.get("groups", {}).items():
        loss = figures.get("loss")
        lines.append(
            f"  {group:10} members {len(figures['members'])}  steps {figures['steps']}"
            f"  round {'-' if figures['round'] is None else figures['round']}"
            f"  loss {'-' if loss is None else f'{loss:.4f}'}"
        )
    return lines


def render_run_list(result: dict[str, Any]) -> str:
    """The `run.list` answer: its runs, and how many listed runs it left out (a daemon from
    before verified listings says nothing of those)."""
    hidden = {k: int(result.get(k, 0)) for k in ("unverified", "unchecked")}
    return render_runs(result["runs"], **hidden)


def render_runs(runs: list[dict[str, Any]], *, unverified: int = 0, unchecked: int = 0) -> str:
    """`peertrain run list`: one line per run, its ID first (names are labels, IDs are not).
    Counts that only announcers claim (the creator's own entry not seen) are marked `~`."""
    hidden = _hidden_runs(unverified, unchecked)
    if not runs:
        return "\n".join(
            ["no runs announced (yet): the DHT may still be filling; try again shortly", *hidden]
        )
    header = f"{'ID':16}  {'NAME':20}  {'CREATOR':34}  MODE    MODEL     MEMBERS  ROUND  ADMISSION"
    lines = [header]
    for run in runs:
        creator = f"{run['creator'][:12]}… {run['creator_name']}"[:34]
        mark = "~" if run.get("counts_from") == "claims" else ""
        lines.append(
            f"{run['run_id'][:16]:16}  {run['name'][:20]:20}  {creator:34}  {run['mode']:6}  "
            f"{run['model'][:8]:8}  {mark + str(run['members']):>7}  {mark + str(run['round']):>5}"
            f"  {run['admission']}"
        )
    if any(run.get("counts_from") == "claims" for run in runs):
        lines.append("~ counts claimed by members' entries (the creator's own not seen)")
    lines.append("join one with --run ID (8+ characters of it are enough)")
    return "\n".join([*lines, *hidden])


def _hidden_runs(unverified: int, unchecked: int) -> list[str]:
    """What `run list` left out: a listed run is shown only once its manifest verifies."""
    parts = []
    if unverified:
        parts.append(
            f"{unverified} listed runs not shown (no announcer served a manifest that verifies)"
        )
    if unchecked:
        parts.append(
            f"{unchecked}{'' if parts else ' listed runs'} not checked yet (run list again)"
        )
    return ["; ".join(parts)] if parts else []

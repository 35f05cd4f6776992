"""How `peertrain swarm local --mode none | diloco` shows its daemons: table, lines, summary.

Rendering only (rich is imported when a table is drawn); the mode is swarm_mesh.py.
"""

from __future__ import annotations

from typing import Any


def brief(s: dict[str, Any] | None) -> dict[str, Any] | None:
    if s is None:
        return None
    out = {"name": s["name"], "peer_id": s["peer_id"], "peers": len(s["peers"])}
    if s.get("run"):
        out.update(round=s["run"]["round"], loss=s["run"]["loss"], state=s["run"]["state_checksum"])
    return out


def line(elapsed: float, statuses: list[dict[str, Any] | None], kills: int) -> str:
    """One line per poll, for a pipe."""
    parts = []
    for s in statuses:
        if s is None:
            parts.append("down")
        elif s.get("run"):
            r = s["run"]
            loss = f"{r['loss']:.3f}" if r["loss"] is not None else "-"
            parts.append(f"r{r['round']} {loss}")
        else:
            parts.append(f"{len(s['peers'])} peers")
    return f"[{elapsed:6.1f} s] " + " | ".join(parts) + (f"  (kills {kills})" if kills else "")


def table(statuses: list[dict[str, Any] | None], mesh_s: float | None, *, training: bool):
    """The live table on a terminal (and once at the end in a pipe)."""
    from rich.table import Table

    title = (
        f"local swarm: full mesh after {mesh_s:.2f} s"
        if mesh_s is not None
        else "local swarm: connecting…"
    )
    table = Table(title=title)
    columns = ["node", "name", "peers"] + (
        ["round", "loss", "phase", "MB in"] if training else ["uptime", "address"]
    )
    for column in columns:
        table.add_column(column)
    for index, s in enumerate(statuses):
        if s is None:
            table.add_row(str(index), "[red]down[/]", *["-"] * (len(columns) - 2))
            continue
        row = [str(index), s["name"], str(len(s["peers"]))]
        if training:
            r = s.get("run") or {}
            loss = f"{r['loss']:.4f}" if r.get("loss") is not None else "-"
            row += [
                str(r.get("round", "-")),
                loss,
                r.get("phase", "joining"),
                f"{r.get('bytes_fetched', 0) / 1e6:.1f}",
            ]
        else:
            row += [f"{s['uptime_s']:.0f} s", s["share"]]
        table.add_row(*row)
    return table


def agreement(hashes: list[str]) -> str:
    """Whether the members' final states agree, as measured: one model agrees with nothing."""
    if len(hashes) < 2:
        return f"not measured ({len(hashes)} model)"
    return "yes" if len(set(hashes)) == 1 else "NO"


def summarise(console, report: dict[str, Any]) -> None:
    console.rule("summary")
    mesh = f"{report['mesh_s']:.2f} s" if report.get("mesh_s") is not None else "never"
    console.print(
        f"nodes: {report['nodes']}   started in {report.get('startup_s', '-')} s"
        f"   full mesh after: {mesh}"
    )
    if report.get("rounds_completed") is not None and report["mode"] == "diloco":
        console.print(
            f"DiLoCo: {report['rounds_completed']} rounds, "
            f"loss {report.get('initial_loss', 0):.4f} → "
            f"{report.get('final_loss', 0):.4f}; models identical on all nodes: "
            f"{agreement(report.get('state_hashes', []))}"
        )
        if report.get("ddp_bytes") and not report.get("bytes_sent"):
            console.print(
                "outer-update traffic: none crossed a link (no member trained beside another)"
            )
        elif report.get("ddp_bytes"):
            ratio = report["ddp_bytes"] / report["bytes_sent"]
            console.print(
                f"outer-update traffic {report['bytes_sent'] / 1e6:.1f} MB vs data parallel "
                f"{report['ddp_bytes'] / 1e6:.1f} MB ({ratio:.0f}x less); "
                f"kills {report.get('kills', 0)}"
            )
        for c in report.get("catch_ups", []):
            missed = "" if c["rounds_missed"] is None else f", {c['rounds_missed']} rounds behind"
            console.print(
                f"node {c['node']} downloaded the state of round {c['round']}{missed}: "
                f"{c['mb']} MB in {c['seconds']} s ({c['mb_per_s']} MB/s) from "
                f"{c['donors']} donor(s)"
            )
        _print_costs(console, report)
        peaks = [p for p in report.get("rss_peak_mb", []) if p is not None]
        if peaks:
            console.print(f"peak resident memory per daemon: {min(peaks):.0f}-{max(peaks):.0f} MB")
        if report.get("export"):
            done = report["export"]
            what = done.get("error") or f"{', '.join(done['files'])} in {done['seconds']} s"
            console.print(f"exported ({done['format']}) to {done['out']}: {what}")
        if report.get("sample"):
            console.rule("sample from the trained model")
            console.print(report["sample"], markup=False, highlight=False)
    for died in report.get("died", []):
        console.print(
            f"[red]node {died['node']} died by itself[/] (exit {died['exit_code']}): "
            f"{died['error']}"
        )
    clean = sum(1 for code in report["exit_codes"] if code == 0)
    console.print(
        f"stopped cleanly: {clean}/{len(report['exit_codes'])}   total {report['total_s']} s"
    )


def _print_costs(console, report: dict) -> None:
    """A round's time split, the members' throughput and their checkpoints."""
    if split := report.get("round_split"):
        console.print(
            f"a round (median): {split['round_s']} s = inner steps {split['inner_s']} s + "
            f"exchange and waits {split['exchange_s']} s + aggregation and outer step "
            f"{split['outer_s']} s"
        )
    rates = [t["per_s"] for t in report.get("throughput", []) if t["per_s"]]
    computing = [t["per_s_computing"] for t in report.get("throughput", []) if t["per_s"]]
    if rates:
        unit = report.get("curve_unit", "samples")
        console.print(
            f"{unit}/s per member: {min(rates):.0f}-{max(rates):.0f} over whole rounds, "
            f"{min(computing):.0f}-{max(computing):.0f} while computing"
        )
    written = [c for c in report.get("checkpoints", []) if c["written"]]
    if written:
        mean = sum(c["mean_s"] for c in written) / len(written)
        console.print(
            f"checkpoints: {max(c['mb'] for c in written)} MB each, {mean:.2f} s to write "
            f"(mean over {len(written)} members)"
        )

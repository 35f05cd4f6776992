"""`peertrain swarm local --mode diffusion`: K expert groups and a router trained by N daemons.

The mesh mode's daemons, churn and Byzantine members (swarm_mesh.py), with a diffusion run: node 0
creates it, the others `peertrain join <first> --run local` one at a time (each after the last
one's group shows in its status, so every joiner chooses by need on a view that holds the ones
before it). At the end node 0 samples with every strategy (`diffusion.sample`, .npz) and the
supervisor scores the samples: FID in the feature space of a small CNN classifier trained on the
run's dataset (swarm/diffusion/quality.py), with class coverage. The report holds per-expert
loss, the router's top-1 accuracy at t = 0.1, and that quality per strategy.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..api.control import call_sync
from ..errors import ControlError
from .local_swarm import isolation
from .processes import DaemonProcess
from .swarm_mesh import MeshSwarm

STRATEGIES = ("top1", "top2", "full", "sample1")
SAMPLES = 512
SAMPLE_STEPS = 20
GROUP_WAIT = 120.0  # seconds a joiner may take to choose its group
START_TIMEOUT = 60.0


class DiffusionSwarm(MeshSwarm):
    @property
    def training(self) -> bool:
        return True

    def header(self) -> dict[str, Any]:
        return {**super().header(), "experts": self.options.spec.get("experts", 4)}

    def _create_run(self, first: DaemonProcess) -> None:
        # joiners come one at a time: a group's round 0 waits (up to START_TIMEOUT) for as many
        # members as the largest group will get, so a group of two trains together from the start
        experts = self.options.spec.get("experts", 4)
        spec = {
            "min_members": -(-self.options.nodes // (experts + 1)),
            "start_timeout": START_TIMEOUT,
            **self.options.spec,
        }
        params = {"name": isolation().run_name, "mode": "diffusion", "spec": spec}
        created = call_sync(first.control_socket, "run.create", params, timeout=300)
        self.console.print(f"created diffusion run ({created['run_id'][:16]}…) on node 0")
        self._wait_for_group(first)

    def _started(self, index: int, status: dict[str, Any]) -> None:
        """The next joiner starts once this one's group is known: each chooses by need."""
        super()._started(index, status)
        if index > 0:  # node 0 chooses its group once it created the run (_create_run)
            self._wait_for_group(self.daemons[index])

    def _wait_for_group(self, daemon: DaemonProcess) -> None:
        deadline = time.monotonic() + GROUP_WAIT
        while time.monotonic() < deadline:
            try:
                run = daemon.status(timeout=5.0).get("run") or {}
            except ControlError:
                run = {}  # busy starting the run (torch, the partition): asked again
            if run.get("group"):
                self.console.print(f"  it trains {run['group']}")
                return
            time.sleep(0.5)

    # --- report ----------------------------------------------------------------------------
    def conclude(self) -> None:
        self.quality = self._quality()

    def _quality(self) -> dict[str, Any]:
        """FID and coverage of node 0's samples by each strategy."""
        arrays = {}
        for strategy in STRATEGIES:
            out = self.base / f"samples-{strategy}.npz"
            params = {
                "run": isolation().run_name,
                "n": SAMPLES,
                "steps": SAMPLE_STEPS,
                "strategy": strategy,
                "out": str(out),
            }
            try:
                call_sync(self.daemons[0].control_socket, "diffusion.sample", params, timeout=600)
            except ControlError as exc:
                return {"error": str(exc)}
            arrays[strategy] = out
        return score_samples(self.options.spec.get("dataset", "digits"), arrays)

    def report(self) -> dict[str, Any]:
        runs = [s["run"] for s in self.statuses if s and s.get("run")]
        groups = runs[0].get("groups", {}) if runs else {}
        router = next((r for r in runs if r.get("group") == "router"), {})
        return {
            "mesh_s": self.mesh_s,
            "kills": self.kills,
            "died": sorted(self.died.values(), key=lambda d: d["node"]),
            "rounds_completed": min((r["round"] for r in runs), default=0),
            "groups": {
                g: {k: v[k] for k in ("members", "steps", "round", "loss")}
                for g, v in groups.items()
            },
            "expert_loss": {g: v["loss"] for g, v in groups.items() if g != "router"},
            "router_accuracy": router.get("router_accuracy"),
            "traffic": _traffic(runs),
            "quality": getattr(self, "quality", None),
            "byzantine": self.options.byzantine,
            "attack": self.options.attack if self.options.byzantine else None,
        }

    def summarise(self, console, report: dict[str, Any]) -> None:
        console.rule("summary")
        console.print(f"nodes {report['nodes']}, experts {report['experts']}, rounds "
                      f"{report['rounds_completed']}, kills {report['kills']}")  # fmt: skip
        for group, figures in report["groups"].items():
            loss = "-" if figures["loss"] is None else f"{figures['loss']:.4f}"
            console.print(f"  {group:10} members {len(figures['members'])}  loss {loss}")
        if report.get("router_accuracy") is not None:
            console.print(f"router top-1 accuracy at t=0.1: {report['router_accuracy']:.3f}")
        quality = report.get("quality") or {}
        for strategy, figures in quality.get("strategies", {}).items():
            console.print(
                f"  {strategy:8} FID {figures['fid']:.2f}  classes {figures['classes_covered']}"
            )
        clean = sum(1 for code in report["exit_codes"] if code == 0)
        console.print(f"stopped cleanly: {clean}/{len(report['exit_codes'])}   "
                      f"total {report['total_s']} s")  # fmt: skip

    def succeeded(self, report: dict[str, Any]) -> bool:
        clean = all(code in (0, None) for code in report["exit_codes"])
        ok = report.get("rounds_completed", 0) > 0 and bool(report.get("quality"))
        return clean and ok and not self.died and not report.get("interrupted")


def _traffic(runs: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per group: the updates its members aggregated, by the sender's group, summed."""
    out: dict[str, dict[str, int]] = {}
    for run in runs:
        counts = out.setdefault(run.get("group") or "?", {})
        for sender, n in run.get("traffic", {}).get("updates_from", {}).items():
            counts[sender] = counts.get(sender, 0) + n
    return out


def score_samples(dataset: str, arrays: dict[str, Path]) -> dict[str, Any]:
    """Classifier FID and class coverage of each strategy's samples against the dataset."""
    import numpy as np
    import torch
    from peertrain.swarm.diffusion import QualityMeter, TrainConfig, train_classifier
    from peertrain.swarm.diffusion.data import load_image_dataset

    data = load_image_dataset(dataset)
    classifier = train_classifier(
        data.images, data.labels, data.num_classes, TrainConfig(steps=300, batch_size=128)
    )
    meter = QualityMeter(classifier, data.images, data.num_classes)
    out = {}
    for strategy, path in arrays.items():
        with np.load(path) as loaded:
            report = meter.measure(torch.from_numpy(loaded["images"]))
        out[strategy] = {
            "fid": report.fid,
            "classes_covered": report.classes_covered,
            "class_tv": report.class_tv,
        }
    return {
        "metric": "FID in the feature space of a small CNN classifier trained on the same data",
        "samples": SAMPLES,
        "sampler_steps": SAMPLE_STEPS,
        "strategies": out,
    }

"""Decentralized diffusion experts against one monolithic model, at equal training compute.

Arms (every model is the same compact DiT; S steps each; an expert's batch is B):

  monolith          one model on all the data, batch K·B: the same samples seen as K experts;
  feature experts   K experts, each on one cluster of a k-means partition of PCA features (fine
                    clusters consolidated to K), plus a router trained on (x_t, cluster);
  random experts    the same with a balanced random partition (the baseline features must beat).

Each expert set is sampled with every strategy (top1, top2, full, sample1, threshold0.2, and
pick1, one expert per trajectory drawn at t = 1; the random experts with top1 and full) from the
same noise as the monolith, and the feature experts again with top1, full and sample1 at 4
sampler steps (Sample-1's draw noise shrinks with the step size, so coarse steps show whether its
rank is a step-size effect). Quality: FID in the
64-d penultimate feature space of a small CNN classifier trained on the same data ("classifier
FID": comparable between arms here, not with published Inception FIDs), plus per-class coverage
(classes holding at least half a fair share of the samples) and the total-variation distance of
the samples' class distribution from the reference's; each FID comes with ± 1.96 of its bootstrap
sd over the samples (how much of a gap is sampling noise), and each sample set with its spread
over the feature clusters against the data's ("cluster TV"). Router top-1 accuracy is measured on
held-out images noised to t = 0.05 … 0.9 exactly as the sampler's states are (their cluster from
the partition's stored centroids), beside its mean top probability (calibration; 1 − it is how
often Sample-1 leaves the Top-1 expert), and the clusters' separation in the PCA space.

Sample-1 follows the paper (McAllister et al. 2025): at every step each sample uses the velocity of
one expert drawn from the router's distribution (sampling.py, `expert_weights`). It is not the worst
strategy here (digits: 20.5, interval 17.8–23.2, against Full 20.7, 18.2–23.2), and the diagnostics
say why. The router is calibrated (accuracy − mean top probability within ±0.05 at every t), so a
draw is an unbiased estimate of Full's mixture whose error shrinks with the step size (a flow that
switches at random between experts converges to the averaged flow); where experts differ most, at
low noise, the router is sure (accuracy 0.93, top probability 0.95 at t = 0.1), so the draw is
nearly always the Top-1 expert. Top-1 is the one that errs: at high noise the router is unsure
(accuracy 0.30 at t = 0.9), Top-1 sends each sample wholly to its argmax expert there, and the
samples' shares of the clusters drift from the data's (cluster TV 0.156 vs 0.055–0.060 for
Sample-1 and Full; at 4 steps 0.248, FID 56). The paper's much worse Sample-1 (FID 157) presumably
needs experts that disagree where the router is unsure; 4 PCA clusters of digits overlap (a fifth
of the images lie near a border), which keeps the experts' velocities close. Fashion-MNIST (the
default run, 94ded6e, one torch thread pinned to a core beside a test suite: 31 min) says the
same with better separated clusters (border share 0.137): monolith 62.7; feature experts top1
54.2, full 42.6, top2 40.2, threshold0.2 40.1, sample1 35.8, pick1 28.3; random top1 86.3.
Top-1 is again the worst feature strategy (cluster TV 0.286 against 0.068 for Sample-1; router
accuracy 0.55 at t = 0.9), Sample-1 the second best.

Usage: python benchmarks/diffusion_quality.py [--quick] [--threads N] [--out-dir DIR]
--quick uses sklearn's 8×8 digits (a few minutes); the default, Fashion-MNIST from Debian's
dataset-fashion-mnist package, stays under 15 minutes on two cores. The last line printed is one
JSON object with all figures; a PNG grid of samples per arm and strategy goes to --out-dir.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from peertrain.swarm.diffusion import (
    DiTConfig,
    ExpertTrainer,
    ImageDataset,
    Partition,
    PartitionConfig,
    QualityMeter,
    RouterTrainer,
    SamplerConfig,
    Strategy,
    TrainConfig,
    expert_config,
    fit_partition,
    image_grid,
    integrate,
    load_digits_images,
    load_fashion_mnist,
    random_assignments,
    router_config,
    sample,
    train_classifier,
    write_png,
)

try:
    from benchmarks._diffusion_diagnostics import cluster_separation, cluster_tv, router_by_time
    from benchmarks._diffusion_report import report
    from benchmarks._report import print_json
except ImportError:  # run as a script from the benchmarks folder
    from _diffusion_diagnostics import cluster_separation, cluster_tv, router_by_time
    from _diffusion_report import report
    from _report import print_json

STRATEGIES = ("top1", "top2", "full", "sample1", "threshold0.2")  # the paper's; Sample-1 worst?
FEATURE_STRATEGIES = (*STRATEGIES, "pick1")  # pick1: one expert per trajectory (not the paper's)
RANDOM_STRATEGIES = ("top1", "full")
COARSE_STRATEGIES = ("top1", "full", "sample1")  # again at COARSE_STEPS sampler steps
COARSE_STEPS = 4
ROUTER_TIMES = (0.05, 0.1, 0.3, 0.5, 0.7, 0.9)
BOOTSTRAP = 50  # resamplings of each sample set for the FID's interval


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    experts: int
    steps: int
    batch_size: int
    classifier_steps: int
    samples: int
    sampler: SamplerConfig
    model: DiTConfig
    router: DiTConfig
    partition: PartitionConfig
    lr: float
    seed: int
    grid_scale: int


def quick_setup(args: argparse.Namespace) -> Setup:
    model = expert_config("dit-tiny", image_size=8)
    return _setup(args, model, steps=800, batch_size=32, samples=1000, grid_scale=4)


def fashion_setup(args: argparse.Namespace) -> Setup:
    model = expert_config("dit-tiny", image_size=28)
    return _setup(args, model, steps=1200, batch_size=32, samples=1000, grid_scale=2)


def _setup(
    args: argparse.Namespace,
    model: DiTConfig,
    *,
    steps: int,
    batch_size: int,
    samples: int,
    grid_scale: int,
) -> Setup:
    steps = args.steps or steps
    router = router_config(model, experts=args.experts)
    return Setup(
        experts=args.experts,
        steps=steps,
        batch_size=args.batch_size or batch_size,
        classifier_steps=max(300, steps // 2),
        samples=args.samples or samples,
        sampler=SamplerConfig(steps=args.sampler_steps, method=args.sampler),
        model=model,
        router=router,
        partition=PartitionConfig(clusters=args.experts, seed=args.seed),
        lr=args.lr,
        seed=args.seed,
        grid_scale=grid_scale,
    )


def load_data(quick: bool, seed: int) -> tuple[ImageDataset, torch.Tensor, torch.Tensor]:
    """(training set, held-out images, FID reference images)."""
    if quick:
        digits = load_digits_images()
        order = torch.randperm(len(digits.images), generator=torch.Generator().manual_seed(seed))
        train_rows, held_rows = order[300:].sort().values, order[:300].sort().values
        train = dataclasses.replace(
            digits, images=digits.images[train_rows], labels=digits.labels[train_rows]
        )
        return train, digits.images[held_rows], digits.images
    test = load_fashion_mnist(split="test")
    return load_fashion_mnist(split="train"), test.images[:2000], test.images


def train_config(setup: Setup, *, batch_size: int, seed: int) -> TrainConfig:
    return TrainConfig(
        steps=setup.steps,
        batch_size=batch_size,
        lr=setup.lr,
        min_lr=setup.lr / 20,
        warmup_steps=min(100, setup.steps // 10),
        seed=seed,
    )


def train_velocity_model(setup: Setup, images: torch.Tensor, *, batch_size: int, seed: int):
    """A fresh DiT trained by flow matching on `images`: (model, mean loss of the last tenth)."""
    model = setup.model.build(seed=seed)
    losses = ExpertTrainer(
        model, images, train_config(setup, batch_size=batch_size, seed=seed)
    ).train()
    return model.eval(), float(np.mean(losses[-max(1, len(losses) // 10) :]))


def train_experts(setup: Setup, images: torch.Tensor, clusters: np.ndarray, label: str) -> dict:
    """K experts, one per cluster (no expert sees another's data), then the router."""
    started = time.perf_counter()
    trained = [
        train_velocity_model(
            setup,
            images[torch.from_numpy(clusters == k)],
            batch_size=setup.batch_size,
            seed=setup.seed + 1 + k,
        )
        for k in range(setup.experts)
    ]
    expert_seconds = time.perf_counter() - started
    router, router_loss = train_router(setup, images, clusters)
    losses = [loss for _, loss in trained]
    print(
        f"  {label}: experts trained in {expert_seconds:.0f} s, losses "
        f"{', '.join(f'{x:.3f}' for x in losses)}; router loss {router_loss:.3f}",
        flush=True,
    )
    return {
        "experts": [model for model, _ in trained],
        "router": router,
        "expert_losses": losses,
        "cluster_sizes": np.bincount(clusters, minlength=setup.experts).tolist(),
        "router_loss": router_loss,
        "expert_seconds": expert_seconds,
        "router_seconds": time.perf_counter() - started - expert_seconds,
    }


def train_router(setup: Setup, images: torch.Tensor, clusters: np.ndarray):
    """The router (its own small DiT, batch 2B, S steps): (model, mean loss of the last tenth)."""
    router = setup.router.build(seed=setup.seed + 100)
    config = train_config(setup, batch_size=2 * setup.batch_size, seed=setup.seed + 100)
    losses = RouterTrainer(router, images, torch.from_numpy(clusters), config).train()
    return router.eval(), float(np.mean(losses[-max(1, len(losses) // 10) :]))


@dataclass(frozen=True, slots=True)
class Scorer:
    """Times one way of drawing samples, scores the samples, and writes 64 of them as a PNG."""

    meter: QualityMeter
    out_dir: Path
    scale: int
    partition: Partition
    cluster_shares: np.ndarray  # the training data's shares of the feature clusters

    def __call__(self, arm: str, strategy: str, draw: Callable[[], torch.Tensor]) -> dict:
        started = time.perf_counter()
        samples = draw()
        seconds = time.perf_counter() - started
        quality = self.meter.measure(samples, bootstrap=BOOTSTRAP)
        grid = image_grid(samples[:64], columns=8, scale=self.scale)
        write_png(self.out_dir / f"{arm}{'' if strategy == '-' else '-' + strategy}.png", grid)
        return {
            "arm": arm,
            "strategy": strategy,
            "fid": quality.fid,
            "fid_interval": quality.fid_interval,
            "cluster_tv": cluster_tv(self.partition, samples, self.cluster_shares),
            "classes_covered": quality.classes_covered,
            "class_tv": quality.class_tv,
            "sample_seconds": seconds,
        }


def sample_all(
    setup: Setup,
    monolith: torch.nn.Module,
    expert_arms: dict[str, tuple[dict, Sequence[str], SamplerConfig]],
    noise: torch.Tensor,
    score: Scorer,
) -> list[dict]:
    """Every arm from the same noise: the monolith alone, each expert set by each strategy."""
    rows = [score("monolith", "-", functools.partial(integrate, monolith, noise, setup.sampler))]
    for arm, (trained, strategies, sampler) in expert_arms.items():
        for name in strategies:
            draw = functools.partial(
                sample,
                trained["experts"],
                trained["router"],
                noise,
                strategy=Strategy.parse(name),
                sampler=sampler,
                seed=setup.seed,
            )
            rows.append(score(arm, name, draw))
    return rows


def run(setup: Setup, quick: bool, out_dir: Path) -> dict:
    started = time.perf_counter()
    train, held_out, reference = load_data(quick, setup.seed)
    images = train.images
    print(
        f"{train.name}: {len(images)} training images {tuple(images.shape[1:])}; "
        f"K = {setup.experts}; {setup.steps} steps; expert batch {setup.batch_size}, monolith "
        f"batch {setup.experts * setup.batch_size}; DiT width {setup.model.width} depth "
        f"{setup.model.depth} patch {setup.model.patch_size} "
        f"({sum(p.numel() for p in setup.model.build().parameters()):,} params); sampler "
        f"{setup.sampler.method} {setup.sampler.steps} steps, {setup.samples} samples",
        flush=True,
    )
    classifier = train_classifier(
        images,
        train.labels,
        train.num_classes,
        TrainConfig(steps=setup.classifier_steps, batch_size=128, lr=2e-3, seed=setup.seed),
    )
    meter = QualityMeter(classifier, reference, train.num_classes)
    partition = fit_partition(images.numpy(), setup.partition, dataset_digest=train.digest)
    feature = train_experts(setup, images, partition.assignments, "feature clusters")
    random = train_experts(
        setup, images, random_assignments(len(images), setup.experts, seed=setup.seed), "random"
    )
    mono_started = time.perf_counter()
    monolith, mono_loss = train_velocity_model(
        setup, images, batch_size=setup.experts * setup.batch_size, seed=setup.seed + 1
    )
    mono_seconds = time.perf_counter() - mono_started
    print(f"  monolith trained in {mono_seconds:.0f} s, loss {mono_loss:.3f}", flush=True)
    noise = torch.randn(
        setup.samples, *images.shape[1:], generator=torch.Generator().manual_seed(setup.seed + 7)
    )
    coarse = dataclasses.replace(setup.sampler, steps=COARSE_STEPS)
    arms = {
        "feature": (feature, FEATURE_STRATEGIES, setup.sampler),
        "random": (random, RANDOM_STRATEGIES, setup.sampler),
        f"feature@{COARSE_STEPS}steps": (feature, COARSE_STRATEGIES, coarse),
    }
    score = Scorer(meter, out_dir, setup.grid_scale, partition, partition.sizes() / len(images))
    rows = sample_all(setup, monolith, arms, noise, score)
    return {
        "dataset": train.name,
        "partition_digest": partition.digest,
        "rows": rows,
        "feature": feature,
        "random": random,
        "monolith_loss": mono_loss,
        "monolith_seconds": mono_seconds,
        "router": router_by_time(
            feature["router"], held_out, partition.clusters_of(held_out.numpy()), ROUTER_TIMES
        ),
        "separation": cluster_separation(partition, images.numpy()),
        "seconds": time.perf_counter() - started,
    }


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="8×8 digits instead of Fashion-MNIST")
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--steps", type=int, default=0, help="training steps per model")
    parser.add_argument("--batch-size", type=int, default=0, help="an expert's batch")
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--sampler", choices=("euler", "heun"), default="euler")
    parser.add_argument("--sampler-steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's own)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=Path("build/diffusion_quality"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    setup = quick_setup(args) if args.quick else fashion_setup(args)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    result = run(setup, args.quick, args.out_dir)
    print_json(report(result, setup, args.out_dir, STRATEGIES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Decentralized diffusion: isolated experts per data cluster, a router, and sampling from both.

Pure torch, no networking:
    flow.py        the flow-matching schedule (rectified flow), velocity target and loss
    model.py       the compact DiT of experts and router;  presets.py  named sizes (dit-tiny)
    partition.py   the content-addressed data partition (PCA features, fine-to-coarse k-means)
    training.py    expert and router trainers, one step at a time
    sampling.py    Euler / Heun samplers; full / top-k / sample-1 / pick-1 / threshold strategies
    analytic.py    exact flows of a finite data set (the ground truth of the tests)
    quality.py     classifier FID and class coverage;  data.py  digits and Fashion-MNIST
    png.py         sample grids as PNG
A diffusion run (what node/runs/diffusion_session.py and diffusion_sample.py adapt):
    run_spec.py      the run's spec: K experts + router as groups, each group's DiLoCo settings
    run_partition.py the partition artifact, fitted by the creator and named by its address
    groups.py        which group a joiner takes, each group's newest state and progress
    group_member.py  a group's DiLoCo member (the DiT behind the inner-loop interface)
    sampling_job.py  groups' states in, a PNG grid or an .npz out
Nothing here knows about peers.
"""

from __future__ import annotations

from .analytic import (
    cluster_posterior,
    empirical_cluster_velocity,
    empirical_velocity,
    posterior_weights,
)
from .data import ImageDataset, load_digits_images, load_fashion_mnist, load_image_dataset
from .errors import DatasetMissing, DiffusionError, PartitionCorrupt, PartitionError
from .flow import RectifiedFlow, VelocityFn, conditional_velocity, flow_matching_loss, noised
from .model import DiT, DiTConfig
from .partition import Partition, PartitionConfig, fit_partition, random_assignments
from .png import image_grid, png_bytes, write_png
from .presets import PRESETS, expert_config, router_config
from .quality import (
    FeatureClassifier,
    QualityMeter,
    QualityReport,
    frechet_distance,
    train_classifier,
)
from .sampling import (
    RouterFn,
    SamplerConfig,
    Strategy,
    expert_weights,
    integrate,
    mix_velocities,
    routed_velocity,
    sample,
)
from .training import ExpertTrainer, RouterTrainer, TrainConfig, router_accuracy

__all__ = [
    "DatasetMissing",
    "DiT",
    "DiTConfig",
    "DiffusionError",
    "PRESETS",
    "ExpertTrainer",
    "FeatureClassifier",
    "ImageDataset",
    "Partition",
    "PartitionConfig",
    "PartitionCorrupt",
    "PartitionError",
    "QualityMeter",
    "QualityReport",
    "RectifiedFlow",
    "RouterFn",
    "RouterTrainer",
    "SamplerConfig",
    "Strategy",
    "TrainConfig",
    "VelocityFn",
    "cluster_posterior",
    "conditional_velocity",
    "empirical_cluster_velocity",
    "empirical_velocity",
    "expert_config",
    "expert_weights",
    "fit_partition",
    "flow_matching_loss",
    "frechet_distance",
    "image_grid",
    "integrate",
    "load_digits_images",
    "load_fashion_mnist",
    "load_image_dataset",
    "mix_velocities",
    "noised",
    "png_bytes",
    "posterior_weights",
    "random_assignments",
    "routed_velocity",
    "router_config",
    "router_accuracy",
    "sample",
    "train_classifier",
    "write_png",
]

"""Diagnostics of benchmarks/diffusion_quality.py: why the strategies rank as they do.

The router is measured on held-out images noised exactly as the sampler's states are (x_t =
(1 − t)·x_0 + t·ε, the t the experts see): its accuracy and its mean top probability side by side
say whether it is calibrated, and 1 − the top probability is how often Sample-1 draws another
expert than Top-1. Cluster separation and the samples' spread over the feature clusters say
whether an expert set reproduces the data's cluster proportions (a strategy that sends most
samples to one expert early shows a large cluster TV).
"""

from __future__ import annotations

import numpy as np
import torch


@torch.no_grad()
def router_by_time(router, held_out: torch.Tensor, clusters: np.ndarray, times) -> dict:
    """Per t: top-1 accuracy, mean top probability, and accuracy − confidence (calibration)."""
    eps = torch.randn(held_out.shape, generator=torch.Generator().manual_seed(1))
    labels = torch.from_numpy(clusters)
    out = {}
    for t in times:
        s = torch.full((len(held_out),), float(t))
        probabilities = torch.softmax(router((1 - t) * held_out + t * eps, s), dim=1)
        accuracy = float((probabilities.argmax(dim=1) == labels).float().mean())
        confidence = float(probabilities.max(dim=1).values.mean())
        out[f"t={t:g}"] = {
            "accuracy": accuracy,
            "top_probability": confidence,
            "gap": accuracy - confidence,
        }
    return out


def cluster_separation(partition, pixels: np.ndarray, *, limit: int = 3000) -> dict:
    """In the partition's PCA space: the mean ratio of an image's distance to its own coarse
    centroid over its distance to the nearest other one (1 = on the border, 0 = at the centre),
    and the share of images with a ratio above 0.9 (border images an expert shares with another)."""
    features = partition.features(pixels[:limit])
    own = partition.clusters_of(pixels[:limit])
    k = partition.config.clusters
    centroids = np.stack([features[own == c].mean(axis=0) for c in range(k)])
    distances = np.sqrt(((features[:, None, :] - centroids[None]) ** 2).sum(axis=2))
    mine = distances[np.arange(len(own)), own]
    distances[np.arange(len(own)), own] = np.inf
    ratio = mine / distances.min(axis=1)
    return {"mean_ratio": float(ratio.mean()), "border_share": float((ratio > 0.9).mean())}


def cluster_tv(partition, samples: torch.Tensor, data_shares: np.ndarray) -> float:
    """Total-variation distance between the samples' shares of the feature clusters (each
    sample assigned like a data image) and the training data's shares."""
    assigned = partition.clusters_of(samples.clamp(-1, 1).numpy())
    shares = np.bincount(assigned, minlength=len(data_shares)) / len(samples)
    return float(0.5 * np.abs(shares - data_shares).sum())

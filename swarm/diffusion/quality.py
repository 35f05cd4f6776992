"""Sample quality without downloads: FID in the feature space of a small classifier, and coverage.

Inception features need a download and mean little at 8×8, so the Fréchet distance is computed on
the penultimate layer of a small CNN trained on the same data (a "classifier FID"; numbers compare
only against each other, never with published Inception FIDs). The same classifier labels the
samples, which gives per-class coverage: how the samples spread over the data's classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .training import TrainConfig


class FeatureClassifier(nn.Module):
    """Two stride-2 convolutions, a `features`-wide layer (the FID space), then class logits."""

    def __init__(
        self, *, image_size: int, channels: int, classes: int, features: int = 64, seed: int = 0
    ) -> None:
        super().__init__()
        side = math.ceil(math.ceil(image_size / 2) / 2)  # after two stride-2 convolutions
        with torch.device("meta"):  # weights come from the seeded generator below only
            self.convs = nn.Sequential(
                nn.Conv2d(channels, 32, 3, stride=2, padding=1),
                nn.SiLU(),
                nn.Conv2d(32, 64, 3, stride=2, padding=1),
                nn.SiLU(),
                nn.Flatten(),
            )
            self.embed = nn.Linear(64 * side * side, features)
            self.out = nn.Linear(features, classes)
        self.to_empty(device="cpu")
        generator = torch.Generator().manual_seed(seed)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, 0.0, 1.0 / np.sqrt(p[0].numel()), generator=generator)
            else:
                nn.init.zeros_(p)

    def features(self, images: Tensor) -> Tensor:
        return F.silu(self.embed(self.convs(images)))

    def forward(self, images: Tensor) -> Tensor:
        return self.out(self.features(images))


def train_classifier(
    images: Tensor, labels: Tensor, classes: int, config: TrainConfig
) -> FeatureClassifier:
    """Fit the feature classifier by cross-entropy (a fixed seed makes it the same every run)."""
    model = FeatureClassifier(
        image_size=images.shape[-1], channels=images.shape[1], classes=classes, seed=config.seed
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(config.seed)
    for step in range(config.steps):
        for group in optimizer.param_groups:
            group["lr"] = config.lr_at(step)
        rows = torch.randint(len(images), (config.batch_size,), generator=generator)
        loss = F.cross_entropy(model(images[rows]), labels[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model.eval()


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """‖μ_a − μ_b‖² + Tr(Σ_a + Σ_b − 2(Σ_a Σ_b)^½) of two feature sets [N, F], in float64."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    values, vectors = np.linalg.eigh(cov_a)
    root_a = (vectors * np.sqrt(values.clip(min=0))) @ vectors.T
    # Tr((Σ_a Σ_b)^½) = Tr((Σ_a^½ Σ_b Σ_a^½)^½), whose argument is symmetric PSD.
    cross = np.sqrt(np.linalg.eigvalsh(root_a @ cov_b @ root_a).clip(min=0)).sum()
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(cov_a) + np.trace(cov_b) - 2 * cross)


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityReport:
    """FID in classifier space; class shares of the samples; classes holding ≥ half a fair share;
    total-variation distance between the samples' and the data's class distributions."""

    fid: float
    class_shares: tuple[float, ...]
    classes_covered: int
    class_tv: float
    fid_interval: tuple[float, float] | None = None  # FID ± 1.96 bootstrap sd, if asked


class QualityMeter:
    """Scores sample sets against one reference set (its statistics are computed once)."""

    def __init__(self, classifier: FeatureClassifier, reference: Tensor, classes: int) -> None:
        self.classifier, self.classes = classifier, classes
        self.reference_features, reference_labels = self._describe(reference)
        self.reference_shares = np.bincount(reference_labels, minlength=classes) / len(reference)

    @torch.no_grad()
    def _describe(self, images: Tensor) -> tuple[np.ndarray, np.ndarray]:
        feats = torch.cat([self.classifier.features(x) for x in images.split(512)])
        labels = self.classifier.out(feats).argmax(dim=1)
        return feats.numpy(), labels.numpy()

    def measure(self, samples: Tensor, *, bootstrap: int = 0, seed: int = 0) -> QualityReport:
        """Scores of `samples`; with `bootstrap` > 0 also a 95% interval of the FID, ± 1.96 of
        its standard deviation over that many resamplings (with replacement) of the samples:
        how much of a gap between two sample sets of this size is noise. (Centred on the FID
        because resampling duplicates samples and so biases each resample's FID upwards.)"""
        feats, labels = self._describe(samples.clamp(-1, 1))
        fid = frechet_distance(feats, self.reference_features)
        shares = np.bincount(labels, minlength=self.classes) / len(samples)
        spread = 1.96 * self._bootstrap_sd(feats, bootstrap, seed) if bootstrap else None
        return QualityReport(
            fid=fid,
            class_shares=tuple(float(s) for s in shares),
            classes_covered=int((shares >= 0.5 / self.classes).sum()),
            class_tv=float(0.5 * np.abs(shares - self.reference_shares).sum()),
            fid_interval=None if spread is None else (fid - spread, fid + spread),
        )

    def _bootstrap_sd(self, feats: np.ndarray, resamples: int, seed: int) -> float:
        rng = np.random.default_rng(seed)
        fids = [
            frechet_distance(
                feats[rng.integers(0, len(feats), len(feats))], self.reference_features
            )
            for _ in range(resamples)
        ]
        return float(np.std(fids, ddof=1))

"""A compact DiT: the velocity model of every expert, and (with a pooled head) the router.

A transformer over image patches, conditioned on t by adaptive layer norm with zero-initialised
gates (adaLN-Zero, as in DiT), so each block starts as the identity and a fresh model predicts zero
velocity. Patches keep the token count small (8×8 digits in 2×2 patches = 16 tokens; 28×28
Fashion-MNIST in 4×4 patches = 49), which is what makes a few minutes on a CPU enough.

Weights are drawn from a private generator seeded by the caller, as in swarm/models/gpt.py, so
every member of an expert group builds bit-identical initial weights from the manifest seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class DiTConfig:
    """Shape of the DiT. `outputs=0` gives a velocity model; `outputs=K` a router with K logits."""

    image_size: int = 8
    channels: int = 1
    patch_size: int = 2
    width: int = 64
    depth: int = 3
    heads: int = 4
    mlp_ratio: int = 4
    outputs: int = 0

    def __post_init__(self) -> None:
        if self.image_size % self.patch_size:
            raise ConfigError(
                f"image_size ({self.image_size}) must be a multiple of patch_size "
                f"({self.patch_size})"
            )
        if self.width % self.heads:
            raise ConfigError(f"width ({self.width}) must be a multiple of heads ({self.heads})")
        if min(self.channels, self.patch_size, self.depth, self.heads, self.mlp_ratio) < 1:
            raise ConfigError("channels, patch_size, depth, heads and mlp_ratio must be positive")
        if self.outputs < 0:
            raise ConfigError("outputs must be 0 (a velocity model) or a number of clusters")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    def build(self, *, seed: int = 0) -> DiT:
        return DiT(self, seed=seed)


def timestep_features(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal features of t ∈ [0, 1] (scaled by 1000 so the frequencies span the range)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = 1000.0 * t.float()[:, None] * freqs[None, :]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=1)


def _modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return x * (1 + scale[:, None, :]) + shift[:, None, :]


class DiTBlock(nn.Module):
    def __init__(self, config: DiTConfig) -> None:
        super().__init__()
        w = config.width
        self.heads = config.heads
        self.norm_1 = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(w, 3 * w)
        self.attn_proj = nn.Linear(w, w)
        self.norm_2 = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
        self.fc = nn.Linear(w, config.mlp_ratio * w)
        self.mlp_proj = nn.Linear(config.mlp_ratio * w, w)
        self.ada = nn.Linear(w, 6 * w)  # zero-initialised: shift, scale, gate for attn and mlp

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = self.ada(F.silu(c)).chunk(6, dim=1)
        x = x + gate_a[:, None, :] * self._attention(_modulate(self.norm_1(x), shift_a, scale_a))
        h = _modulate(self.norm_2(x), shift_m, scale_m)
        return x + gate_m[:, None, :] * self.mlp_proj(F.gelu(self.fc(h)))

    def _attention(self, x: Tensor) -> Tensor:
        b, n, w = x.shape
        q, k, v = self.qkv(x).split(w, dim=2)
        q, k, v = (z.view(b, n, self.heads, w // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.attn_proj(y.transpose(1, 2).reshape(b, n, w))


class DiT(nn.Module):
    """`forward(x_t, t)`: the velocity (shape of x_t), or K router logits when `outputs=K`."""

    def __init__(self, config: DiTConfig, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        w, p = config.width, config.patch_size
        out = config.outputs or config.channels * p * p
        with torch.device("meta"):  # no throwaway default init drawing from the global RNG
            self.patch_in = nn.Linear(config.channels * p * p, w)
            self.position = nn.Parameter(torch.empty(1, config.num_patches, w))
            self.time_mlp = nn.Sequential(nn.Linear(w, w), nn.SiLU(), nn.Linear(w, w))
            self.blocks = nn.ModuleList(DiTBlock(config) for _ in range(config.depth))
            self.norm_out = nn.LayerNorm(w, elementwise_affine=False, eps=1e-6)
            self.ada_out = nn.Linear(w, 2 * w)
            self.head = nn.Linear(w, out)
        self.to_empty(device="cpu")
        self._init_weights(torch.Generator().manual_seed(seed))

    def _init_weights(self, generator: torch.Generator) -> None:
        for name, p in self.named_parameters():
            zero = name.endswith("bias") or ".ada." in name or name.startswith(("ada_out", "head"))
            if zero:
                nn.init.zeros_(p)  # adaLN-Zero: blocks start as identities, outputs at zero
            else:  # position table small; linear weights scaled by fan-in
                std = 0.02 if name == "position" else 1 / math.sqrt(p.shape[1])
                nn.init.normal_(p, 0.0, std, generator=generator)

    def forward(self, x_t: Tensor, t: Tensor) -> Tensor:
        tokens = self.patch_in(self._patchify(x_t)) + self.position
        c = self.time_mlp(timestep_features(t, self.config.width).to(tokens.dtype))
        for block in self.blocks:
            tokens = block(tokens, c)
        shift, scale = self.ada_out(F.silu(c)).chunk(2, dim=1)
        tokens = _modulate(self.norm_out(tokens), shift, scale)
        if self.config.outputs:
            return self.head(tokens.mean(dim=1))
        return self._unpatchify(self.head(tokens))

    def _patchify(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        p = self.config.patch_size
        x = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, (h // p) * (w // p), c * p * p)

    def _unpatchify(self, tokens: Tensor) -> Tensor:
        b, c, p = tokens.shape[0], self.config.channels, self.config.patch_size
        s = self.config.image_size
        g = s // p
        x = tokens.reshape(b, g, g, c, p, p).permute(0, 3, 1, 4, 2, 5)
        return x.reshape(b, c, s, s)

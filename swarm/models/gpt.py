"""A small byte-level GPT (nanoGPT-style) that trains on a CPU in minutes.

Byte-level (vocabulary 256) so any text, including the built-in standard-library corpus, needs no
tokenizer download. The default size (about 0.12 M parameters) is chosen so that DiLoCo runs, tests
and the quality benchmark fit on a two-core machine; the same code scales up by config.

Modules are created on the meta device and initialised from a private `torch.Generator` seeded by
the caller, so every member of a run builds bit-identical weights from the manifest seed without
touching (or depending on) the global RNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import ConfigError
from .pipeline_parts import SEQ, Boundary, PipelineParts


@dataclass(frozen=True, slots=True, kw_only=True)
class GPTConfig:
    """Shape of the GPT. `build(seed=...)` returns a freshly initialised model."""

    vocab_size: int = 256  # token ids (256: bytes; 50304 for GPT-2 tokens)
    block_size: int = 64  # context length in tokens
    n_layer: int = 2  # transformer blocks
    n_head: int = 4  # attention heads (n_embd must be a multiple)
    n_embd: int = 64  # width of the residual stream
    dropout: float = 0.0  # dropout probability (0 for pipelines)

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ConfigError(
                f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})"
            )
        if min(self.vocab_size, self.block_size, self.n_layer, self.n_head) < 1:
            raise ConfigError("vocab_size, block_size, n_layer and n_head must be positive")

    def build(self, *, seed: int = 0) -> GPT:
        return GPT(self, seed=seed)

    @property
    def pipeline_blocks(self) -> int:
        """How many blocks a SWARM pipeline may cut between (swarm/pipeline/slices.py)."""
        return self.n_layer


@dataclass(frozen=True, slots=True, kw_only=True)
class GPT25MConfig(GPTConfig):
    """`--model gpt-25m`: the same GPT at 29.5 M parameters (8 blocks of width 512, 8 heads of
    64, a 256-token context), for a BPE token file of 8192 ids (`peertrain data prepare-corpus`;
    pair it with `--set dataset_settings.block_size=256`). Any field still takes `--set`."""

    vocab_size: int = 8192  # token ids (prepare-corpus's default BPE vocabulary)
    block_size: int = 256  # context length in tokens
    n_layer: int = 8  # transformer blocks
    n_head: int = 8  # attention heads (n_embd must be a multiple)
    n_embd: int = 512  # width of the residual stream


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Embedding(nn.Module):
    """Token plus position embeddings: what the first pipeline stage runs before its blocks."""

    def __init__(self, wte: nn.Embedding, wpe: nn.Embedding, drop: nn.Module) -> None:
        super().__init__()
        self.wte, self.wpe, self.drop = wte, wpe, drop

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.drop(self.wte(idx) + self.wpe(pos))


class GPT(nn.Module):
    """`forward(idx, targets)` returns `(logits, loss)`; loss is None without targets."""

    def __init__(self, config: GPTConfig, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        with torch.device("meta"):  # no throwaway default init drawing from the global RNG
            self.wte = nn.Embedding(config.vocab_size, config.n_embd)
            self.wpe = nn.Embedding(config.block_size, config.n_embd)
            self.drop = nn.Dropout(config.dropout)
            self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
            self.ln_f = nn.LayerNorm(config.n_embd)
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.to_empty(device="cpu")
        self.lm_head.weight = self.wte.weight  # weight tying, as in GPT-2
        self._init_weights(torch.Generator().manual_seed(seed))

    def _init_weights(self, generator: torch.Generator) -> None:
        # GPT-2 init; residual projections scaled down by depth so the residual stream stays O(1).
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 1:  # LayerNorm gains
                nn.init.ones_(p)
            else:
                std = residual_std if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std, generator=generator)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, t = idx.shape
        if t > self.config.block_size:
            raise ValueError(f"sequence of {t} tokens exceeds block_size {self.config.block_size}")
        x = Embedding(self.wte, self.wpe, self.drop)(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def pipeline_parts(self) -> PipelineParts:
        """The model as a SWARM pipeline cuts it: embeddings, the blocks, final norm + head.

        The head is untied from the token embedding (they live on different stages, so one
        tensor cannot serve both); it starts from a copy of it and trains on its own."""
        c = self.config
        with torch.device("meta"):  # no default init drawing from the global RNG
            lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        lm_head.weight = nn.Parameter(self.lm_head.weight.detach().clone())
        hidden = Boundary(tail=(SEQ, c.n_embd))
        return PipelineParts(
            stem=Embedding(self.wte, self.wpe, self.drop),
            blocks=list(self.blocks),
            head=nn.Sequential(self.ln_f, lm_head),
            input=Boundary(tail=(SEQ,), tokens=c.vocab_size),
            boundaries=[hidden] * (c.n_layer + 1),
            output=Boundary(tail=(SEQ, c.vocab_size)),
            max_seq=c.block_size,
        )

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample `max_new_tokens` continuations of `idx` (shape [batch, time])."""
        for _ in range(max_new_tokens):
            context = idx[:, -self.config.block_size :]
            logits, _ = self(context)
            logits = logits[:, -1, :] / max(temperature, 1e-6)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)
        return idx


def sample_text(
    model: GPT, prompt: str, max_new_tokens: int = 200, *, seed: int = 0, tokenizer: Any = None
) -> str:
    """A continuation of `prompt` as text: byte-level ids decoded as UTF-8 (invalid bytes
    replaced), or, with `tokenizer` (a `tokenizers.Tokenizer`), the ids of that tokenizer."""
    if model.config.vocab_size != 256 and tokenizer is None:
        raise TypeError(
            f"this GPT's {model.config.vocab_size} token ids are not bytes: decode its output "
            "with the tokenizer its token file was made with (a tokenizer.json beside the token "
            "file, as `peertrain data prepare-corpus` leaves it, is used when present)"
        )
    ids = tokenizer.encode(prompt).ids if tokenizer is not None else list(prompt.encode("utf-8"))
    was_training = model.training
    model.eval()
    out = model.generate(
        torch.tensor([ids or [10 % model.config.vocab_size]], dtype=torch.long),
        max_new_tokens,
        temperature=0.8,
        top_k=40,
        generator=torch.Generator().manual_seed(seed),
    )
    model.train(was_training)
    if tokenizer is not None:
        return str(tokenizer.decode(out[0].tolist()))
    return bytes(out[0].tolist()).decode("utf-8", errors="replace")

"""What a DiLoCo run trains, as the manifest's opaque `spec`: canonical bytes, strictly checked.

The manifest (crdt/manifest.py) names a run by the hash of its bytes, so the spec must encode
canonically (msgpack of a key-sorted map, no floats that differ by platform: plain Python
floats round-trip exactly). Every member builds the same model, the same dataset and its own
shard from it. A member's shard is its rank among the round's contributors (sorted peer IDs,
read from the replicated RunState, so every member computes the same deal without a
coordinator); before it knows the group it starts from a seeded hash of its peer ID.

Admission is part of the signed spec, so nobody but the creator decides it. `open`: anyone may
train, but at most `max_members` updates count per round and at most `admit_per_round` newcomers
join the counted group per round (a wave of fresh IDs takes rounds, not seconds); states are
adopted on the word of `anchors` only (default: the creator). `invite`: only holders of a member
certificate (crdt/certificates.py) count; the rest of their traffic is dropped. The aggregator
`auto` is Flag (r from the group size) for open runs and the mean for invite runs, both with the
tight norm bound `RUN_MAX_NORM_RATIO` unless `aggregator_settings` name another.

Streaming DiLoCo (`fragments` > 1, `overlap`, `mix`, `eager`, `round_seconds`: config.py's
StreamingConfig) is left out of the bytes while at its defaults, so the IDs of plain runs stay
what they were before these fields existed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from peertrain.protocol.packing import pack
from peertrain.swarm.diloco.member.config import StreamingConfig
from peertrain.swarm.errors import SwarmError
from peertrain.swarm.models.config import ConfigError
from peertrain.swarm.run_spec import RunSpec, canonical

CODECS = ("fp32", "fp16", "bf16", "int8", "int4")
ADMISSIONS = ("open", "invite")
MAX_ANCHORS = 16
# Streaming DiLoCo's fields and their defaults (plain DiLoCo): absent from the bytes at these
EXCHANGES = ("gather", "sharded")
LINEAR_RULES = ("auto", "mean", "multi-krum", "flag")  # what the sharded exchange can check
STREAMING_DEFAULTS: dict[str, Any] = {
    "fragments": 1,
    "overlap": 0,
    "mix": 0.0,
    "eager": False,
    "round_seconds": 0.0,
}
# fields left out of the encoded spec at their defaults, so specs written before they existed
# keep their bytes (and run IDs), and older peers read new specs that do not use them
OPTIONAL_DEFAULTS: dict[str, Any] = {
    **STREAMING_DEFAULTS,
    "exchange": "gather",
    "scoring": "off",
    "score_batches": 4,
}
SCORINGS = ("off", "anchors")


@dataclass(frozen=True, slots=True, kw_only=True)
class DiLoCoSpec(RunSpec):
    KIND: ClassVar[str] = "DiLoCo spec"

    model: str = "gpt"  # gpt, mlp, an installed plugin, package.module:factory or hf:PATH_OR_CONFIG
    dataset: str = "text"  # text, tokens, images or digits
    inner_steps: int = 50  # inner AdamW steps per round (H) before members exchange updates
    batch_size: int = 16  # samples per inner step
    accumulation: int = 1  # micro-batches of batch_size per inner step (gradient accumulation)
    lr: float = 4e-4  # inner AdamW learning rate (peak, after warmup)
    warmup_steps: int = 50  # inner steps of linear learning-rate warmup
    outer_lr: float = 0.7  # outer Nesterov learning rate on the aggregated pseudo-gradient
    outer_momentum: float = 0.9  # outer Nesterov momentum
    codec: str = "int8"  # outer-update encoding: fp32, fp16, bf16, int8 or int4 (blockwise)
    error_feedback: bool = True  # carry what the codec rounded away into the next round's update
    aggregator: str = "auto"  # robust rule: auto, mean, median, trimmed-mean, multi-krum or flag
    # options of the aggregator rule (e.g. r for flag, f for trimmed-mean)
    aggregator_settings: Mapping[str, Any] = field(default_factory=dict)
    num_shards: int = 16  # data shards dealt among members (distinct shards for up to this many)
    rounds: int = 0  # 0: until stopped
    # seconds a round waits for missing members after our update, beyond 15% of our inner
    # phase (round_pace.straggler_allowance: members end long inner phases apart)
    round_timeout: float = 60.0
    min_members: int = 1  # round 0 waits (up to start_timeout) until this many members are in
    start_timeout: float = 120.0  # seconds round 0 waits for min_members before starting anyway
    seed: int = 0  # seed of the initial weights and the data order
    admission: str = "open"  # open (anyone may train) or invite (members hold a certificate)
    anchors: tuple[str, ...] = ()  # peers whose state attestations open runs trust (+ creator)
    max_members: int = 64  # updates counted per round (open runs)
    admit_per_round: int = 4  # newcomers counted per round (open runs)
    # how members trade updates: gather (each pulls every update) or sharded (each owns a
    # shard: about 2 × the update per member per round at any group size; linear rules only)
    exchange: str = "gather"
    # contribution scores (open runs): "anchors" score every update they pull on seeded probe
    # batches and newcomers count only once rated (swarm/scoring/); "off": counted by arrival
    scoring: str = "off"
    score_batches: int = 4  # probe batches per probe (held-out, the sender's shard) per update
    # Streaming DiLoCo (config.StreamingConfig): P fragments syncing in turn, outer steps τ
    # inner steps late, mixed by α, Eager; `round_seconds` > 0: a round is a compute window of
    # that many seconds (each member takes the steps it can) instead of `inner_steps` steps
    fragments: int = 1  # Streaming DiLoCo: the model in P fragments syncing in turn (1: off)
    overlap: int = 0  # Streaming: a fragment's outer step lands this many inner steps late (τ)
    mix: float = 0.0  # Streaming: α in θ_local ← α·θ_local + (1−α)·θ_global when a fragment lands
    eager: bool = False  # Streaming: apply our own outer gradient at once while the others' travel
    # Streaming: a round is a compute window of this many seconds (0: by steps)
    round_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ConfigError(f"codec must be one of {', '.join(CODECS)}, got {self.codec!r}")
        if min(self.inner_steps, self.batch_size, self.num_shards, self.accumulation) < 1:
            raise ConfigError(
                "inner_steps, batch_size, accumulation and num_shards must be at least 1"
            )
        if self.min_members < 1 or self.start_timeout < 0:
            raise ConfigError("min_members must be at least 1 and start_timeout non-negative")
        if self.rounds < 0 or self.round_timeout <= 0:
            raise ConfigError("rounds must be ≥ 0 and round_timeout positive")
        if self.admission not in ADMISSIONS:
            raise ConfigError(f"admission must be one of {', '.join(ADMISSIONS)}")
        if len(self.anchors) > MAX_ANCHORS or not all(isinstance(a, str) for a in self.anchors):
            raise ConfigError(f"anchors must be at most {MAX_ANCHORS} peer IDs")
        if self.max_members < 1 or self.admit_per_round < 1:
            raise ConfigError("max_members and admit_per_round must be at least 1")
        object.__setattr__(self, "anchors", tuple(self.anchors))  # msgpack gives a list
        if self.exchange not in EXCHANGES:
            raise ConfigError(
                f"exchange must be one of {', '.join(EXCHANGES)}, got {self.exchange!r}"
            )
        if self.scoring not in SCORINGS:
            raise ConfigError(f"scoring must be one of {', '.join(SCORINGS)}, got {self.scoring!r}")
        if not 1 <= self.score_batches <= 64:
            raise ConfigError("score_batches must be 1..64")
        if self.scoring != "off" and (self.exchange != "gather" or self.streaming):
            raise ConfigError("scoring needs the gather exchange and whole rounds (fragments 1)")
        if self.exchange == "sharded" and (self.aggregator not in LINEAR_RULES or self.streaming):
            raise ConfigError(
                "exchange 'sharded' needs a linear aggregator (auto, mean, multi-krum, flag) "
                "and whole rounds (fragments 1)"
            )
        if self.round_seconds < 0:
            raise ConfigError("round_seconds must be non-negative")
        self.streaming_config().check(self.inner_steps)
        self.model_config()
        self.dataset_config()
        try:
            self.build_aggregator()
        except ConfigError:
            raise
        except SwarmError as exc:  # the aggregator's own refusal: name the setting it came from
            raise ConfigError(f"setting 'aggregator_settings' ({self.aggregator}): {exc}") from None

    def to_bytes(self) -> bytes:
        fields = asdict(self)
        for name, default in OPTIONAL_DEFAULTS.items():
            if fields[name] == default:
                del fields[name]
        return pack(canonical(fields))

    @property
    def streaming(self) -> bool:
        """Does this run sync by fragments (Streaming DiLoCo) rather than whole rounds?"""
        return any(getattr(self, name) != d for name, d in STREAMING_DEFAULTS.items())

    # -- what it builds -------------------------------------------------------------------------

    def streaming_config(self) -> StreamingConfig:
        return StreamingConfig(
            fragments=self.fragments, overlap=self.overlap, mix=self.mix, eager=self.eager
        )

    def build_aggregator(self):
        from peertrain.swarm.aggregation import build_aggregator
        from peertrain.swarm.aggregation.validation import RUN_MAX_NORM_RATIO

        settings = {"max_norm_ratio": RUN_MAX_NORM_RATIO, **dict(self.aggregator_settings)}
        name = self.aggregator
        if name == "auto":
            name = "mean" if self.admission == "invite" else "flag"
            if name == "flag":
                settings.setdefault("r", None)  # from the group size (flag.group_rank)
        return build_aggregator(name, **settings)

    def trusted_anchors(self, creator: str) -> frozenset[str]:
        """Whose state attestations an open run trusts: the creator and the anchors it named."""
        return frozenset({creator, *self.anchors})

    def shard_in(self, peer_id: str, members: set[str]) -> int:
        """Rank of `peer_id` among `members`, modulo the shard count: distinct shards for up to
        `num_shards` members."""
        ranked = sorted(members | {peer_id})
        return ranked.index(peer_id) % self.num_shards

    def shard_for(self, peer_id: str, members: set[str], salt: bytes) -> int:
        """The shard `peer_id` trains on in the round that starts from checksum `salt`. With
        contribution scores, a hash of (salt, peer): anyone can tell which shard an update was
        due to fit whatever group it sees, and nobody can pick its shard before the round's
        start exists; without, distinct shards among `members` (`shard_in`)."""
        if self.scoring == "off":
            return self.shard_in(peer_id, members)
        digest = hashlib.blake2b(salt + peer_id.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.num_shards

    def shard_of(self, peer_id: str) -> int:
        from peertrain.swarm.data import seeded_int

        return seeded_int("diloco-shard", self.seed, peer_id) % self.num_shards

"""What a diffusion run trains, as the manifest's opaque `spec`: K experts, a router, a partition.

The run is K + 1 groups (`expert-0` … `expert-{K-1}`, `router`), each an ordinary DiLoCo group
with its own namespace; `group_spec` gives the DiLoCo settings every group shares (its `model`
and `dataset` fields are unused placeholders: a group's model and data come from this spec). The
partition is named by `partition`, the tensor-service root checksum of the artifact's bytes
(a content address a member can verify after fitting it locally and fetch by when it cannot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from peertrain.swarm.diloco.member.run_spec import ADMISSIONS, CODECS, MAX_ANCHORS, DiLoCoSpec

from ..errors import ConfigError
from ..run_spec import RunSpec
from .model import DiTConfig
from .partition import PartitionConfig
from .presets import PRESETS, expert_config, router_config

IMAGE_SIZES = {"digits": 8, "fashion-mnist": 28}  # square, one channel
MAX_EXPERTS = 32
ROUTER = "router"


def expert_group(k: int) -> str:
    return f"expert-{k}"


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffusionSpec(RunSpec):
    KIND: ClassVar[str] = "diffusion spec"

    model: str = "dit-tiny"  # the experts' DiT preset: dit-tiny, …
    dataset: str = "digits"  # dataset_settings (RunSpec): {"limit": N}
    experts: int = 4  # expert groups, one per data cluster (2..32)
    partition: str = ""  # hex root checksum of the partition artifact; run create fills it in
    cluster_sizes: tuple[int, ...] = ()  # images per expert's cluster (joiners choose by them)
    fine_clusters: int = 64  # k-means clusters first fitted, then merged into `experts` clusters
    features: int = 16  # PCA components the images are clustered on
    inner_steps: int = 50  # inner steps per round of every group
    batch_size: int = 32  # images per inner step
    lr: float = 2e-3  # inner learning rate (peak, after warmup)
    warmup_steps: int = 20  # inner steps of linear learning-rate warmup
    outer_lr: float = 0.7  # outer Nesterov learning rate of every group
    outer_momentum: float = 0.9  # outer Nesterov momentum
    codec: str = "int8"  # outer-update encoding: fp32, fp16, bf16, int8 or int4
    num_shards: int = 8  # of each group's data, dealt among that group's members
    rounds: int = 0  # 0: until stopped
    round_timeout: float = 60.0  # seconds a round waits for missing members after our update
    min_members: int = 1  # per group
    start_timeout: float = 120.0  # seconds round 0 waits for min_members before starting anyway
    seed: int = 0  # seed of the partition and of each group's initial weights
    admission: str = "open"  # open (anyone may train) or invite (members hold a certificate)
    # peers whose state attestations open runs trust (besides the creator)
    anchors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.model not in PRESETS:
            raise ConfigError(
                f"unknown diffusion model {self.model!r}; one of {', '.join(PRESETS)}"
            )
        if self.dataset not in IMAGE_SIZES:
            raise ConfigError(
                f"diffusion datasets are {', '.join(IMAGE_SIZES)}, not {self.dataset!r}"
            )
        if set(self.dataset_settings) - {"limit"} or set(self.model_settings):
            raise ConfigError("diffusion runs take dataset_settings.limit only, no model_settings")
        if not 2 <= self.experts <= min(MAX_EXPERTS, self.fine_clusters):
            raise ConfigError(f"experts must be 2..{MAX_EXPERTS} and at most fine_clusters")
        if self.partition and (len(self.partition) != 64 or not _is_hex(self.partition)):
            raise ConfigError("partition is the 64-hex-digit checksum of the partition artifact")
        if self.codec not in CODECS or self.admission not in ADMISSIONS:
            raise ConfigError(f"codec is one of {CODECS}; admission one of {ADMISSIONS}")
        if len(self.anchors) > MAX_ANCHORS:
            raise ConfigError(f"anchors must be at most {MAX_ANCHORS} peer IDs")
        if self.cluster_sizes and (
            len(self.cluster_sizes) != self.experts
            or not all(isinstance(n, int) and n > 0 for n in self.cluster_sizes)
        ):
            raise ConfigError("cluster_sizes holds one positive count per expert")
        object.__setattr__(self, "anchors", tuple(self.anchors))  # msgpack gives a list
        object.__setattr__(self, "cluster_sizes", tuple(self.cluster_sizes))
        self.partition_config()
        self.group_spec(ROUTER)  # the DiLoCo settings check themselves

    # -- groups ---------------------------------------------------------------------------------

    def groups(self) -> list[str]:
        return [*(expert_group(k) for k in range(self.experts)), ROUTER]

    def group_index(self, group: str) -> int:
        if group not in self.groups():
            raise ConfigError(f"no group {group!r} in this run; its groups: {self.groups()}")
        return self.groups().index(group)

    def group_spec(self, group: str) -> DiLoCoSpec:
        """The DiLoCo settings of `group` (its weights' seed differs per group)."""
        return DiLoCoSpec(
            inner_steps=self.inner_steps,
            batch_size=self.batch_size,
            lr=self.lr,
            warmup_steps=self.warmup_steps,
            outer_lr=self.outer_lr,
            outer_momentum=self.outer_momentum,
            codec=self.codec,
            num_shards=self.num_shards,
            rounds=self.rounds,
            round_timeout=self.round_timeout,
            min_members=self.min_members,
            start_timeout=self.start_timeout,
            seed=self.seed * 1000 + self.group_index(group),
            admission=self.admission,
            anchors=self.anchors,
        )

    # -- what it builds -------------------------------------------------------------------------

    @property
    def image_size(self) -> int:
        return IMAGE_SIZES[self.dataset]

    def expert_config(self) -> DiTConfig:
        return expert_config(self.model, image_size=self.image_size)

    def router_config(self) -> DiTConfig:
        return router_config(self.expert_config(), experts=self.experts)

    def model_config_of(self, group: str) -> DiTConfig:
        self.group_index(group)
        return self.router_config() if group == ROUTER else self.expert_config()

    def partition_config(self) -> PartitionConfig:
        return PartitionConfig(
            clusters=self.experts,
            fine_clusters=self.fine_clusters,
            features=self.features,
            seed=self.seed,
        )

    def limit(self) -> int | None:
        limit = self.dataset_settings.get("limit")
        if limit is not None and (not isinstance(limit, int) or limit < self.fine_clusters):
            raise ConfigError("dataset_settings.limit must be an integer ≥ fine_clusters")
        return limit

    def size(self) -> tuple[int, int]:
        """(parameters of one member's model, bytes a member holds), for swarm/budget.py: a
        member trains one expert or the router and holds the images as float32."""
        from ..budget import BYTES_PER_PARAM

        params = max(_params(self.expert_config()), _params(self.router_config()))
        images = self.limit() or {"digits": 1797, "fashion-mnist": 60_000}[self.dataset]
        return params, params * BYTES_PER_PARAM + 2 * images * 4 * self.image_size**2

    def model_config(self):  # the RunSpec hooks: a diffusion run names presets, not registry models
        return self.expert_config()

    def dataset_config(self):
        raise ConfigError("a diffusion run loads its images with swarm.diffusion.data")


def _params(config: DiTConfig) -> int:
    return sum(p.numel() for p in config.build().parameters())


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True

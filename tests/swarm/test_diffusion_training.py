"""Experts learn by flow matching on their cluster alone; the router learns which cluster made x_t
(its cluster from the partition artifact)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from peertrain.swarm.diffusion import (
    DiTConfig,
    ExpertTrainer,
    PartitionConfig,
    RouterTrainer,
    TrainConfig,
    expert_config,
    fit_partition,
    flow_matching_loss,
    load_digits_images,
    router_accuracy,
    router_config,
)
from peertrain.swarm.errors import ConfigError

TINY = DiTConfig(image_size=8, patch_size=2, width=32, depth=1, heads=2)


@pytest.fixture(scope="module")
def digits():
    return load_digits_images()


def test_a_fresh_model_predicts_zero_velocity_and_builds_identically_from_a_seed():
    first, second = TINY.build(seed=7), TINY.build(seed=7)
    x, t = torch.randn(4, 1, 8, 8), torch.rand(4)

    assert torch.equal(first(x, t), torch.zeros_like(x))  # adaLN-Zero: every block an identity
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(first.patch_in.weight, TINY.build(seed=8).patch_in.weight)


def test_a_short_training_run_lowers_the_flow_matching_loss(digits):
    torch.set_num_threads(1)
    model = TINY.build(seed=0)
    trainer = ExpertTrainer(
        model, digits.images, TrainConfig(steps=150, batch_size=32, lr=3e-3, warmup_steps=10)
    )

    losses = trainer.train()

    assert len(losses) == 150 and trainer.steps_done == 150
    assert np.mean(losses[-20:]) < 0.75 * np.mean(losses[:20])


def test_training_is_reproducible_from_the_seed(digits):
    config = TrainConfig(steps=5, batch_size=8, seed=3)

    runs = [ExpertTrainer(TINY.build(seed=0), digits.images[:100], config).train() for _ in "ab"]

    assert runs[0] == runs[1]


def test_the_router_beats_chance_at_small_t_on_held_out_images(digits):
    torch.set_num_threads(1)
    train, held_out = digits.images[:1400], digits.images[1400:]
    partition = fit_partition(
        train.numpy(), PartitionConfig(clusters=4, fine_clusters=32), dataset_digest="digits"
    )
    router = DiTConfig(image_size=8, patch_size=2, width=32, depth=1, heads=2, outputs=4).build()
    RouterTrainer(
        router,
        train,
        torch.from_numpy(partition.assignments),
        TrainConfig(steps=250, batch_size=64, lr=3e-3, warmup_steps=10),
    ).train()

    held_out_clusters = torch.from_numpy(partition.clusters_of(held_out.numpy()))
    accuracy = router_accuracy(router, held_out, held_out_clusters, t=0.1)

    assert accuracy > 0.6  # chance: 0.25 for balanced clusters, the largest share at most
    assert accuracy > np.bincount(held_out_clusters.numpy()).max() / len(held_out) + 0.2


def test_the_loss_is_the_error_of_the_conditional_velocity():
    # a model that outputs exactly ε − x₀ would need ε; the zero model's loss is E|ε − x₀|²
    x0 = torch.full((20_000, 2), 0.5)
    zero = lambda x, t: torch.zeros_like(x)  # noqa: E731

    loss = flow_matching_loss(zero, x0, generator=torch.Generator().manual_seed(0))

    assert abs(float(loss) - (1.0 + 0.25)) < 0.03


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError):
        DiTConfig(image_size=28, patch_size=3)
    with pytest.raises(ConfigError):
        TrainConfig(lr=1e-3, min_lr=1e-2)
    with pytest.raises(ConfigError):
        ExpertTrainer(TINY.build(), torch.zeros(0, 1, 8, 8), TrainConfig())


def test_presets_fit_the_dataset_and_give_the_router_one_logit_per_expert():
    digits = expert_config("dit-tiny", image_size=8)
    fashion = expert_config("dit-tiny", image_size=28)
    router = router_config(fashion, experts=4)

    assert (digits.patch_size, digits.num_patches) == (2, 16)
    assert (fashion.patch_size, fashion.num_patches) == (4, 49)
    assert router.outputs == 4 and router.patch_size == 4 and router.width < fashion.width
    logits = router.build()(torch.zeros(3, 1, 28, 28), torch.rand(3))
    assert logits.shape == (3, 4)
    with pytest.raises(ConfigError):
        expert_config("dit-huge", image_size=8)

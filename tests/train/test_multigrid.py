"""The multigrid schedule (clipflow.train.multigrid): PySlowFast's numbers for its Kinetics multigrid config, a
recipe's keys onto the plan, the refusals, and properties PySlowFast does not state: the cost of a step, the run's
length, the plain schedule when no cycle is on, the lr following the batch.

Every case here was compared once (2026-11-28), epoch by epoch, with PySlowFast's own functions at commit 287ec00
(``get_long_cycle_schedule``, ``update_long_cycle``, the ``ShortCycleBatchSampler``, ``get_lr_at_epoch``): equal on
all of them. That code is not kept: PySlowFast's only registry release (1.0, January 2020) predates multigrid, and
a reference's code does not go into the project; the Kinetics numbers below are what it printed.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import assert_refused
from launch_helpers import TINY as TINY_LAUNCH
from launch_helpers import launch, two_splits
from torch.nn import functional as F

from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe
from clipflow.train.bn_groups import BatchNormGroups
from clipflow.train.multigrid import (
    MultigridSettings,
    Stage,
    check_multigrid,
    long_cycle_schedule,
    multigrid_plan,
    plan_for_recipe,
)
from clipflow.train.schedule import Schedule

BOTH = MultigridSettings(long_cycle=True, short_cycle=True)


def case(settings, *, frames, crop, batch, stride, epochs, mode="step", decays=(), decay=0.1, recipe=None, **config):
    """One case: clipflow's plan of a PySlowFast config (TRAIN.BATCH_SIZE = batch per worker x GPUs; SOLVER.STEPS =
    [0] + decay epochs, or [0, epochs] for a recipe without them). ``config``: the rest of the config (GPUs, lr,
    warm-up, scale jitter), which the schedule does not read."""
    plan = multigrid_plan(settings, frames=frames, crop=crop, batch_size=batch, stride=stride, epochs=epochs,
                          lr_mode=mode, lr_decay_epoch=decays, lr_decay=decay)  # fmt: skip
    return {"plan": plan, "epochs": epochs, "recipe": recipe, **config}


ODD = MultigridSettings(True, True, 2.0, ((0.5, 0.75), (1, 1)), (0.5, 0.75), bn_base_size=4, eval_freq=2)
KINETICS = {"frames": 32, "crop": 224, "batch": 8, "gpus": 8, "stride": 2}  # 64 clips on 8 GPUs, 32 x 224
TINY = {"frames": 16, "crop": 64, "batch": 8, "gpus": 2, "stride": 2, "jitter": (64, 84)}  # slowfast_tiny_synthetic
TINY_STEP = {**TINY, "epochs": 30, "decays": (20, 25), "warmup": 1, "warmup_lr": 0.005}
SPECS = {
    # configs/Kinetics/SLOWFAST_8x8_R50_stepwise_multigrid.yaml: lr 0.1 decaying at 94, 154, 196 of 239 epochs,
    # warm-up 34 epochs from 0.01
    "kinetics_stepwise": (BOTH, {**KINETICS, "epochs": 239, "decays": (94, 154, 196), "warmup": 34, "warmup_lr": 0.01}),
    # configs/Charades/SLOWFAST_16x8_R50_multigrid.yaml: 16 clips on 8 GPUs (2 each), 64 x 224
    "charades": (
        BOTH,
        {
            **KINETICS,
            "frames": 64,
            "batch": 2,
            "epochs": 57,
            "decays": (41, 49),
            "lr": 0.0375,
            "warmup": 4,
            "warmup_lr": 0.0001,
            "jitter": (256, 340),
        },
    ),
    # clipflow's recipes, both cosine: one lr stage
    "kinetics_recipe": (
        BOTH,
        {**KINETICS, "epochs": 196, "mode": "cosine", "recipe": "slowfast_8x8_resnet50_kinetics400"},
    ),
    "tiny_recipe": (BOTH, {**TINY, "epochs": 30, "mode": "cosine", "recipe": "slowfast_tiny_synthetic"}),
    # each cycle alone
    "tiny_short_only": (MultigridSettings(short_cycle=True), TINY_STEP),
    "tiny_long_only": (MultigridSettings(long_cycle=True), TINY_STEP),
    # other factors, an odd batch (3 clips: BatchNorm synchronised at the base shape, split at the coarse one)
    "odd": (
        ODD,
        {
            "frames": 16,
            "crop": 96,
            "batch": 3,
            "gpus": 1,
            "stride": 3,
            "epochs": 12,
            "decays": (10,),
            "decay": 0.5,
            "lr": 0.2,
            "warmup": 2,
            "warmup_lr": 0.02,
            "jitter": (100, 120),
        },
    ),
}
CASES = {name: case(settings, **kwargs) for name, (settings, kwargs) in SPECS.items()}


def test_kinetics_numbers():
    """The numbers the module's manual gives for PySlowFast's Kinetics multigrid config."""
    plan = CASES["kinetics_stepwise"]["plan"]
    assert [s.end_epoch for s in plan.stages] == [73, 110, 142, 158, 205, 228, 248, 259, 291, 308, 322, 329, 358]
    assert {(s.batch_factor, s.frames, s.crop) for s in plan.stages} == {
        (8, 8, 158),
        (4, 16, 158),
        (2, 16, 224),
        (1, 32, 224),
    }
    assert [plan.step(0, i).batch for i in range(3)] == [128, 64, 64]  # 8 clips x 8 x (2, 1, 1)
    assert [plan.step(150, i).crop for i in range(3)] == [112, 158, 224]
    assert plan.learning_rate(34, 0.1, 34, 0.01) == pytest.approx(0.8)  # the warm-up ends at 8 x the lr


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n]["recipe"]])
def test_recipe_gives_the_case(name):
    """A recipe's keys map onto the plan as the case states: frames new_length // fast_temporal_stride, crop
    input_size, its batch_size, epochs and lr schedule."""
    assert plan_for_recipe(load_recipe(CASES[name]["recipe"]), BOTH) == CASES[name]["plan"]


def test_a_step_costs_what_a_base_step_does():
    """B x T x S^2 of every long-cycle shape is T0 x S0^2 but for B's rounding."""
    for name in ("kinetics_stepwise", "charades", "tiny_recipe", "odd"):
        plan = CASES[name]["plan"]
        base = plan.frames * plan.crop**2
        for s in plan.stages:
            exact = base / (s.frames * s.crop**2)
            assert abs(s.batch_factor - exact) <= 0.5, (name, s)


def test_run_is_epoch_factor_times_the_recipe():
    for name in ("kinetics_stepwise", "charades", "tiny_recipe", "tiny_long_only", "odd"):
        c = CASES[name]
        plan = c["plan"]
        ends = [s.end_epoch for s in plan.stages]
        assert ends == sorted(ends) and ends[-1] == plan.epochs
        assert abs(plan.epochs - c["epochs"] * plan.settings.epoch_factor) <= 0.5, name
    # the short cycle alone stretches the epochs and the decay epochs, truncated
    assert CASES["tiny_short_only"]["plan"].lr_steps == (0, 30, 37) and CASES["tiny_short_only"]["plan"].epochs == 45


def test_cosine_recipe_is_one_lr_stage_with_an_empty_fine_tuning():
    plan = CASES["tiny_recipe"]["plan"]
    assert {s.lr_stage for s in plan.stages[:-1]} == {0} and plan.stages[-1].lr_stage == 1
    assert plan.stages[-1].end_epoch == plan.stages[-2].end_epoch  # no epoch fine-tunes
    assert long_cycle_schedule(BOTH, 16, 64, 30, (30,)) == plan.stages


@pytest.mark.parametrize(("mode", "decays"), [("cosine", ()), ("step", (12, 20)), ("poly", ()), ("step", ())], ids=str)
def test_without_cycles_the_lr_is_clipflows_schedule(mode, decays):
    """No cycle on: every step is the recipe's shape, and the lr clipflow's own Schedule at every iteration."""
    plan = multigrid_plan(
        MultigridSettings(),
        frames=16,
        crop=64,
        batch_size=8,
        stride=2,
        epochs=30,
        lr_mode=mode,
        lr_decay_epoch=decays,
        lr_decay=0.2,
    )
    for epoch in (0, 5, 29):
        assert plan.step(epoch, 4) == plan.step(0, 0)
        shape = plan.step(epoch, 4)
        assert (shape.batch, shape.frames, shape.crop, shape.stride, shape.least_stride) == (8, 16, 64, 2, 2)
        assert (shape.bn_splits, shape.bn_sync, shape.lr_factor, shape.stage, shape.short) == (1, 1, 1, None, None)
    iters = 7
    schedule = Schedule(0.4, 30, iters, mode, 3, 0.01, 0.2, decays)
    for it in range(30 * iters):
        assert plan.learning_rate(it / iters, 0.4, 3, 0.01) == pytest.approx(schedule(it), rel=1e-9, abs=1e-15), it


def test_cosine_lr_follows_the_batch():
    """With the long cycle a cosine recipe's lr is its curve over the multigrid run times the stage's batch factor:
    at each stage boundary it jumps by the ratio of the factors, and the warm-up ends on the first stage's."""
    plan = CASES["kinetics_recipe"]["plan"]
    lr = lambda e: plan.learning_rate(e, 0.1, 34, 0.01)  # noqa: E731
    assert lr(0) == pytest.approx(0.01) and lr(34) == pytest.approx(0.8)
    start = 0
    for before, after in zip(plan.stages, plan.stages[1:], strict=False):
        if after.end_epoch == before.end_epoch:
            continue
        edge = before.end_epoch
        if edge > 34:
            ratio = lr(edge) / lr(edge - 1e-9)
            assert ratio == pytest.approx(after.batch_factor / before.batch_factor, rel=1e-6), edge
        assert lr(max(start, 34) + 0.5) > lr(edge - 0.5)  # falls within the stage
        start = edge
    curve = plan.learning_rate(100.0, 0.1, 34, 0.01)
    stage = plan.stages[plan.stage_at(100)]
    assert curve == pytest.approx(0.1 * stage.batch_factor * (1 + math.cos(math.pi * (100 - 34) / (294 - 34))) / 2)
    assert plan.epochs == 294


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"long_cycle": 1}, r"long_cycle must be true or false, got 1"),
        ({"epoch_factor": 0}, r"epoch_factor must be a number > 0, got 0"),
        ({"epoch_factor": float("nan")}, r"epoch_factor must be a number > 0, got nan"),
        ({"long_cycle_factors": [[0.5, 0.7], [1, -1]]}, r"long_cycle_factors \[1, -1\]: each factor must be .*got -1"),
        (
            {"long_cycle_factors": [[0.5, 1, 1]]},
            r"each of long_cycle_factors must be a \[temporal, spatial\] pair, got \[",
        ),
        ({"long_cycle_factors": []}, r"long_cycle_factors must be a list of \[temporal, spatial\] .*, got \[\]"),
        ({"short_cycle_factors": [0.5]}, r"short_cycle_factors must be two spatial factors .*got \[0.5\]"),
        ({"short_cycle_factors": [0.5, "big"]}, r"short_cycle_factors \[0.5, 'big'\]: each factor must be .*got 'big'"),
        ({"bn_base_size": 0}, r"bn_base_size must be a whole number >= 1, got 0"),
        ({"eval_freq": 2.0}, r"eval_freq must be a whole number >= 1, got 2.0"),
        ({"long_cycles": True}, r"unknown setting 'long_cycles'; the settings are bn_base_size, epoch_factor, "),
    ],
    ids=lambda v: str(v)[:40],
)
def test_bad_settings_are_refused(values, message):
    with pytest.raises(ClipflowError, match=f"^multigrid: {message}"):
        MultigridSettings.from_mapping(values)


def test_settings_from_yaml_lists():
    settings = MultigridSettings.from_mapping(
        {"long_cycle": True, "long_cycle_factors": [[0.5, 1], [1, 1]], "short_cycle_factors": [0.5, 0.75]}
    )
    assert settings.long_cycle_factors == ((0.5, 1), (1, 1)) and settings.short_cycle_factors == (0.5, 0.75)
    assert settings.enabled and not MultigridSettings().enabled


BASE = {"frames": 16, "crop": 64, "batch_size": 8, "stride": 2, "epochs": 30, "lr_mode": "step"}
TINY_ZERO_FRAMES = MultigridSettings(True, True, long_cycle_factors=((0.01, 0.5), (1, 1)))
TOO_LARGE = MultigridSettings(True, False, long_cycle_factors=((2, 2), (1, 1)))
SHORT_TOO_LARGE = MultigridSettings(False, True, short_cycle_factors=(0.5, 1.5))


@pytest.mark.parametrize(
    ("settings", "changes", "message"),
    [
        (BOTH, {"lr_decay_epoch": (20, 10)}, r"lr_decay_epoch \[20, 10\] must increase, each epoch in 1..30 .*: 10 is"),
        (BOTH, {"lr_decay_epoch": (20, 31)}, r"lr_decay_epoch \[20, 31\] must increase, each epoch in 1..30 .*: 31 is"),
        (BOTH, {"epochs": 0}, r"the recipe's epochs must be a whole number >= 1, got 0"),
        (BOTH, {"crop": 0}, r"the base clip's crop must be a whole number >= 1, got 0"),
        (BOTH, {"lr_mode": "exp"}, r"unknown lr_mode 'exp'"),
        # 7 clips x 4 = 28 clips per worker in the (16 x 45) stage: 3 BatchNorm groups of 8 do not divide them
        (BOTH, {"batch_size": 7}, r"train.batch_size 7: long-cycle stage 1 runs 28 clips per worker, which do not "),
        (TINY_ZERO_FRAMES, {}, r"long_cycle_factors \[0.01, 0.5\] leave the 16-frame, 64-pixel clip 0 frames of 32"),
        (TOO_LARGE, {}, r"a 32-frame 128-pixel shape .* its batch rounds to 0 clips"),
        (SHORT_TOO_LARGE, {}, r"short_cycle_factors \[0.5, 1.5\] give crops \(32, 96\), too large beside the recipe's"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_bad_plans_are_refused(settings, changes, message):
    with pytest.raises(ClipflowError, match=f"^multigrid: {message}"):
        multigrid_plan(settings, **{**BASE, **changes})


def test_bad_steps_and_recipes_are_refused():
    plan = CASES["tiny_recipe"]["plan"]
    with pytest.raises(ClipflowError, match=r"^multigrid: the step's iteration must be a whole number >= 0, got -1$"):
        plan.step(0, -1)
    with pytest.raises(ClipflowError, match=r"^multigrid: a worker's clips per epoch must be a whole number >= 0"):
        plan.epoch_batches(0, -3)
    with pytest.raises(ClipflowError, match=r"^multigrid: needs a video recipe"):
        plan_for_recipe(load_recipe("resnet18_cifar10"), BOTH)
    tiny = load_recipe("slowfast_tiny_synthetic")
    tiny["data"]["new_length"] = 1
    with pytest.raises(ClipflowError, match=r"^multigrid: data.new_length 1 gives no fast-pathway frame"):
        plan_for_recipe(tiny, BOTH)


def test_stages_are_what_the_long_cycle_runs():
    """The stage of an epoch is the first that ends after it; zero-length stages are never run."""
    plan = CASES["tiny_recipe"]["plan"]
    assert plan.stages[0] == Stage(0, 8, 4, 45, plan.stages[0].end_epoch)
    seen = [plan.stage_at(e) for e in range(plan.epochs)]
    assert seen == sorted(seen) and set(seen) == {
        i for i, s in enumerate(plan.stages) if s.end_epoch > (plan.stages[i - 1].end_epoch if i else 0)
    }
    assert plan.stage_at(plan.epochs + 5) == len(plan.stages) - 1


# -- wired into training: the checks where a job is made, BatchNorm in groups, clips of a step's shape -----------

MG = {"long_cycle": True, "short_cycle": True}


def tiny(train=None, data=None, model=None, multigrid=None):
    overrides = {"train": {"multigrid": {**MG, **(multigrid or {})}, **(train or {})}, "data": data or {},
                 "model": model or {}}  # fmt: skip
    return load_recipe("slowfast_tiny_synthetic", overrides)


@pytest.mark.parametrize(
    "recipe, message",
    [
        (lambda: tiny({"accumulate": 2}), "train.multigrid with train.accumulate 2"),
        (lambda: tiny({"compile": True}), "train.multigrid with train.compile"),
        (lambda: tiny(data={"videos_keep_every": 2}), "keep one frame in 2 (data.reencode.match_recipe)"),
        (lambda: tiny(data={"new_length": 8}), "long-cycle stage 0 takes 1 fast-pathway frames"),
        (
            lambda: tiny({"batch_size": 2}, multigrid={"long_cycle_factors": [[1, 1]]}),
            "stage 0 runs 2 clips per worker, fewer than bn_base_size 8",
        ),
        (lambda: load_recipe("resnet18_cifar10", {"train": {"multigrid": MG}}), "this recipe trains images"),
    ],
)
def test_a_recipe_multigrid_cannot_train_is_refused_naming_the_setting(recipe, message):
    with pytest.raises(ClipflowError) as refused:
        check_multigrid(recipe())
    assert message in str(refused.value)


def test_a_bad_multigrid_section_is_refused_by_the_recipe_schema():
    with pytest.raises(ClipflowError) as refused:
        tiny(multigrid={"long_cycles": True})
    assert "long_cycles" in str(refused.value)
    with pytest.raises(ClipflowError) as refused:
        tiny(multigrid={"short_cycle_factors": [0.5]})
    assert "short_cycle_factors" in str(refused.value)
    assert check_multigrid(load_recipe("slowfast_tiny_synthetic")) is None  # off unless a cycle is on


def test_the_launch_refuses_such_a_recipe_before_any_worker(tmp_path, tiny_videos, capsys):
    splits = two_splits(tmp_path, tiny_videos)
    overrides = {**TINY_LAUNCH, "train": {**TINY_LAUNCH["train"], "multigrid": MG}}  # 8 frames: the slow gets none
    done = launch(tmp_path, tiny_videos, splits, overrides=overrides, here=capsys)
    assert_refused(done, "long-cycle stage 0 takes 1 fast-pathway frames", "long_cycle_factors")
    assert not (tmp_path / "logs" / "worker-0.log").exists()


def test_batchnorm_in_groups_normalises_each_group_alone_and_merges_the_running_statistics():
    torch.manual_seed(0)
    layer = torch.nn.BatchNorm3d(4)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
        layer.bias.uniform_(-1, 1)
    x = torch.randn(8, 4, 2, 3, 3) * torch.arange(1, 9).view(8, 1, 1, 1, 1)  # groups of other spreads
    groups = BatchNormGroups(layer)
    groups.use(2)
    y = layer(x)
    for j in range(2):  # clip i is in group i % 2
        alone = F.batch_norm(x[j::2], None, None, layer.weight, layer.bias, True, 0.0, layer.eps)
        assert torch.allclose(y[j::2], alone, atol=1e-5)
    var, mean = torch.var_mean(x.reshape(4, 8, 2, 3, 3), dim=(0, 2, 3, 4), correction=1)
    mean, var = mean.view(2, 4), var.view(2, 4)
    merged_var = var.mean(0) + ((mean - mean.mean(0)) ** 2).mean(0)
    assert torch.allclose(layer.running_mean, 0.1 * mean.mean(0), atol=1e-6)
    assert torch.allclose(layer.running_var, 0.9 + 0.1 * merged_var, atol=1e-5)
    assert int(layer.num_batches_tracked) == 1
    layer.eval()
    assert torch.equal(layer(x), F.batch_norm(x, layer.running_mean, layer.running_var, layer.weight, layer.bias,
                                              False, 0.1, layer.eps))  # fmt: skip
    layer.train()
    with pytest.raises(ClipflowError, match="in 2 groups got a batch of 5 clips"):
        layer(x[:5])
    groups.use(1)
    assert "forward" not in vars(layer)  # the class's own forward again

"""Multigrid training's schedule (Wu, Girshick, He, Feichtenhofer, Krähenbühl, "A Multigrid Method for Efficiently
Training Video Models", CVPR 2020), step for step as PySlowFast computes it (slowfast/utils/multigrid.py,
slowfast/datasets/multigrid_helper.py, tools/train_net.py): which clips, frames and crop each training step takes,
the learning rate and the BatchNorm grouping that go with them. Pure arithmetic on (epoch, iteration): every worker,
parameter server or DDP, computes the same step alone, and a run resumed at an epoch and iteration takes up the same
shape.

The base shape. A recipe's clip is T0 x S0 x S0: T0 = data.new_length // data.fast_temporal_stride fast-pathway
frames (PySlowFast's DATA.NUM_FRAMES; the slow pathway takes every alpha-th of them), S0 = data.input_size
(DATA.TRAIN_CROP_SIZE), b = train.batch_size clips per worker per step (TRAIN.BATCH_SIZE / NUM_GPUS), read every
fast_temporal_stride-th frame (DATA.SAMPLING_RATE). Multigrid trains on smaller shapes with proportionally larger
batches, so a step costs about what a base step does: a shape of T x S x S takes
``B = int(round(T0 S0^2 / (T S^2)))`` times b clips.

The long cycle changes the shape per epoch. Each factor pair (t, s) of ``long_cycle_factors`` (PySlowFast's default:
(1/4, 1/sqrt 2), (1/2, 1/sqrt 2), (1/2, 1), (1, 1)) gives a shape T = int(round(T0 t)), S = int(round(S0 s)); a cycle
runs them in that order, one cycle per learning-rate stage, so every stage of the recipe's lr schedule sweeps from
coarse to fine. Within an lr stage each shape gets epochs in proportion to its mean batch factor, so the same number
of iterations each: the mean of B over its three short-cycle crops (T x S0 f x S0 f for each short factor f, then
T x S x S; below), or its own B without the short cycle. The recipe's epochs after its last decay epoch become a
fine-tuning stage at the last shape (the base one): their iterations divided by the saving the cycles make (the
recipe's iterations up to that epoch over the cycles' own), at that shape's mean batch factor. Then every stage's
length is scaled so that all of them add up to ``epoch_factor`` (1.5) times the recipe's epochs, and each stage ends
at the rounded running total: :func:`long_cycle_schedule`. PySlowFast's SLOWFAST_8x8_R50_stepwise_multigrid (T0 32,
S0 224, 64 clips on 8 GPUs, lr decays at epochs 94, 154, 196 of 239, both cycles) gives 13 stages ending at epochs
73, 110, 142, 158 | 205, 228, 248, 259 | 291, 308, 322, 329 | 358 with shapes (B, T, S) (8, 8, 158), (4, 16, 158),
(2, 16, 224), (1, 32, 224) in each of the three lr stages and (1, 32, 224) for fine-tuning: 358 epochs instead of
239, in 29% of the recipe's iterations (each costing about what a base step does).

The short cycle changes the crop per iteration. Iteration i of an epoch (counted from 0 in each epoch) takes short
shape i % 3: crops of int(round(S0 f)) for the two ``short_cycle_factors`` f (1/2, 1/sqrt 2), then the long-cycle
stage's own crop S (S0 without the long cycle), with int(round((S / (S0 f))^2)) times the stage's clips for the
first two (4 and 2 at S = S0, 2 and 1 at S = S0 / sqrt 2) and 1 for the third; the frames stay the stage's. An
epoch's batches follow that rotation over the worker's clips until the next one no longer fits (the rest is
dropped): :meth:`MultigridPlan.epoch_batches`. PySlowFast's sampler reports floor(clips / mean batch) iterations,
which may be one more than it yields; the batches are what counts here. Without the long cycle, the short cycle
alone stretches the recipe's epochs and decay epochs by ``epoch_factor`` (each truncated to an integer).

Frames and stride. A stage with T < T0 frames reads each clip with a stride drawn uniformly from the recipe's
fast_temporal_stride to fast_temporal_stride x (T0 // T): at the most, a clip spans the same time as the recipe's
(PySlowFast's LONG_CYCLE_SAMPLING_RATE), at the least it is a shorter part of it. The least short side of the scale
jitter shrinks with the crop: int(round(least x crop / S0)) (:meth:`MultigridPlan.least_short_side`).

Learning rate, following the batch. With the long cycle the lr of a stage is the recipe's times its B (the linear
scaling rule), times lr_decay to the power of its lr stage; the fine-tuning stage runs its first half at the last
lr stage's lr and its second half one decay lower (PySlowFast's SOLVER.STEPS and SOLVER.LRS, which
``steps_with_relative_lrs`` reads): :attr:`MultigridPlan.lr_steps`, :attr:`MultigridPlan.relative_lrs`. The short
cycle's larger batches keep the stage's lr. A warm-up rises linearly from warmup_lr to the lr at the warm-up's end,
which includes that epoch's B, over warmup_epochs of the multigrid run (not stretched):
:meth:`MultigridPlan.learning_rate`, PySlowFast's ``get_lr_at_epoch`` exactly for a step recipe.

A cosine (or poly) recipe has no decay epochs, and PySlowFast has no multigrid with one (its multigrid configs are
all stepwise; its Kinetics one is the stepwise variant of the cosine SLOWFAST_8x8_R50, lr decays at 94, 154, 196 of
239 epochs): here such a recipe is one lr stage, SOLVER.STEPS [0, epochs], so one long cycle spans the run and the
fine-tuning stage is empty; its lr is the recipe's curve over the multigrid run's epochs (after the warm-up, as
clipflow's Schedule) times the stage's B. PySlowFast's cosine policy would ignore B; following the batch is the
paper's rule. A step recipe without decay epochs is one lr stage the same way.

BatchNorm, at a fixed base size. With the long cycle a stage's b B clips per worker are normalised in groups of
``bn_base_size`` (8): b B / 8 > 1 splits the batch into int(b B / 8) groups (PySlowFast's SubBatchNorm3d, whose
running statistics are merged into one BatchNorm before evaluation and saving), b B / 8 < 1 synchronises
int(8 / (b B)) workers' statistics (NaiveSyncBatchNorm3d, NUM_SYNC_DEVICES), exactly 8 is plain BatchNorm. The
groups are fixed per stage: the short cycle's larger batches make them larger. A batch that does not divide into
its groups is refused (PySlowFast's split would fail). Without the long cycle BatchNorm stays as it is.

Validation and checkpoints (PySlowFast's MULTIGRID.EVAL_FREQ, 3): with the long cycle, the last epoch of every
stage and about ``eval_freq`` evenly spaced epochs per stage evaluate and save (:meth:`MultigridPlan.eval_epoch`).

Where PySlowFast differs: it fails on the long cycle without the short one (its fine-tuning stage reads the third
short shape, which that case lacks); here that stage takes the base shape, the only one. It sets BatchNorm only when
the shape changes, so a first stage at the base shape keeps the model's own; here every stage's follows its batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from clipflow.errors import ClipflowError
from clipflow.models.slowfast_spec import slowfast_alpha

SQRT_HALF = 0.5**0.5  # PySlowFast writes 0.5**0.5: the same float
LONG_CYCLE_FACTORS: tuple[tuple[float, float], ...] = ((0.25, SQRT_HALF), (0.5, SQRT_HALF), (0.5, 1.0), (1.0, 1.0))
SHORT_CYCLE_FACTORS: tuple[float, float] = (0.5, SQRT_HALF)
SHORT_SHAPES = 3  # the short cycle's two smaller crops and the stage's own


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(name: str, value: object) -> float:
    if not _is_number(value) or value <= 0:
        raise ClipflowError(f"multigrid: {name} must be a number > 0, got {value!r}")
    return value


@dataclass(frozen=True)
class MultigridSettings:
    """Which cycles run, and their factors (PySlowFast's MULTIGRID defaults). Lists (as YAML gives) become tuples."""

    long_cycle: bool = False
    short_cycle: bool = False
    epoch_factor: float = 1.5
    long_cycle_factors: tuple[tuple[float, float], ...] = LONG_CYCLE_FACTORS
    short_cycle_factors: tuple[float, float] = SHORT_CYCLE_FACTORS
    bn_base_size: int = 8
    eval_freq: int = 3

    def __post_init__(self) -> None:
        for name in ("long_cycle", "short_cycle"):
            if not isinstance(getattr(self, name), bool):
                raise ClipflowError(f"multigrid: {name} must be true or false, got {getattr(self, name)!r}")
        _positive("epoch_factor", self.epoch_factor)
        pairs = self.long_cycle_factors
        if isinstance(pairs, str | bytes) or not isinstance(pairs, Sequence) or not pairs:
            raise ClipflowError(
                f"multigrid: long_cycle_factors must be a list of [temporal, spatial] factor pairs, got {pairs!r}"
            )
        for pair in pairs:
            if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise ClipflowError(
                    f"multigrid: each of long_cycle_factors must be a [temporal, spatial] pair, got {pair!r}"
                )
            for factor in pair:
                _positive(f"long_cycle_factors {list(pair)!r}: each factor", factor)
        object.__setattr__(self, "long_cycle_factors", tuple(tuple(pair) for pair in pairs))
        short = self.short_cycle_factors
        if isinstance(short, str | bytes) or not isinstance(short, Sequence) or len(short) != 2:
            raise ClipflowError(
                f"multigrid: short_cycle_factors must be two spatial factors (the two smaller crops), got {short!r}"
            )
        for factor in short:
            _positive(f"short_cycle_factors {list(short)!r}: each factor", factor)
        object.__setattr__(self, "short_cycle_factors", tuple(short))
        for name in ("bn_base_size", "eval_freq"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ClipflowError(f"multigrid: {name} must be a whole number >= 1, got {value!r}")

    @classmethod
    def from_mapping(cls, values: Mapping) -> MultigridSettings:
        """The settings of a mapping of these names (a recipe's section, say); another name is refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in values if k not in known)
        if unknown:
            names = ", ".join(sorted(known))
            raise ClipflowError(f"multigrid: unknown setting {unknown[0]!r}; the settings are {names}")
        return cls(**values)

    @property
    def enabled(self) -> bool:
        return self.long_cycle or self.short_cycle


@dataclass(frozen=True)
class Stage:
    """One stage of the long cycle: ``batch_factor`` times the recipe's clips of ``frames`` x ``crop`` x ``crop``,
    for the epochs from the previous stage's ``end_epoch`` up to (not including) its own. ``lr_stage``: the recipe's
    lr stage it belongs to (0 first); the fine-tuning stage has the number of lr stages."""

    lr_stage: int
    batch_factor: int
    frames: int
    crop: int
    end_epoch: int
    fine_tuning: bool = False


def _plain_sum(values: Sequence[float]) -> float:
    """Added left to right, as PySlowFast's sums of numpy floats are (not Python's compensated float sum)."""
    total = 0.0
    for value in values:
        total += value
    return total


def long_cycle_schedule(
    settings: MultigridSettings, frames: int, crop: int, epochs: int, lr_steps: Sequence[int]
) -> tuple[Stage, ...]:
    """The long cycle's stages (PySlowFast's ``get_long_cycle_schedule``) for a base clip of ``frames`` x ``crop``,
    a recipe of ``epochs`` whose lr stages end at ``lr_steps`` (its decay epochs, increasing; after the last comes
    what becomes the fine-tuning stage; a recipe without them: ``(epochs,)``). The short cycle's shapes count in
    each shape's mean batch when ``settings.short_cycle``; ``settings.long_cycle`` itself is not read."""
    steps = (0, *_check_lr_steps(lr_steps, epochs, "lr_steps"))
    default_size = float(frames * crop**2)
    all_shapes, mean_batch = [], []
    for t_factor, s_factor in settings.long_cycle_factors:
        base_t, base_s = int(round(frames * t_factor)), int(round(crop * s_factor))
        if base_t < 1 or base_s < 1:
            raise ClipflowError(
                f"multigrid: long_cycle_factors {[t_factor, s_factor]!r} leave the {frames}-frame, {crop}-pixel "
                f"clip {base_t} frames of {base_s} pixels: give factors that keep at least one of each"
            )
        if settings.short_cycle:
            sizes = [(base_t, crop * f) for f in settings.short_cycle_factors] + [(base_t, base_s)]
        else:
            sizes = [(base_t, base_s)]
        shapes = [(int(round(default_size / (t * s * s))), t, s) for t, s in sizes]
        for b, t, s in shapes:
            if b < 1:
                raise ClipflowError(
                    f"multigrid: a {t}-frame {s:g}-pixel shape (long_cycle_factors {[t_factor, s_factor]!r}) is larger "
                    f"than the {frames}-frame {crop}-pixel clip it is scaled from, so its batch rounds to 0 clips: "
                    "give factors of at most 1"
                )
        mean_batch.append(sum(b for b, _, _ in shapes) / len(shapes))
        all_shapes.append(shapes)
    total_mean = _plain_sum(mean_batch)
    total_iters, stages = 0.0, []  # (lr stage, (B, T, S), epochs before scaling)
    for index in range(len(steps) - 1):
        step_epochs = steps[index + 1] - steps[index]
        for mean, shapes in zip(mean_batch, all_shapes, strict=True):
            cur_epochs = step_epochs * mean / total_mean
            total_iters += cur_epochs / mean
            stages.append((index, shapes[-1], cur_epochs))
    iter_saving = steps[-1] / total_iters
    fine_tuning = (epochs - steps[-1]) / iter_saving * mean_batch[-1]
    stages.append((len(steps) - 1, all_shapes[-1][-1], fine_tuning))
    scale = epochs * settings.epoch_factor / _plain_sum([s[2] for s in stages])
    schedule, running = [], 0.0
    for number, (lr_stage, (b, t, s), stage_epochs) in enumerate(stages):
        running += stage_epochs * scale
        last = number == len(stages) - 1
        schedule.append(Stage(lr_stage, b, t, int(s), int(round(running)), fine_tuning=last))
    return tuple(schedule)


def _check_lr_steps(lr_steps: Sequence[int], epochs: int, name: str) -> tuple[int, ...]:
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ClipflowError(f"multigrid: the recipe's epochs must be a whole number >= 1, got {epochs!r}")
    steps = tuple(lr_steps)
    if not steps:
        raise ClipflowError(f"multigrid: {name} is empty: give the epochs where the lr stages end, or (epochs,)")
    previous = 0
    for step in steps:
        if isinstance(step, bool) or not isinstance(step, int) or not previous < step <= epochs:
            raise ClipflowError(
                f"multigrid: {name} {list(steps)!r} must increase, each epoch in 1..{epochs} (the recipe's epochs): "
                f"{step!r} is not"
            )
        previous = step
    return steps


@dataclass(frozen=True)
class StepShape:
    """What one training step of one worker takes. ``stage``: its index in :attr:`MultigridPlan.stages` (None
    without the long cycle); ``short``: its place in the short cycle, 0, 1 or 2 (None without it); ``batch`` clips
    of ``frames`` fast-pathway frames cropped ``crop`` x ``crop``, each read with a temporal stride drawn uniformly
    from ``least_stride`` to ``stride`` (``stride`` keeps the recipe's span); BatchNorm in ``bn_splits`` groups per
    worker, or synchronised over ``bn_sync`` workers (1 and 1: plain); ``lr_factor``: the stage's batch factor, by
    which the lr is multiplied (before its decay; :meth:`MultigridPlan.learning_rate` gives the lr)."""

    stage: int | None
    short: int | None
    batch: int
    frames: int
    crop: int
    stride: int
    least_stride: int
    bn_splits: int
    bn_sync: int
    lr_factor: int


@dataclass(frozen=True)
class MultigridPlan:
    """A recipe's multigrid run (build it with :func:`multigrid_plan`): the base clip and batch, the long cycle's
    :attr:`stages`, the run's :attr:`epochs`, and the lr's changes: :attr:`lr_steps` (0 first) and, from each, the
    lr relative to the recipe's (:attr:`relative_lrs`, PySlowFast's SOLVER.STEPS and SOLVER.LRS). ``lr_mode`` is the
    recipe's: ``step`` reads :attr:`relative_lrs`, ``cosine`` and ``poly`` their curve over :attr:`epochs`."""

    settings: MultigridSettings
    frames: int
    crop: int
    batch_size: int
    stride: int
    epochs: int
    stages: tuple[Stage, ...]
    lr_steps: tuple[int, ...]
    relative_lrs: tuple[float, ...]
    lr_mode: str = "step"

    def stage_at(self, epoch: float) -> int | None:
        """The index of the long-cycle stage that runs ``epoch`` (the last after the run); None without one."""
        if not self.stages:
            return None
        for index, stage in enumerate(self.stages):
            if epoch < stage.end_epoch:
                return index
        return len(self.stages) - 1

    def _stage_shape(self, epoch: float) -> tuple[int | None, int, int, int]:
        """(stage index, batch factor, frames, crop) of ``epoch``."""
        index = self.stage_at(epoch)
        if index is None:
            return None, 1, self.frames, self.crop
        stage = self.stages[index]
        return index, stage.batch_factor, stage.frames, stage.crop

    def short_batch_factors(self, crop: int) -> tuple[int, int, int]:
        """The short cycle's clips per step, relative to a stage of ``crop`` pixels: its two smaller crops', then 1."""
        first, second = (int(round((float(crop) / (f * self.crop)) ** 2)) for f in self.settings.short_cycle_factors)
        return first, second, 1

    def short_crops(self, crop: int) -> tuple[int, int, int]:
        """The short cycle's crops in a stage of ``crop`` pixels: its factors times the recipe's crop, then ``crop``."""
        first, second = (int(round(f * self.crop)) for f in self.settings.short_cycle_factors)
        return first, second, crop

    def bn_groups(self, clips: int) -> tuple[int, int]:
        """(splits, synchronised workers) of BatchNorm for a stage of ``clips`` clips per worker: at a fixed
        ``bn_base_size`` with the long cycle (see the module), plain (1, 1) without it."""
        if not self.settings.long_cycle:
            return 1, 1
        factor = float(clips) / self.settings.bn_base_size
        if factor < 1:
            return 1, int(1.0 / factor)
        if factor > 1:
            return int(factor), 1
        return 1, 1

    def step(self, epoch: int, iteration: int) -> StepShape:
        """The shape of step ``iteration`` (0-based, counted in each epoch) of ``epoch`` (0-based)."""
        for name, value in (("epoch", epoch), ("iteration", iteration)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ClipflowError(f"multigrid: the step's {name} must be a whole number >= 0, got {value!r}")
        index, factor, frames, crop = self._stage_shape(epoch)
        clips = factor * self.batch_size
        splits, sync = self.bn_groups(clips)
        short, batch = None, clips
        if self.settings.short_cycle:
            short = iteration % SHORT_SHAPES
            batch = clips * self.short_batch_factors(crop)[short]
            crop = self.short_crops(crop)[short]
        stride = max(self.stride * (self.frames // frames), self.stride)
        return StepShape(index, short, batch, frames, crop, stride, self.stride, splits, sync, factor)

    def epoch_batches(self, epoch: int, clips: int) -> tuple[int, ...]:
        """The batch sizes one worker runs in ``epoch`` over its ``clips`` clips: the short cycle's rotation (or the
        stage's batch) while the next batch fits, the rest dropped."""
        return tuple(shape.batch for shape in self.steps_from(epoch, 0, clips))

    def steps_from(self, epoch: int, first: int, clips: int) -> tuple[StepShape, ...]:
        """The steps of ``epoch`` from its step ``first`` on over ``clips`` clips left: each step's shape while its
        batch fits. From ``first`` with the clips a run had left there, the same steps as the whole epoch's rest (a
        resumed epoch goes on as the unbroken one)."""
        if isinstance(clips, bool) or not isinstance(clips, int) or clips < 0:
            raise ClipflowError(f"multigrid: a worker's clips per epoch must be a whole number >= 0, got {clips!r}")
        shapes, left, iteration = [], clips, first
        while True:
            shape = self.step(epoch, iteration)
            if shape.batch > left:
                return tuple(shapes)
            shapes.append(shape)
            left -= shape.batch
            iteration += 1

    def least_short_side(self, least: int, crop: int) -> int:
        """The scale jitter's least short side for a crop of ``crop`` pixels, from the recipe's ``least``."""
        return int(round(float(least) * crop / self.crop))

    def relative_lr(self, epoch: float) -> float:
        """The lr at ``epoch`` relative to the recipe's, before any warm-up: :attr:`relative_lrs` from the last of
        :attr:`lr_steps` at or before it (PySlowFast's ``get_step_index``)."""
        bounds = (*self.lr_steps, self.epochs)
        index = len(bounds) - 1
        for number, bound in enumerate(bounds):
            if epoch < bound:
                index = number
                break
        return self.relative_lrs[index - 1]

    def _lr_after_warmup(self, epoch: float, lr: float, warmup_epochs: float) -> float:
        if self.lr_mode == "step":
            return self.relative_lr(epoch) * lr
        _, factor, _, _ = self._stage_shape(epoch)
        progress = min(max(epoch - warmup_epochs, 0.0) / max(self.epochs - warmup_epochs, 1e-12), 1.0)
        if self.lr_mode == "cosine":
            return lr * factor * (1 + math.cos(math.pi * progress)) / 2
        return lr * factor * (1 - progress) ** 2.0  # poly, clipflow's Schedule's power

    def learning_rate(self, epoch: float, lr: float, warmup_epochs: float = 0.0, warmup_lr: float = 0.0) -> float:
        """The lr at ``epoch`` (fractional: epoch + iteration / iterations) for a recipe lr of ``lr`` (after the
        linear scaling rule for its global batch): during ``warmup_epochs`` a line from ``warmup_lr`` to the lr at
        the warm-up's end, then the stage's (see the module). For a step recipe PySlowFast's ``get_lr_at_epoch``."""
        if epoch < warmup_epochs:
            end = self._lr_after_warmup(warmup_epochs, lr, warmup_epochs)
            alpha = (end - warmup_lr) / warmup_epochs
            return epoch * alpha + warmup_lr
        return self._lr_after_warmup(epoch, lr, warmup_epochs)

    def eval_epoch(self, epoch: int) -> bool | None:
        """Whether ``epoch`` ends with validation and a checkpoint under the long cycle: the run's last epoch, and in
        each stage of n epochs every (n // eval_freq + 1)-th counted back from its last (PySlowFast's
        ``is_eval_epoch`` and ``is_checkpoint_epoch``); None without the long cycle (the recipe's own rule)."""
        if not self.stages:
            return None
        if epoch + 1 == self.epochs:
            return True
        previous = 0
        for stage in self.stages:
            if epoch < stage.end_epoch:
                period = max((stage.end_epoch - previous) // self.settings.eval_freq + 1, 1)
                return (stage.end_epoch - 1 - epoch) % period == 0
            previous = stage.end_epoch
        return None


def multigrid_plan(
    settings: MultigridSettings,
    *,
    frames: int,
    crop: int,
    batch_size: int,
    stride: int,
    epochs: int,
    lr_mode: str = "step",
    lr_decay_epoch: Sequence[int] = (),
    lr_decay: float = 0.1,
) -> MultigridPlan:
    """The run of a base clip of ``frames`` fast-pathway frames read every ``stride``-th frame, cropped ``crop``, in
    batches of ``batch_size`` clips per worker, for a recipe of ``epochs`` with its lr schedule (``lr_mode``;
    ``step``: times ``lr_decay`` at each of ``lr_decay_epoch``). See the module for how a cosine recipe maps."""
    for name, value in (("frames", frames), ("crop", crop), ("batch_size", batch_size), ("stride", stride)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ClipflowError(f"multigrid: the base clip's {name} must be a whole number >= 1, got {value!r}")
    if lr_mode not in ("step", "cosine", "poly"):
        raise ClipflowError(f"multigrid: unknown lr_mode {lr_mode!r}; use cosine, step or poly")
    if not _is_number(lr_decay):
        raise ClipflowError(f"multigrid: lr_decay must be a number, got {lr_decay!r}")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ClipflowError(f"multigrid: the recipe's epochs must be a whole number >= 1, got {epochs!r}")
    decays = tuple(lr_decay_epoch) if lr_mode == "step" else ()
    steps = _check_lr_steps(decays, epochs, "lr_decay_epoch") if decays else (epochs,)
    stages: tuple[Stage, ...] = ()
    if settings.long_cycle:
        stages = long_cycle_schedule(settings, frames, crop, epochs, steps)
        ends = [s.end_epoch for s in stages]
        lr_steps = (0, *ends[:-1], (ends[-2] + ends[-1]) // 2)
        relative = [lr_decay**s.lr_stage * s.batch_factor for s in stages]
        relative_lrs = (*relative[:-1], relative[-2], relative[-1])
        run_epochs = ends[-1]
    else:
        factor = settings.epoch_factor if settings.short_cycle else 1
        lr_steps = (0, *(int(s * factor) for s in decays))
        relative_lrs = tuple(lr_decay**i for i in range(len(lr_steps)))
        run_epochs = int(epochs * factor)
    plan = MultigridPlan(
        settings, frames, crop, batch_size, stride, run_epochs, stages, tuple(lr_steps), tuple(relative_lrs), lr_mode
    )
    for index, stage in enumerate(stages):
        clips = stage.batch_factor * batch_size
        splits, _ = plan.bn_groups(clips)
        if clips % splits:
            raise ClipflowError(
                f"multigrid: train.batch_size {batch_size}: long-cycle stage {index} runs {clips} clips per worker, "
                f"which do not divide into its {splits} BatchNorm groups of about {settings.bn_base_size}; give a "
                f"batch_size that is a multiple of bn_base_size ({settings.bn_base_size})"
            )
    for index, stage in enumerate(stages or (None,)):
        stage_crop = stage.crop if stage else crop
        if settings.short_cycle and min(plan.short_batch_factors(stage_crop)) < 1:
            crops = plan.short_crops(stage_crop)
            where = f"long-cycle stage {index}'s" if stage else "the recipe's"
            raise ClipflowError(
                f"multigrid: short_cycle_factors {list(settings.short_cycle_factors)!r} give crops {crops[:2]!r}, "
                f"too large beside {where} {stage_crop}-pixel crop: the batch would round to 0 clips; give factors "
                "that keep the short cycle's crops smaller"
            )
    return plan


def plan_for_recipe(recipe: Mapping, settings: MultigridSettings) -> MultigridPlan:
    """:func:`multigrid_plan` from a recipe's keys: frames ``data.new_length // data.fast_temporal_stride``, stride
    ``data.fast_temporal_stride``, crop ``data.input_size``, ``train.batch_size``, ``train.epochs``, and its lr
    schedule (``train.lr_mode``, ``lr_decay_epoch``, ``lr_decay``; the schema's defaults where missing)."""
    data, train = recipe.get("data", {}), recipe.get("train", {})
    if data.get("kind", "video") != "video" or "new_length" not in data:
        raise ClipflowError("multigrid: needs a video recipe (data.new_length frames per clip)")
    fast = data.get("fast_temporal_stride", 2)
    frames = data["new_length"] // fast if _is_number(fast) and fast >= 1 else 0
    if frames < 1:
        raise ClipflowError(
            f"multigrid: data.new_length {data['new_length']!r} gives no fast-pathway frame at "
            f"data.fast_temporal_stride {fast!r}"
        )
    return multigrid_plan(
        settings,
        frames=frames,
        crop=data.get("input_size"),
        batch_size=train.get("batch_size"),
        stride=fast,
        epochs=train.get("epochs"),
        lr_mode=train.get("lr_mode", "cosine"),
        lr_decay_epoch=train.get("lr_decay_epoch", ()),
        lr_decay=train.get("lr_decay", 0.1),
    )


def check_multigrid(recipe: Mapping) -> MultigridPlan | None:
    """The recipe's ``train.multigrid`` as its plan, checked against the rest of the recipe; None when neither cycle
    is on. Refused, naming the setting and the way out: an image recipe, accumulation (a step's batch changes with
    the cycles; accumulation's micro-batches are fixed), torch.compile (a graph a shape), the long cycle on videos
    re-encoded to the recipe's frames (its strides read others), a long-cycle stage whose frames leave a SlowFast's
    slow pathway none, and a stage whose clips per worker are fewer than bn_base_size (its BatchNorm would
    synchronise workers: not built)."""
    train, data = recipe["train"], recipe["data"]
    settings = MultigridSettings.from_mapping(train.get("multigrid") or {})
    if not settings.enabled:
        return None
    if data.get("kind", "video") != "video":
        raise ClipflowError("train.multigrid trains video clips of changing shapes; this recipe trains images")
    if train.get("accumulate", 1) != 1:
        raise ClipflowError(
            f"train.multigrid with train.accumulate {train['accumulate']}: a multigrid step's batch changes with its "
            "cycle and accumulation's micro-batches are fixed (not built); set accumulate: 1"
        )
    if train.get("compile"):
        raise ClipflowError(
            "train.multigrid with train.compile: every clip shape of the cycles would compile a graph of its own; "
            "set compile: false"
        )
    plan = plan_for_recipe(recipe, settings)
    if settings.long_cycle and data.get("videos_keep_every", 1) > 1:
        raise ClipflowError(
            f"train.multigrid's long cycle reads clips at other strides than the recipe's, and the videos keep one "
            f"frame in {data['videos_keep_every']} (data.reencode.match_recipe): re-encode without match_recipe, or "
            "train with short_cycle only"
        )
    alpha = slowfast_alpha(recipe["model"])
    for index, stage in enumerate(plan.stages):
        if alpha is not None and stage.frames < alpha:
            raise ClipflowError(
                f"train.multigrid: long-cycle stage {index} takes {stage.frames} fast-pathway frames, and the slow "
                f"pathway takes every alpha-th ({alpha}): it would get none; give long_cycle_factors whose temporal "
                f"factors keep at least {alpha} of the recipe's {plan.frames} frames"
            )
        clips = stage.batch_factor * plan.batch_size
        _, sync = plan.bn_groups(clips)
        if sync > 1:
            least = min(s.batch_factor for s in plan.stages) * plan.batch_size
            raise ClipflowError(
                f"train.multigrid: long-cycle stage {index} runs {clips} clips per worker, fewer than bn_base_size "
                f"{settings.bn_base_size}: its BatchNorm would synchronise {sync} workers' statistics, which is not "
                f"built; give bn_base_size at most {least} (the fewest clips of a stage) or a larger train.batch_size"
            )
    return plan

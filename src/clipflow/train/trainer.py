"""The training loop a worker runs: data-parallel training, on the parameter server or on torch.distributed.

Every worker builds the same model from the same seed, then takes rank 0's state
(fresh, or the newest checkpoint rank 0 can load) through the back end's broadcast
(clipflow.train.comm), so only the launching node needs the checkpoint files.
Gradients are summed in buckets while backward runs: on the parameter server
(PSSync; with update_on_kvstore the servers also run the update and the workers
pull the new weights) or by DistributedDataParallel (DDPSync). Both back ends
update the weights with the same optimizer code (SGD or Adam) on the same buckets.

Each step a worker runs its k micro-batches (the recipe's train.accumulate, or what a resize decided), one per
slot, and the sum of their gradients is synchronized once; which samples every slot trains in an epoch, and how
a resumed run with another worker count goes on inside the epoch, is clipflow.train.slots. The layout is
decided in _resume_state (rank 0, from the checkpoint) and set up on every worker by _use_layout.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from clipflow.checksums import write_text_with_checksum
from clipflow.data.build import build_dataset
from clipflow.data.dataset import ClipShape
from clipflow.data.listfile import read_list
from clipflow.data.loader import make_loader
from clipflow.environment import read_env
from clipflow.errors import ClipflowError
from clipflow.jsonl import open_for_append, record_lines
from clipflow.launch.notice import Notice, StoppedOnNotice
from clipflow.models.builder import build_model
from clipflow.models.cards import is_image_model
from clipflow.models.step import StepOptions
from clipflow.train.bn_groups import BatchNormGroups
from clipflow.train.checkpoint import BEST, BEST_FACTS, HISTORY, RUN_FACTS, CheckpointStore, atomic_save
from clipflow.train.comm import DDPComm, PSComm
from clipflow.train.faults import FaultInjector
from clipflow.train.init_from import start_from
from clipflow.train.job import TrainJob
from clipflow.train.loader_sizing import LoaderChoice, for_clips, size_loader
from clipflow.train.multigrid import MultigridPlan, StepShape
from clipflow.train.precise_bn import PreciseBN, batch_order, recompute
from clipflow.train.progress import TensorBoardScalars, epoch_bar, progress_interval
from clipflow.train.resume_check import check_resume, job_facts, listed_iterations
from clipflow.train.schedule import Schedule, scaled_lr
from clipflow.train.slots import (
    EpochPlan,
    LaneSampler,
    Layout,
    SampleLog,
    ShapedBatches,
    SlotBuffers,
    decide,
    entry_of,
    normal_lanes,
    own_indices,
    part_lines,
    schedule_point,
    spread,
)
from clipflow.train.totals import FIELDS, WORDS, Totals, checkpoint_record, from_checkpoint, gather, words_of
from clipflow.train.validate import ValShard
from clipflow.values import is_int

HISTORY_EXPECTED = "one JSON object an epoch, as the trainer writes metrics.jsonl"


def no_decay_mults(model: torch.nn.Module) -> dict[str, float]:
    """Weight decay multiplier 0 for every bias and for BatchNorm's scale and shift (GluonCV's --no-wd:
    ``collect_params('.*beta|.*gamma|.*bias').setattr('wd_mult', 0.0)``), 1 for the rest."""
    zero = set()
    for module_name, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            if name == "bias" or isinstance(module, torch.nn.modules.batchnorm._NormBase):
                zero.add(f"{module_name}.{name}" if module_name else name)
    return {name: 0.0 if name in zero else 1.0 for name, _ in model.named_parameters()}


def optimizer_settings(train: dict, lr: float) -> dict:
    """The recipe's optimizer (clipflow.ps.optimizer) at learning rate ``lr``; the back end adds rescale_grad."""
    if train["optimizer"] == "adam":
        names = ("beta1", "beta2", "epsilon", "wd")
    else:
        names = ("momentum", "nesterov", "wd")
    return {"name": train["optimizer"], "learning_rate": lr, **{n: train[n] for n in names}}


def step_seed(seed: int, rank: int, step: int) -> int:
    """The torch seed of worker ``rank``'s step ``step``: dropout draws the same masks in a resumed run as in an
    unbroken one, on every worker, without their generators' states in the checkpoint; each worker its own."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1)[0])


def plain_numpy_state() -> tuple:
    """numpy's global RNG state as plain values (its key array as a list): a checkpoint loads with weights only
    (clipflow.safe_load); ``np.random.set_state`` takes it back as it is."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return kind, keys.tolist(), int(pos), int(has_gauss), float(cached)


class Trainer:
    def __init__(self, job: TrainJob, comm: PSComm | DDPComm, device: torch.device | None = None, log=print,
                 notice: Notice | None = None):  # fmt: skip
        self.job, self.comm, self.log = job, comm, log
        self.notice = notice  # checked after every step: stop there, resumable (clipflow.launch.notice)
        recipe, paths, seed = job.recipe, job.paths, job.seed
        self.recipe, self.paths, self.seed = recipe, paths, seed
        self.device = device or torch.device("cpu")
        self.rank, self.num_workers = comm.rank, comm.num_workers
        t = recipe["train"]
        self.epochs, self.batch_size = t["epochs"], t["batch_size"]
        # multigrid (clipflow.train.multigrid): its run's epochs, each step's clip shape, batch, lr and BatchNorm
        self.multigrid: MultigridPlan | None = job.multigrid
        if self.multigrid is not None:
            self.epochs = self.multigrid.epochs
        shard = paths.shard(self.rank)
        # the layout (accumulation), dataset, schedule: _use_layout, once _resume_state knows the checkpoint's
        self.layout = Layout(self.num_workers, self.batch_size, t["accumulate"])
        self.sampler = LaneSampler()
        self.shaped = ShapedBatches() if self.multigrid is not None else None  # the loader's steps with multigrid
        self.resumed_plan: EpochPlan | None = None  # resumed inside an epoch: the rest of it (clipflow.train.slots)
        self.sample_log: SampleLog | None = None
        torch.manual_seed(seed)
        self.model = build_model(recipe["model"]).to(self.device)
        self.bn_groups = BatchNormGroups(self.model)
        self.images = is_image_model(recipe["model"]["name"])  # called model(images), not model(slow, fast)
        self.step_options = StepOptions.from_recipe(recipe)
        self.step_options.layout(self.model, self.images)
        self.progress_s = progress_interval()
        self.sync: Any = None  # PSSync or DDPSync, made once rank 0's state is known (_resume_state)
        self.forward: Any = None  # what a step calls: the model, maybe wrapped by the sync, maybe compiled
        self.store = CheckpointStore(paths.checkpoint_root, keep=t["keep_checkpoints"], log=log)  # the run's own
        self.history_path = self.store.folder / HISTORY
        self.own_entries = read_list(shard)  # read once: the layout cuts it into slot parts (_use_layout)
        self.facts = job_facts(job, listed_iterations(self.own_entries, t))  # saved in every checkpoint
        # rank 0's checkpoint, checked against this job (or the earlier files set aside) before anything is read
        self.found = (
            check_resume(self.store.folder, self.facts, job.policy.resume, log, self.store) if self.rank == 0 else None
        )
        self.faults = FaultInjector(self.rank)
        self.eval_every = t["eval_every"] if paths.val_list is not None else 0
        self.val = (
            ValShard(build_dataset(recipe, paths.val_list, paths.root, "val", seed), self.rank, self.num_workers,
                     t["eval_batch_size"], self.device)
            if self.eval_every else None
        )  # fmt: skip
        self.best_path = self.store.folder / BEST
        marker = self.store.folder / BEST_FACTS  # a resumed run goes on from the best it saved so far
        self.best_top1 = json.loads(marker.read_text())["val_top1"] if self.store.is_runs(BEST_FACTS) else -1.0
        self.carried = Totals()  # resumed inside an epoch: this worker's totals of it so far
        self.started_from: dict | None = None  # rank 0: what train.init_from loaded (clipflow.train.init_from)

    # -- the layout: slots, dataset, schedule ----------------------------------------------------

    def _use_layout(self, layout: Layout) -> None:
        """Sets up this worker for ``layout``: its list's k slot parts (L entries each), the dataset (each item's
        draws keyed by its place in its part), the learning rate and its schedule; rank 0 reads every worker's
        list (the parts a checkpoint inside an epoch records) and writes the run's facts."""
        self.layout = layout
        t, k, b = self.recipe["train"], layout.accumulate, layout.batch
        shard = self.paths.shard(self.rank)
        length = len(self.own_entries) // k
        self.part_length = length
        self.iters_per_epoch = length // b
        keys = [i % max(length, 1) for i in range(len(self.own_entries))]
        # built first: a list of the wrong kind (video lines for an image recipe) is named by its line
        self.dataset = build_dataset(self.recipe, shard, self.paths.root, "train", self.seed, keys=keys)
        if self.iters_per_epoch == 0:
            raise ClipflowError(
                f"{shard} has {len(self.own_entries)} videos, fewer than accumulate {k} x batch {b}; "
                "lower train.batch_size or train.accumulate, or use fewer workers"
            )
        if self.multigrid is not None:
            self._check_multigrid_batches(shard, length)
        self.own_parts = part_lines(self.own_entries, k, length)
        self.all_parts: list[list[str]] | None = None
        if self.rank == 0:
            self.all_parts = self._every_part(layout, length)
            if len(self.own_entries) % k:
                self.log(f"{shard}: {len(self.own_entries) % k} videos beyond {k} slots of {length} are not trained")
        self.lr = scaled_lr(t["base_lr"], t["base_batch"], layout.global_batch)
        self.schedule = Schedule(self.lr, self.epochs, self.iters_per_epoch, t["lr_mode"], t["warmup_epochs"],
                                 t["warmup_lr"], t["lr_decay"], tuple(t["lr_decay_epoch"]))  # fmt: skip
        if self.rank == 0:
            facts = {"recipe": self.recipe["name"], "epochs": self.epochs, "iters_per_epoch": self.iters_per_epoch,
                     "workers": self.num_workers, "global_batch": layout.global_batch, "accumulate": k,
                     "backend": self.comm.backend, "init_from": self.started_from,
                     "precise_bn_batches": t["precise_bn_batches"]}  # fmt: skip
            self.store.put_text(RUN_FACTS, json.dumps(facts) + "\n")  # `clipflow status` reads it
            shape = f"{layout.workers} workers x {b}" if k == 1 else layout.describe()
            self.log(
                f"linear scaling rule: lr = base_lr {t['base_lr']} x global batch {layout.global_batch} "
                f"({shape}) / base_batch {t['base_batch']} = {self.lr:g}"
            )

    def _check_multigrid_batches(self, shard, length: int) -> None:
        """Every epoch of the multigrid run has a step: its first batch fits in a worker's ``length`` clips."""
        for epoch in range(self.multigrid.epochs):
            first = self.multigrid.step(epoch, 0)
            if first.batch > length:
                raise ClipflowError(
                    f"{shard} has {length} videos, and multigrid's epoch {epoch + 1} takes {first.batch} clips in its "
                    "first step: give each worker more videos, a smaller train.batch_size or fewer workers"
                )

    def _every_part(self, layout: Layout, length: int) -> list[list[str]] | None:
        """Every slot's part as list lines, from every worker's list; None where this host lacks one (hosts with
        their own disks hold their own workers' lists only)."""
        parts: list[list[str]] = []
        for rank in range(layout.workers):
            path = self.paths.shard(rank)
            if not path.is_file():
                return None
            entries = read_list(path)
            if len(entries) // layout.accumulate != length:
                raise ClipflowError(
                    f"{path} has {len(entries)} videos, {self.paths.shard(0)} {len(self.own_entries)}: every worker "
                    "list must have as many (clipflow splits makes them so)"
                )
            parts += part_lines(entries, layout.accumulate, length)
        return parts

    def _decide_layout(self, old: Layout) -> Layout:
        """Rank 0: the layout this run trains with after a checkpoint of layout ``old`` (clipflow.train.slots);
        a change is logged with its batch and learning-rate decision."""
        t, policy = self.recipe["train"], self.job.policy.global_batch
        wanted = Layout(self.num_workers, self.batch_size, t["accumulate"])
        if old == wanted:
            return wanted
        if self.multigrid is not None:
            raise ClipflowError(
                f"the checkpoint was made with {old.describe()}, this run has {wanted.describe()}: a multigrid run "
                f"resumes with its own layout (its steps' batches follow the cycle); resume with {old.workers} workers "
                f"x {old.batch} clips"
            )
        new = decide(old, self.num_workers, self.batch_size, t["accumulate"], policy)
        if new != old:
            before = scaled_lr(t["base_lr"], t["base_batch"], old.global_batch)
            after = scaled_lr(t["base_lr"], t["base_batch"], new.global_batch)
            batch = (f"global batch {new.global_batch}" if policy == "keep"
                     else f"global batch {old.global_batch} -> {new.global_batch}")  # fmt: skip
            self.log(f"resize: {old.describe()} -> {new.describe()} ({policy}: {batch}), lr {before:g} -> {after:g}")
        return new

    def _resumed_plan(self, state: dict, old: Layout, new: Layout, path) -> EpochPlan:
        """Rank 0: the rest of the checkpoint's epoch for ``new``'s slots (the same lanes, or spread over more or
        fewer slots)."""
        iteration = state["iteration"]
        if "slots" in state:
            plan = EpochPlan.from_record(state["slots"], iteration)
        else:  # a checkpoint from before slots: every worker one slot, at the same position of its part
            sampler = state["sampler"]
            length, position = sampler["length"], sampler["position"]
            lanes = normal_lanes(old.slots, length, old.batch, self.seed, state["epoch"])
            plan = EpochPlan([lane[position:] for lane in lanes], None, old.slots * len(lanes[0]), iteration)
        moved = new.slots != old.slots or new.workers != old.workers
        if moved and plan.sources is None:
            raise ClipflowError(
                f"checkpoint {path} was made inside epoch {state['epoch']} with {old.describe()}; going on inside "
                f"it with {new.describe()} needs every worker list on the launching host, which hosts with their own "
                f"disks do not have (not supported yet): resume with {old.workers} workers to the epoch's end first"
            )
        if new.slots != old.slots:
            plan.lanes = spread(plan.lanes, new.slots)
        return plan

    def _normal_plan(self, epoch: int) -> EpochPlan:
        """A whole epoch in this run's layout: every slot its part in epoch_order (all of it with multigrid, whose
        batches take what fits)."""
        batch = 1 if self.multigrid is not None else self.batch_size
        lanes = normal_lanes(self.layout.slots, self.part_length, batch, self.seed, epoch)
        return EpochPlan(lanes, self.all_parts, sum(len(lane) for lane in lanes))

    def _multigrid_record(self, epoch: int, shapes: list[StepShape]) -> dict:
        """The epoch's multigrid shape for metrics.jsonl and the report: its long-cycle stage, frames, the stage's
        crop and clips per worker (the short cycle's third shape), BatchNorm groups and lr factor; the steps of
        this run."""
        stage = self.multigrid.step(epoch - 1, 2 if self.multigrid.settings.short_cycle else 0)
        return {"stage": stage.stage, "frames": stage.frames, "crop": stage.crop, "clips": stage.batch,
                "stride": [stage.least_stride, stage.stride], "bn_splits": stage.bn_splits,
                "lr_factor": stage.lr_factor, "steps": len(shapes),
                "short_cycle": self.multigrid.settings.short_cycle}  # fmt: skip

    def _lanes_of(self, plan: EpochPlan, loader):
        """This worker's lanes of ``plan`` as dataset indices, the loader that serves them and each index's path:
        its own dataset when every sample comes from its own parts, else a dataset of the plan's entries."""
        k, r = self.layout.accumulate, self.rank
        mine = plan.lanes[r * k : (r + 1) * k]
        paths = [e.path for e in self.own_entries]
        indices = own_indices(plan, r, k, self.own_parts, self.part_length)
        if all(i is not None for lane in indices for i in lane):
            return indices, self.dataset, loader, self.sampler, paths, 0
        if plan.sources is None:
            raise ClipflowError("the checkpoint's epoch names samples outside this worker's list (another split?)")
        where = f"{self.store.folder} (the checkpoint's epoch)"
        entries = [entry_of(plan.sources[s][key], where) for lane in mine for s, key in lane] + self.own_entries[:1]
        keys = [key for lane in mine for _, key in lane] + [0]
        dataset = build_dataset(self.recipe, where, self.paths.root, "train", self.seed, entries=entries, keys=keys)
        sampler = LaneSampler()
        other = make_loader(dataset, self.batch_size, sampler, self.loader.workers, self.loader.prefetch,
                            device=self.device, persistent=False)  # fmt: skip
        at, out = 0, []
        for lane in mine:
            out.append(list(range(at, at + len(lane))))
            at += len(lane)
        return out, dataset, other, sampler, [e.path for e in entries], len(entries) - 1

    # -- state shared through the back end's collectives -----------------------------------------

    def _resume_state(self) -> tuple[int, int, int]:
        """Rank 0 loads the newest checkpoint; every worker then receives rank 0's state.

        Returns (epochs complete, steps done, iterations done in the next epoch): the last is not 0
        when the checkpoint was made inside an epoch; every worker then also takes back its totals of that epoch.
        """
        done = torch.zeros(3)
        optimizer_states: dict = {}
        carried: list[Totals] = []
        layout = self.layout  # this run's, unless a checkpoint says otherwise
        plan_bytes = torch.zeros(0)
        if self.rank == 0:
            found, self.found = self.found, None  # checked in __init__ (resume_check); not kept in memory
            if found:
                state, path = found
                old = Layout.of(state["layout"]) if "layout" in state else layout  # before layouts: this run's
                layout = self._decide_layout(old)
                self.model.load_state_dict(state["model"])
                optimizer_states = state["optimizer"]
                torch.set_rng_state(state["rng"]["torch"])
                if self.device.type == "cuda" and "cuda" in state["rng"]:
                    torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
                np.random.set_state(state["rng"]["numpy"])
                random.setstate(state["rng"]["python"])
                iteration = state.get("iteration", 0)
                done = torch.tensor([float(state["epoch"] - (1 if iteration else 0)), float(state["step"]), iteration])
                if iteration:
                    plan_bytes = self._resumed_plan(state, old, layout, path).encode()
                    carried = self._carried_totals(state["partial"], old.workers)
                inside = f", iteration {iteration}" if iteration else ""
                self.log(f"resumed from checkpoint {path} (epoch {state['epoch']}{inside}, step {state['step']})")
                self.started_from = state.get("init_from")
            elif self.recipe["train"]["init_from"]:
                self.started_from = start_from(self.model, self.recipe, self.log)
            else:
                self.log(f"no checkpoint in {self.store.folder}: starting from scratch")
        self.comm.broadcast("meta", [done])
        # the layout's k, the plan's size and the attempt (rank 0's start in ms), as float32-exact 16-bit words
        attempt = time.time_ns() // 1_000_000
        words = [layout.accumulate, len(plan_bytes) >> 16, len(plan_bytes) & 0xFFFF,
                 *((attempt >> shift) & 0xFFFF for shift in (32, 16, 0))]  # fmt: skip
        shared = torch.tensor(words, dtype=torch.float32)
        self.comm.broadcast("layout", [shared])
        accumulate, size_hi, size_lo, *stamp = (int(v) for v in shared.tolist())
        if size_hi or size_lo:
            plan_bytes = plan_bytes if self.rank == 0 else torch.zeros((size_hi << 16) | size_lo)
            self.comm.broadcast("plan", [plan_bytes])
            self.resumed_plan = EpochPlan.decode(plan_bytes)
        self._use_layout(Layout(self.num_workers, self.batch_size, accumulate))
        self.sample_log = SampleLog(read_env().sample_log, self.rank, (stamp[0] << 32) | (stamp[1] << 16) | stamp[2])
        if done[2] > 0:  # inside an epoch: every worker goes on from its own totals (clipflow.train.totals)
            words = words_of(carried) if self.rank == 0 else torch.zeros(self.num_workers, FIELDS, WORDS)
            self.comm.broadcast("carried", [words])
            self.carried = Totals.from_words(words[self.rank])
        buffers = [b for b in self.model.buffers() if b.is_floating_point()]  # BatchNorm statistics
        self.comm.broadcast("buffers", buffers)
        self.slot_buffers = SlotBuffers(self.model, self.layout.accumulate)  # every slot from rank 0's statistics
        t = self.recipe["train"]
        self.sync = self.comm.gradient_sync(  # takes rank 0's weights
            self.model,
            optimizer_settings(t, self.lr),
            no_decay_mults(self.model) if t["no_wd"] else None,
            t["clip_grad"],
            self.layout.accumulate,
        )
        self.forward = self.step_options.compiled(self.sync.module)  # the same parameters
        if self.rank == 0:
            self.log(
                f"back end {self.comm.backend}: gradients summed over {self.num_workers} workers"
                + (f" x {self.layout.accumulate} micro-batches" if self.layout.accumulate > 1 else "")
                + f" ({self.comm.transport}, rank 0 on {self.device})"
            )
        if self.rank == 0 and t["no_wd"]:
            spared = [b for b in self.sync.buckets if b.wd_mult == 0.0]
            count, total = sum(len(b.params) for b in spared), len(list(self.model.parameters()))
            self.log(f"no weight decay on {count} of {total} parameters (biases, BatchNorm), {len(spared)} buckets")
        if self.rank == 0 and self.sync.clip_norm:
            self.log(f"gradients clipped to L2 norm {self.sync.clip_norm:g} per worker before the sum")
        if done[0] > 0 or done[2] > 0:
            self._share_optimizer_states(optimizer_states)
        return int(done[0]), int(done[1]), int(done[2])

    def _carried_totals(self, record: dict, workers: int) -> list[Totals]:
        """Every worker's totals of the checkpoint's epoch so far; from another worker count, all of them added
        into rank 0's (the epoch's totals stay the same, their rounding not)."""
        try:
            every = from_checkpoint(record, workers)
        except ValueError as exc:
            raise ClipflowError(f"the checkpoint's epoch totals do not fit this run: {exc}") from None
        if workers == self.num_workers:
            return every
        summed = Totals(sum(t.loss_sum for t in every), sum(t.correct for t in every), sum(t.count for t in every))
        return [summed] + [Totals()] * (self.num_workers - 1)

    def _share_optimizer_states(self, states: dict) -> None:
        """Rank 0's optimizer states (from its checkpoint) to wherever the optimizer runs."""
        if self.comm.optimizer_on_servers:
            self.sync.load_optimizer_states(states)  # collective: rank 0 sends to the servers
            return
        held = [(b.key, self.sync.local.state_size(b.numel)) for b in self.sync.buckets]
        held = [(key, size) for key, size in held if size]  # SGD at momentum 0 keeps none
        buffers = [states[key].reshape(-1).float() if self.rank == 0 else torch.zeros(size) for key, size in held]
        self.comm.broadcast("optimizer", buffers)
        self.sync.load_optimizer_states({key: buf for (key, _), buf in zip(held, buffers, strict=True)})

    def _global_metrics(self, mine: Totals, speed: tuple[int, float, float, float]) -> tuple[float, float, list[dict]]:
        """Collective: the epoch's loss and top-1 over all workers, and every worker's own speed (its row of
        (clips, seconds, data seconds, compute seconds) and its loader (LoaderChoice.words), the others' rows zero
        before the sum)."""
        width = 4 + LoaderChoice.WORDS
        rows = torch.zeros(self.num_workers, width)  # float32, as every back end sums it
        rows[self.rank] = torch.tensor([float(v) for v in speed] + self.loader.words())
        totals = torch.cat([torch.tensor([mine.loss_sum, float(mine.correct), float(mine.count)]), rows.view(-1)])
        self.comm.all_sum("metrics", totals)
        workers = [
            {"rank": r, "clips_per_s": float(c / s) if s else 0.0, "data_time": float(d), "step_time": float(t),
             "loader": LoaderChoice.from_words([float(w) for w in words]).record()}
            for r, (c, s, d, t, *words) in enumerate(totals[3:].view(self.num_workers, width).tolist())
        ]  # fmt: skip
        return float(totals[0] / totals[2]), float(totals[1] / totals[2]), workers

    def _validate(self) -> dict:
        """The val list scored by every worker's share, summed (collective): val loss, top-1, top-5."""
        self.model.eval()
        local = self.val.totals(lambda *inputs: self.step_options.logits(self.forward, *inputs),
                                self.recipe["model"]["num_classes"]).float()  # fmt: skip
        self.model.train()
        self.comm.all_sum("val", local)
        loss, top1, top5, count = (float(v) for v in local)
        return {"val_loss": loss / count, "val_top1": top1 / count, "val_top5": top5 / count, "val_videos": int(count)}

    def _precise_bn(self, epoch: int) -> PreciseBN:
        """Collective: BatchNorm's running statistics recomputed over up to train.precise_bn_batches batches of this
        worker's trained clips (an order of the run's seed, rank and epoch) and every other worker's
        (clipflow.train.precise_bn); every slot then keeps those (a resumed run's slots start from them too)."""
        t, b = self.recipe["train"], self.batch_size
        count = self.layout.accumulate * self.part_length  # the clips this worker trains
        order = batch_order(count, b, t["precise_bn_batches"], (self.seed, self.rank, epoch))
        self.dataset.set_epoch(epoch)  # the epoch's draws, as its training had
        loader = make_loader(self.dataset, b, order, self.loader.workers, self.loader.prefetch, device=self.device,
                             persistent=False)  # fmt: skip

        def forward(*inputs: torch.Tensor) -> torch.Tensor:
            inputs = tuple(self.dataset.normalize(x.to(self.device, non_blocking=True)) for x in inputs)
            return self.step_options.logits(self.model, *inputs)

        done = recompute(self.model, (batch[:-1] for batch in loader), forward, self.comm.all_sum,
                         t["precise_bn_batches"])  # fmt: skip
        self.slot_buffers.reset()
        if self.rank == 0:
            self.log(f"epoch {epoch}/{self.epochs} {done.describe(self.num_workers)}")
        return done

    def _save_best(self, epoch: int, val: dict) -> None:
        self.best_top1 = val["val_top1"]
        best = {"model": self.model.state_dict(), "recipe": self.recipe, "epoch": epoch, **val}
        self.store.put(BEST, lambda to: atomic_save(best, to))
        self.store.put_text(BEST_FACTS, json.dumps({"epoch": epoch, **val}) + "\n")  # collected with best.pt
        self.log(f"best val top-1 so far: {self.best_path} (epoch {epoch})")

    # -- the loop --------------------------------------------------------------------------------

    def _checkpoint(self, epoch: int, step: int, iteration: int = 0, partial: dict | None = None,
                    slots: dict | None = None) -> Path:  # fmt: skip
        """Rank 0 saves, with the layout; ``iteration`` > 0: inside ``epoch``, after that many iterations, with
        every slot's remaining samples of it (``slots``: :meth:`EpochPlan.record`) and the epoch's ``partial``
        totals so far (every worker's, :func:`checkpoint_record`); the checkpoint's path."""
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.sync.optimizer_states(),
            "epoch": epoch,
            "step": step,
            "iteration": iteration,
            "schedule": vars(self.schedule),
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": plain_numpy_state(),
                "python": random.getstate(),
                **({"cuda": torch.cuda.get_rng_state(self.device)} if self.device.type == "cuda" else {}),
            },
            "recipe": self.recipe,
            "facts": self.facts,  # the settings it was made with: a resume compares them (resume_check)
            "layout": self.layout.record(),
            "init_from": self.started_from,  # what the run started from: run.json keeps it after a resume
        }
        if iteration:
            state["slots"] = slots
            state["partial"] = partial
        path = self.store.save(state, epoch, iteration)
        self.log(f"checkpoint {path}")
        return path

    def _checkpoint_inside(self, epoch: int, step: int, iteration: int, mine: Totals, plan: EpochPlan,
                           taken: int) -> Path | None:  # fmt: skip
        """A checkpoint inside an epoch, every lane of ``plan`` ``taken`` samples in: rank 0 gathers every worker's
        totals so far (collective) and saves them with every slot's remaining samples; its path on rank 0."""
        every = gather(self.comm.all_sum, "partial", mine, self.rank, self.num_workers)
        if self.rank == 0:
            return self._checkpoint(epoch, step, iteration, checkpoint_record(every), plan.record(taken))
        return None

    def _stop_on_notice(self, epoch: int, step: int, iteration: int, mine: Totals, plan: EpochPlan,
                        taken: int) -> None:  # fmt: skip
        """After every step (collective): when any worker got a notice, rank 0 saves a checkpoint inside the
        epoch, every worker waits for it, and StoppedOnNotice ends the run here (the worker exits RESUMABLE)."""
        if self.notice is None or not self.notice.agreed(self.comm):
            return
        path = self._checkpoint_inside(epoch, step, iteration, mine, plan, taken)
        self.comm.barrier()  # nobody leaves before the checkpoint is written
        stopped = StoppedOnNotice(epoch, iteration, path)
        if self.rank == 0:
            self.log(f"{stopped}; rerun the same command to go on")
        raise stopped

    def _append_history(self, record: dict, resumed_epoch: int) -> None:
        """``record`` added to the run's metrics.jsonl, after the epochs up to ``resumed_epoch`` (an interrupted
        run's later lines dropped); a cut last line is set aside first (clipflow.jsonl)."""
        lines = []
        if self.store.is_runs(HISTORY):  # someone else's file of that name is moved aside by the write below
            open_for_append(self.history_path, self.log)
            for number, old in record_lines(self.history_path, "training history", HISTORY_EXPECTED):
                if not is_int(old.get("epoch")):
                    raise ClipflowError(f"training history {self.history_path} line {number} has no epoch number; "
                                        f"expected {HISTORY_EXPECTED}: move the file away to start the history "
                                        "afresh")  # fmt: skip
                if old["epoch"] <= resumed_epoch:
                    lines.append(json.dumps(old))
        lines.append(json.dumps(record))
        self.store.put_text(HISTORY, "\n".join(lines) + "\n")

    def run(self) -> None:
        start_epoch, step, resume_iteration = self._resume_state()
        # the loader's processes, prefetch and decode threads: the recipe's, or measured (clipflow.train.loader_sizing)
        measured = size_loader(self.recipe["train"], self.dataset, self.recipe)
        self.log(f"loader: {measured.describe()}")  # every worker's own (the launcher names the worker)
        # one loader while its choice holds (the run's, or a multigrid stage's): its workers (if any) persist, and
        # each index carries the dataset's epoch
        self.loader, loader = measured, None
        self.board = (
            TensorBoardScalars(self.paths.tensorboard, step) if self.paths.tensorboard and self.rank == 0 else None
        )
        try:
            for epoch in range(start_epoch + 1, self.epochs + 1):
                choice = self._loader_for(measured, epoch)
                if choice != self.loader:
                    self.log(f"loader from epoch {epoch} ({choice.batch} clips a step): {choice.describe()}")
                if loader is None or (choice.workers, choice.prefetch) != (self.loader.workers, self.loader.prefetch):
                    loader = None  # the old loader's processes end with it
                    loader = make_loader(self.dataset, self.batch_size, self.sampler, choice.workers, choice.prefetch,
                                         device=self.device, batches=self.shaped)  # fmt: skip
                self.loader = choice
                inside = epoch == start_epoch + 1 and resume_iteration and self.resumed_plan is not None
                plan = self.resumed_plan if inside else self._normal_plan(epoch)
                step = self._epoch(epoch, plan, step, loader)
            if self.rank == 0:
                atomic_save(
                    {"model": self.model.state_dict(), "recipe": self.recipe, "epoch": self.epochs},
                    self.paths.model_out,
                )
                self.paths.metrics_out.parent.mkdir(parents=True, exist_ok=True)
                write_text_with_checksum(self.paths.metrics_out, self.history_path.read_text())
                self.log(f"final model {self.paths.model_out}")
        finally:
            if self.board:
                self.board.close()  # also on a failure: the events so far are kept
        self.comm.barrier()

    def _loader_for(self, measured: LoaderChoice, epoch: int) -> LoaderChoice:
        """The loader of ``epoch``: the one ``measured`` at the start, or for a multigrid epoch the rule's for its
        mean clips a step (clipflow.train.loader_sizing.for_clips)."""
        if self.multigrid is None:
            return measured
        steps = self.multigrid.steps_from(epoch - 1, 0, self.part_length)
        clips = sum(s.batch for s in steps) / max(1, len(steps))
        return for_clips(measured, clips, self.recipe["train"]["loader_prefetch"])

    def _epoch(self, epoch: int, plan: EpochPlan, step: int, loader) -> int:
        """Trains ``epoch``'s ``plan`` (the whole epoch, or its rest from a checkpoint inside it), validates and
        records it; returns the step count after it. A step is every slot's next micro-batch: k per worker,
        forward and backward each, its slot's BatchNorm statistics in the model, the gradients synchronized after
        the last one."""
        t = self.recipe["train"]
        save_every = t["save_every_iters"]
        k, b, first = self.layout.accumulate, self.batch_size, plan.first
        lanes, dataset, loader, sampler, paths, pad = self._lanes_of(plan, loader)
        mg, shapes = self.multigrid, []
        if mg is None:
            left = plan.steps(b)
            start_point = round(plan.trained_fraction(b) * self.iters_per_epoch)  # the schedule's place
            sampler.set(lanes, b, left, pad)
            sizes = [b] * left

            def lr_at(done: int) -> float:
                return self.schedule(schedule_point(epoch, self.iters_per_epoch, start_point, done, left))
        else:  # each step's shape and batch from the cycles, from the plan's first step on (a resumed one's too)
            shapes = list(mg.steps_from(epoch - 1, first, len(lanes[0])))
            left, sizes = len(shapes), [shape.batch for shape in shapes]
            iters = first + left  # the epoch's steps: a resumed epoch's rest is the unbroken one's (steps_from)
            self.shaped.set(lanes[0], [(s.batch, ClipShape(s.frames, s.crop, s.least_stride, s.stride))
                                       for s in shapes])  # fmt: skip

            def lr_at(done: int) -> float:
                position = epoch - 1 + (first + done) / iters
                return mg.learning_rate(position, self.lr, t["warmup_epochs"], t["warmup_lr"])

        starts = [0, *itertools.accumulate(sizes)]  # each step's first sample in its lane
        self.model.train()
        dataset.set_epoch(epoch)
        start = self.carried if first else Totals()
        totals = start
        data_time, step_time = 0.0, 0.0
        lr = lr_at(0)
        began = tick = time.perf_counter()
        with epoch_bar(epoch, self.epochs, first + left, first, self.progress_s, self.rank == 0) as bar:
            for micro, (*inputs, labels) in enumerate(loader):
                done, m = divmod(micro, k)
                it = first + done
                if m == 0:
                    self.faults.check(epoch, it)
                    lr = lr_at(done)
                    self.sync.set_learning_rate(lr)
                    if shapes:
                        self.bn_groups.use(shapes[done].bn_splits)
                    trained: list[tuple[int, str, float]] = []
                inputs = [x.to(self.device, non_blocking=True) for x in inputs]
                labels = labels.to(self.device, non_blocking=True)
                loaded = time.perf_counter()
                size, at = sizes[done], starts[done]
                real = max(0, min(size, len(lanes[m]) - at))  # the rest of the micro-batch pads (weight 0)
                slot = self.rank * k + m
                self.slot_buffers.use(m)
                # dropout's draws per slot and step: the same after a resume, and with k slots as with k workers
                torch.manual_seed(step_seed(self.seed, slot, step))
                with self.sync.no_sync() if m < k - 1 else contextlib.nullcontext():
                    logits = self.step_options.logits(self.forward, *(self.dataset.normalize(x) for x in inputs))
                    if real == size:
                        loss = F.cross_entropy(logits, labels)
                    else:
                        weights = (torch.arange(size, device=labels.device) < real).float()
                        loss = (F.cross_entropy(logits, labels, reduction="none") * weights).sum() / size
                    loss.backward()  # the back end sums full buckets while the last backward goes on
                if real:  # the mean over the real clips (as an unpadded micro-batch's loss is)
                    hits = int((logits[:real].argmax(1) == labels[:real]).sum())
                    totals = totals.add(loss.item() if real == size else loss.item() * size / real, hits, real)
                lane = lanes[m]
                trained += [(slot, paths[lane[at + i]] if i < real else paths[lane[0] if lane else pad],
                             1.0 if i < real else 0.0) for i in range(size)]  # fmt: skip
                if m < k - 1:
                    now = time.perf_counter()
                    data_time, step_time, tick = data_time + loaded - tick, step_time + now - loaded, now
                    continue
                self.slot_buffers.use(0)
                self.sync.synchronize()
                self.sync.step()
                self.model.zero_grad(set_to_none=True)
                self.sample_log.write(epoch, step, trained)
                self.faults.after_step()
                step += 1
                batch_loss = loss.item()
                now = time.perf_counter()
                data_time, step_time, tick = data_time + loaded - tick, step_time + now - loaded, now
                bar.set_postfix_str(f"loss {totals.loss_sum / max(totals.count, 1):.4f} lr {lr:.5f}", refresh=False)
                bar.update()
                if self.board:
                    self.board.step(step, batch_loss, lr)
                if save_every and (it + 1) % save_every == 0 and done + 1 < left:
                    self._checkpoint_inside(epoch, step, it + 1, totals, plan, starts[done + 1])
                if done + 1 < left:  # after the last step the epoch ends first; then the next one
                    self._stop_on_notice(epoch, step, it + 1, totals, plan, starts[done + 1])
        self.bn_groups.use(1)  # validation, precise BN and the saved model: plain BatchNorm
        elapsed = time.perf_counter() - began
        speed = (totals.count - start.count, elapsed, data_time, step_time)  # this run's clips, not the carried ones
        loss_avg, acc, workers = self._global_metrics(totals, speed)
        validating = self.eval_every and (epoch % self.eval_every == 0 or epoch == self.epochs)
        if self.eval_every and mg is not None and mg.eval_epoch(epoch - 1) is not None:
            validating = mg.eval_epoch(epoch - 1)  # the long cycle's: each stage's end and eval_freq in between
        saving = epoch % self.recipe["train"]["save_frequency"] == 0 or epoch == self.epochs
        precise = self._precise_bn(epoch) if self.recipe["train"]["precise_bn_batches"] and (
            validating or saving) else None  # as PySlowFast: before every evaluation and checkpoint  # fmt: skip
        val = self._validate() if validating else {}
        if self.rank == 0:
            record = {
                "epoch": epoch,
                "step": step,
                "loss": loss_avg,
                "train_top1": acc,
                "lr": lr,
                "batch_size": self.batch_size,  # per worker: runs compared for scaling must share it
                "clips_per_s": sum(w["clips_per_s"] for w in workers),  # every worker's own, measured
                "data_time": data_time,
                "step_time": step_time,
                "epoch_time": elapsed,
                "workers": workers,  # each worker's clips/s and its data and compute seconds
                **({"precise_bn_batches": precise.batches} if precise else {}),  # batches per worker
                **({"multigrid": self._multigrid_record(epoch, shapes)} if mg is not None else {}),
                **val,
            }
            self.log(
                f"epoch {epoch}/{self.epochs} loss {loss_avg:.4f} train top-1 {acc:.3f} "
                f"{record['clips_per_s']:.1f} clips/s (data {data_time:.1f} s, compute {step_time:.1f} s)"
            )
            if val:
                self.log(f"epoch {epoch}/{self.epochs} val loss {val['val_loss']:.4f} top-1 {val['val_top1']:.3f} "
                         f"top-5 {val['val_top5']:.3f} over {val['val_videos']} videos")  # fmt: skip
                if val["val_top1"] > self.best_top1:
                    self._save_best(epoch, val)
            self._append_history(record, epoch - 1)
            if self.board:
                self.board.epoch(record)
            if saving:
                self._checkpoint(epoch, step)
        return step

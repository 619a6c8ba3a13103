"""The training loop a worker runs: data-parallel training, on the parameter server or on torch.distributed.

Every worker builds the same model from the same seed, then takes rank 0's state
(fresh, or the newest checkpoint rank 0 can load) through the back end's broadcast
(clipflow.train.comm), so only the launching node needs the checkpoint files.
Gradients are summed in buckets while backward runs: on the parameter server
(PSSync; with update_on_kvstore the servers also run the update and the workers
pull the new weights) or by DistributedDataParallel (DDPSync). Both back ends
update the weights with the same optimizer code (SGD or Adam) on the same buckets.
"""

from __future__ import annotations

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
from clipflow.data.loader import make_loader
from clipflow.data.splits import EpochSampler
from clipflow.errors import ClipflowError
from clipflow.models import build_model, is_image_model
from clipflow.train.checkpoint import RUN_FACTS, CheckpointStore, atomic_save
from clipflow.train.comm import DDPComm, PSComm
from clipflow.train.faults import FaultInjector
from clipflow.train.job import TrainJob
from clipflow.train.notice import Notice, StoppedOnNotice
from clipflow.train.progress import TensorBoardScalars, epoch_bar, progress_interval
from clipflow.train.resume_check import check_resume, job_facts
from clipflow.train.schedule import Schedule, scaled_lr
from clipflow.train.step import StepOptions
from clipflow.train.totals import FIELDS, WORDS, Totals, checkpoint_record, from_checkpoint, gather, words_of
from clipflow.train.validate import ValShard


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


class Trainer:
    def __init__(self, job: TrainJob, comm: PSComm | DDPComm, device: torch.device | None = None, log=print,
                 notice: Notice | None = None):  # fmt: skip
        self.job, self.comm, self.log = job, comm, log
        self.notice = notice  # checked after every step: stop there, resumable (clipflow.train.notice)
        recipe, paths, seed = job.recipe, job.paths, job.seed
        self.recipe, self.paths, self.seed = recipe, paths, seed
        self.device = device or torch.device("cpu")
        self.rank, self.num_workers = comm.rank, comm.num_workers
        t = recipe["train"]
        self.epochs, self.batch_size = t["epochs"], t["batch_size"]
        shard = paths.shard(self.rank)
        self.dataset = build_dataset(recipe, shard, paths.root, "train", seed)
        self.iters_per_epoch = len(self.dataset) // self.batch_size
        if self.iters_per_epoch == 0:
            raise ClipflowError(
                f"{shard} has {len(self.dataset)} videos, fewer than one batch of {self.batch_size}; "
                "lower train.batch_size or use fewer workers"
            )
        self.sampler = EpochSampler(len(self.dataset), seed, self.iters_per_epoch * self.batch_size)
        global_batch = self.batch_size * self.num_workers
        self.lr = scaled_lr(t["base_lr"], t["base_batch"], global_batch)
        self.schedule = Schedule(
            self.lr,
            self.epochs,
            self.iters_per_epoch,
            t["lr_mode"],
            t["warmup_epochs"],
            t["warmup_lr"],
            t["lr_decay"],
            tuple(t["lr_decay_epoch"]),
        )
        torch.manual_seed(seed)
        self.model = build_model(recipe["model"]).to(self.device)
        self.images = is_image_model(recipe["model"]["name"])  # called model(images), not model(slow, fast)
        self.step_options = StepOptions.from_recipe(recipe)
        self.step_options.layout(self.model, self.images)
        self.progress_s = progress_interval()
        self.sync: Any = None  # PSSync or DDPSync, made once rank 0's state is known (_resume_state)
        self.forward: Any = None  # what a step calls: the model, maybe wrapped by the sync, maybe compiled
        self.store = CheckpointStore(paths.checkpoint_root, keep=t["keep_checkpoints"], log=log)  # the run's own
        self.history_path = self.store.folder / "metrics.jsonl"
        self.facts = job_facts(job, self.iters_per_epoch)  # saved in every checkpoint
        # rank 0's checkpoint, checked against this job (or the earlier files set aside) before anything is read
        self.found = check_resume(self.store.folder, self.facts, job.policy.resume, log) if self.rank == 0 else None
        self.faults = FaultInjector(self.rank)
        self.eval_every = t["eval_every"] if paths.val_list is not None else 0
        self.val = (
            ValShard(build_dataset(recipe, paths.val_list, paths.root, "val", seed), self.rank, self.num_workers,
                     t["eval_batch_size"], self.device)
            if self.eval_every else None
        )  # fmt: skip
        self.best_path = self.store.folder / "best.pt"
        marker = self.best_path.with_suffix(".json")  # a resumed run goes on from the best saved so far
        self.best_top1 = json.loads(marker.read_text())["val_top1"] if marker.exists() else -1.0
        self.carried = Totals()  # resumed inside an epoch: this worker's totals of it so far
        if self.rank == 0:
            facts = {"recipe": recipe["name"], "epochs": self.epochs, "iters_per_epoch": self.iters_per_epoch,
                     "workers": self.num_workers, "global_batch": global_batch, "backend": comm.backend}  # fmt: skip
            write_text_with_checksum(self.store.folder / RUN_FACTS, json.dumps(facts) + "\n")  # `clipflow status`
            log(
                f"linear scaling rule: lr = base_lr {t['base_lr']} x global batch {global_batch} "
                f"({self.num_workers} workers x {self.batch_size}) / base_batch {t['base_batch']} = {self.lr:g}"
            )

    # -- state shared through the back end's collectives -----------------------------------------

    def _resume_state(self) -> tuple[int, int, int]:
        """Rank 0 loads the newest checkpoint; every worker then receives rank 0's state.

        Returns (epochs complete, steps done, iterations done in the next epoch): the last is not 0
        when the checkpoint was made inside an epoch; every worker then also takes back its totals of that epoch.
        """
        done = torch.zeros(3)
        optimizer_states: dict = {}
        carried: list[Totals] = []
        if self.rank == 0:
            found, self.found = self.found, None  # checked in __init__ (resume_check); not kept in memory
            if found:
                state, path = found
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
                    self.sampler.set_epoch(state["epoch"])
                    self.sampler.resume(state["sampler"])  # checks it is this worker's part and seed
                    carried = self._carried_totals(state["partial"])
                inside = f", iteration {iteration}" if iteration else ""
                self.log(f"resumed from checkpoint {path} (epoch {state['epoch']}{inside}, step {state['step']})")
            else:
                self.log(f"no checkpoint in {self.store.folder}: starting from scratch")
        self.comm.broadcast("meta", [done])
        if done[2] > 0:  # inside an epoch: every worker goes on from its own totals (clipflow.train.totals)
            words = words_of(carried) if self.rank == 0 else torch.zeros(self.num_workers, FIELDS, WORDS)
            self.comm.broadcast("carried", [words])
            self.carried = Totals.from_words(words[self.rank])
        buffers = [b for b in self.model.buffers() if b.is_floating_point()]  # BatchNorm statistics
        self.comm.broadcast("buffers", buffers)
        t = self.recipe["train"]
        self.sync = self.comm.gradient_sync(  # takes rank 0's weights
            self.model,
            optimizer_settings(t, self.lr),
            no_decay_mults(self.model) if t["no_wd"] else None,
            t["clip_grad"],
        )
        self.forward = self.step_options.compiled(self.sync.module)  # the same parameters
        if self.rank == 0:
            self.log(
                f"back end {self.comm.backend}: gradients summed over {self.num_workers} workers "
                f"({self.comm.transport}, rank 0 on {self.device})"
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

    def _carried_totals(self, record: dict) -> list[Totals]:
        try:
            return from_checkpoint(record, self.num_workers)
        except ValueError as exc:
            raise ClipflowError(f"the checkpoint's epoch totals do not fit this run: {exc}") from None

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
        (clips, seconds, data seconds, compute seconds), the others' rows zero before the sum)."""
        rows = torch.zeros(self.num_workers, 4)  # float32, as every back end sums it
        rows[self.rank] = torch.tensor([float(v) for v in speed])
        totals = torch.cat([torch.tensor([mine.loss_sum, float(mine.correct), float(mine.count)]), rows.view(-1)])
        self.comm.all_sum("metrics", totals)
        workers = [
            {"rank": r, "clips_per_s": float(c / s) if s else 0.0, "data_time": float(d), "step_time": float(t)}
            for r, (c, s, d, t) in enumerate(totals[3:].view(self.num_workers, 4))
        ]
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

    def _save_best(self, epoch: int, val: dict) -> None:
        self.best_top1 = val["val_top1"]
        atomic_save({"model": self.model.state_dict(), "recipe": self.recipe, "epoch": epoch, **val}, self.best_path)
        # collected with best.pt, so its checksum is recorded too
        write_text_with_checksum(self.best_path.with_suffix(".json"), json.dumps({"epoch": epoch, **val}) + "\n")
        self.log(f"best val top-1 so far: {self.best_path} (epoch {epoch})")

    # -- the loop --------------------------------------------------------------------------------

    def _checkpoint(self, epoch: int, step: int, iteration: int = 0, partial: dict | None = None) -> Path:
        """Rank 0 saves; ``iteration`` > 0: inside ``epoch``, after that many iterations, with the sampler's
        position and the epoch's ``partial`` totals so far (every worker's, :func:`checkpoint_record`)."""
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.sync.optimizer_states(),
            "epoch": epoch,
            "step": step,
            "iteration": iteration,
            "schedule": vars(self.schedule),
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": np.random.get_state(),
                "python": random.getstate(),
                **({"cuda": torch.cuda.get_rng_state(self.device)} if self.device.type == "cuda" else {}),
            },
            "recipe": self.recipe,
            "facts": self.facts,  # the settings it was made with: a resume compares them (resume_check)
        }
        if iteration:
            state["sampler"] = self.sampler.state(iteration * self.batch_size)
            state["partial"] = partial
        path = self.store.save(state, epoch, iteration)
        self.log(f"checkpoint {path}")
        return path

    def _checkpoint_inside(self, epoch: int, step: int, iteration: int, mine: Totals) -> Path | None:
        """A checkpoint inside an epoch: rank 0 gathers every worker's totals so far (collective) and saves; its
        path on rank 0."""
        every = gather(self.comm.all_sum, "partial", mine, self.rank, self.num_workers)
        if self.rank == 0:
            return self._checkpoint(epoch, step, iteration, checkpoint_record(every))
        return None

    def _stop_on_notice(self, epoch: int, step: int, iteration: int, mine: Totals) -> None:
        """After every step (collective): when any worker got a notice, rank 0 saves a checkpoint inside the
        epoch, every worker waits for it, and StoppedOnNotice ends the run here (the worker exits RESUMABLE)."""
        if self.notice is None or not self.notice.agreed(self.comm):
            return
        path = self._checkpoint_inside(epoch, step, iteration, mine)
        self.comm.barrier()  # nobody leaves before the checkpoint is written
        stopped = StoppedOnNotice(epoch, iteration, path)
        if self.rank == 0:
            self.log(f"{stopped}; rerun the same command to go on")
        raise stopped

    def _append_history(self, record: dict, resumed_epoch: int) -> None:
        lines = []
        if self.history_path.exists():  # drop what an interrupted run logged after the checkpoint resumed from
            lines = [
                ln
                for ln in self.history_path.read_text().splitlines()
                if ln.strip() and json.loads(ln)["epoch"] <= resumed_epoch
            ]
        lines.append(json.dumps(record))
        write_text_with_checksum(self.history_path, "\n".join(lines) + "\n")

    def run(self) -> None:
        start_epoch, step, resume_iteration = self._resume_state()
        t = self.recipe["train"]
        # one loader for the run: its workers (if any) persist, and each index carries the dataset's epoch
        loader = make_loader(self.dataset, self.batch_size, self.sampler, t["loader_workers"], t["loader_prefetch"],
                             device=self.device)  # fmt: skip
        self.board = (
            TensorBoardScalars(self.paths.tensorboard, step) if self.paths.tensorboard and self.rank == 0 else None
        )
        try:
            for epoch in range(start_epoch + 1, self.epochs + 1):
                step = self._epoch(epoch, resume_iteration if epoch == start_epoch + 1 else 0, step, loader)
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

    def _epoch(self, epoch: int, first: int, step: int, loader) -> int:
        """Trains ``epoch`` from its iteration ``first`` (0, or where a checkpoint inside it stopped), validates
        and records it; returns the step count after it."""
        save_every = self.recipe["train"]["save_every_iters"]
        self.model.train()
        self.dataset.set_epoch(epoch)
        # a worker's part of this epoch, from where the checkpoint stopped (every worker did as many iterations)
        self.sampler.set_epoch(epoch)
        self.sampler.resume(self.sampler.state(first * self.batch_size))
        start = self.carried if first else Totals()
        totals = start
        data_time, step_time = 0.0, 0.0
        began = tick = time.perf_counter()
        with epoch_bar(epoch, self.epochs, self.iters_per_epoch, first, self.progress_s, self.rank == 0) as bar:
            for it, (*inputs, labels) in enumerate(loader, start=first):
                self.faults.check(epoch, it)
                inputs = [x.to(self.device, non_blocking=True) for x in inputs]
                labels = labels.to(self.device, non_blocking=True)
                loaded = time.perf_counter()
                lr = self.schedule(step)
                self.sync.set_learning_rate(lr)
                torch.manual_seed(step_seed(self.seed, self.rank, step))  # dropout's draws: the same after a resume
                logits = self.step_options.logits(self.forward, *(self.dataset.normalize(x) for x in inputs))
                loss = F.cross_entropy(logits, labels)
                loss.backward()  # the back end sums full buckets while backward goes on
                self.sync.synchronize()
                self.sync.step()
                self.model.zero_grad(set_to_none=True)
                step += 1
                batch_loss = loss.item()
                totals = totals.add(batch_loss, int((logits.argmax(1) == labels).sum()), len(labels))
                now = time.perf_counter()
                data_time, step_time, tick = data_time + loaded - tick, step_time + now - loaded, now
                bar.set_postfix_str(f"loss {totals.loss_sum / totals.count:.4f} lr {lr:.5f}", refresh=False)
                bar.update()
                if self.board:
                    self.board.step(step, batch_loss, lr)
                if save_every and (it + 1) % save_every == 0 and it + 1 < self.iters_per_epoch:
                    self._checkpoint_inside(epoch, step, it + 1, totals)
                if it + 1 < self.iters_per_epoch:  # after the last step the epoch ends first; then the next one
                    self._stop_on_notice(epoch, step, it + 1, totals)
        elapsed = time.perf_counter() - began
        speed = (totals.count - start.count, elapsed, data_time, step_time)  # this run's clips, not the carried ones
        loss_avg, acc, workers = self._global_metrics(totals, speed)
        val = self._validate() if self.eval_every and (epoch % self.eval_every == 0 or epoch == self.epochs) else {}
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
            if epoch % self.recipe["train"]["save_frequency"] == 0 or epoch == self.epochs:
                self._checkpoint(epoch, step)
        return step

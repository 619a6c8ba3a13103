"""The training loop a worker runs: data-parallel SGD with gradients summed on the parameter server.

Every worker builds the same model from the same seed, then takes rank 0's state
(fresh, or the newest checkpoint rank 0 can load) through the key-value store, so
only the launching node needs the checkpoint files. Gradients go to the servers in
buckets while backward runs (PSSync). With update_on_kvstore false the servers sum
them and every worker applies the same SGD update; with true the servers run that
update and the workers pull the new weights.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from clipflow.data.dataset import SlowFastClips
from clipflow.data.sampling import ClipSpec
from clipflow.data.splits import EpochSampler
from clipflow.data.transforms import TransformSpec
from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic
from clipflow.models import build_model
from clipflow.train.checkpoint import CheckpointStore, atomic_save
from clipflow.train.faults import FaultInjector
from clipflow.train.ps_sync import PSSync
from clipflow.train.schedule import Schedule, scaled_lr

# Key ranges on the parameter server, one per kind of tensor (PSSync's buckets start at 1,000,000).
STATE_KEYS = 100_000
MOMENTUM_KEYS = 200_000
META_KEY = 300_000
METRIC_KEY = 300_001


@dataclass(frozen=True)
class PSSettings:
    """How workers use the parameter server (launch settings, not part of a recipe)."""

    mode: str = "dist_sync"
    update_on_kvstore: bool = False  # True: servers run the optimizer; False: they sum, workers update
    compression: str = "none"  # or "2bit"
    threshold: float = 0.5


@dataclass(frozen=True)
class WorkerPaths:
    splits_dir: Path  # worker{rank}.lst files
    root: Path  # list paths are relative to it
    checkpoint_root: Path
    model_out: Path
    metrics_out: Path


def clip_spec(recipe: dict) -> ClipSpec:
    d = recipe["data"]
    return ClipSpec(
        d["new_length"],
        d["new_step"],
        d["num_segments"],
        d["fast_temporal_stride"],
        d["slow_temporal_stride"],
        d["temporal_jitter"],
    )


def transform_spec(recipe: dict) -> TransformSpec:
    d = recipe["data"]
    return TransformSpec(
        d["input_size"], tuple(d["scale_ratios"]), 1, d["random_flip"], tuple(d["mean"]), tuple(d["std"])
    )


def make_dataset(recipe: dict, list_path: Path, root: Path, mode: str, seed: int) -> SlowFastClips:
    d = recipe["data"]
    return SlowFastClips(
        list_path,
        root,
        clip_spec(recipe),
        transform_spec(recipe),
        d["new_width"],
        d["new_height"],
        mode,
        seed,
        recipe["model"]["num_classes"],
    )


def fingerprint(recipe: dict, num_workers: int, seed: int, ps: PSSettings, shard: Path) -> str:
    """Settings a checkpoint is valid for: resuming under others would mix two trainings."""
    settings = {"recipe": recipe, "workers": num_workers, "seed": seed, "ps": vars(ps)}
    blob = json.dumps(settings, sort_keys=True)
    digest = hashlib.sha256(blob.encode())
    digest.update(shard.read_bytes())
    return digest.hexdigest()[:16]


class Trainer:
    def __init__(self, kv: Any, recipe: dict, paths: WorkerPaths, seed: int, ps: PSSettings, log=print):
        self.kv, self.recipe, self.paths, self.seed, self.ps, self.log = kv, recipe, paths, seed, ps, log
        self.rank, self.num_workers = kv.rank, kv.num_workers
        t = recipe["train"]
        self.epochs, self.batch_size = t["epochs"], t["batch_size"]
        shard = paths.splits_dir / f"worker{self.rank}.lst"
        self.dataset = make_dataset(recipe, shard, paths.root, "train", seed)
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
        self.model = build_model(recipe["model"])
        self.sync: PSSync | None = None  # made once rank 0's state is known (_resume_state)
        run_id = fingerprint(recipe, self.num_workers, seed, ps, shard)
        self.store = CheckpointStore(paths.checkpoint_root / run_id, keep=t["keep_checkpoints"], log=log)
        self.history_path = self.store.folder / "metrics.jsonl"
        self.faults = FaultInjector(self.rank)
        if self.rank == 0:
            log(
                f"linear scaling rule: lr = base_lr {t['base_lr']} x global batch {global_batch} "
                f"({self.num_workers} workers x {self.batch_size}) / base_batch {t['base_batch']} = {self.lr:g}"
            )

    # -- state shared through the key-value store ------------------------------------------------

    def _resume_state(self) -> tuple[int, int]:
        """Rank 0 loads the newest checkpoint; every worker then receives rank 0's state. (epoch, step) done."""
        done = torch.zeros(2)
        optimizer_states: dict = {}
        if self.rank == 0:
            found = self.store.load_newest()
            if found:
                state, path = found
                self.model.load_state_dict(state["model"])
                optimizer_states = state["optimizer"]
                torch.set_rng_state(state["rng"]["torch"])
                np.random.set_state(state["rng"]["numpy"])
                random.setstate(state["rng"]["python"])
                done = torch.tensor([float(state["epoch"]), float(state["step"])])
                self.log(f"resumed from checkpoint {path} (epoch {state['epoch']}, step {state['step']})")
            else:
                self.log(f"no checkpoint in {self.store.folder}: starting from scratch")
        self._broadcast([META_KEY], [done])
        buffers = [b for b in self.model.buffers() if b.is_floating_point()]  # BatchNorm statistics
        self._broadcast(list(range(STATE_KEYS, STATE_KEYS + len(buffers))), buffers)
        t = self.recipe["train"]
        self.sync = PSSync(  # takes rank 0's weights
            self.model,
            self.kv,
            update_on_kvstore=self.ps.update_on_kvstore,
            optimizer={"learning_rate": self.lr, "momentum": t["momentum"], "wd": t["wd"],
                       "nesterov": t["nesterov"], "rescale_grad": 1.0 / self.num_workers},
        )  # fmt: skip
        if self.ps.compression != "none":
            self.kv.set_gradient_compression({"type": self.ps.compression, "threshold": self.ps.threshold},
                                             keys=self.sync.keys)  # fmt: skip
        if done[0] > 0:
            self._share_optimizer_states(optimizer_states)
        self.kv.init(METRIC_KEY, torch.zeros(3))
        return int(done[0]), int(done[1])

    def _share_optimizer_states(self, states: dict) -> None:
        """Rank 0's momentum buffers (from its checkpoint) to wherever the optimizer runs."""
        assert self.sync is not None
        if self.ps.update_on_kvstore:
            self.sync.load_optimizer_states(states)  # collective: rank 0 sends to the servers
            return
        buffers = [states[b.key].clone().float() if self.rank == 0 else torch.zeros(b.numel) for b in self.sync.buckets]
        self._broadcast(list(range(MOMENTUM_KEYS, MOMENTUM_KEYS + len(buffers))), buffers)
        self.sync.load_optimizer_states({b.key: buf for b, buf in zip(self.sync.buckets, buffers, strict=True)})

    def _broadcast(self, keys: list[int], tensors: list[torch.Tensor]) -> None:
        """Rank 0's tensors reach every worker, in place: one init (one barrier), then one pull."""
        if keys:
            self.kv.init(keys, tensors)
            self.kv.pull(keys, tensors)

    def _global_metrics(self, loss_sum: float, correct: int, count: int) -> tuple[float, float]:
        totals = torch.tensor([loss_sum, float(correct), float(count)])
        self.kv.pushpull([METRIC_KEY], [totals], [totals])
        return float(totals[0] / totals[2]), float(totals[1] / totals[2])

    # -- the loop --------------------------------------------------------------------------------

    def _checkpoint(self, epoch: int, step: int) -> None:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.sync.optimizer_states(),
            "epoch": epoch,
            "step": step,
            "schedule": vars(self.schedule),
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
            "recipe": self.recipe,
        }
        path = self.store.save(state, epoch)
        self.log(f"checkpoint {path}")

    def _append_history(self, record: dict, resumed_epoch: int) -> None:
        lines = []
        if self.history_path.exists():  # drop what an interrupted run logged after the checkpoint resumed from
            lines = [
                ln
                for ln in self.history_path.read_text().splitlines()
                if ln.strip() and json.loads(ln)["epoch"] <= resumed_epoch
            ]
        lines.append(json.dumps(record))
        write_text_atomic(self.history_path, "\n".join(lines) + "\n")

    def run(self) -> None:
        start_epoch, step = self._resume_state()
        for epoch in range(start_epoch + 1, self.epochs + 1):
            self.model.train()
            self.dataset.set_epoch(epoch)
            self.sampler.set_epoch(epoch)
            loader = DataLoader(
                self.dataset,
                batch_size=self.batch_size,
                sampler=self.sampler,
                drop_last=True,
                num_workers=self.recipe["train"]["loader_workers"],
            )
            loss_sum, correct, count, data_time, step_time = 0.0, 0, 0, 0.0, 0.0
            began = tick = time.perf_counter()
            for it, (slow, fast, labels) in enumerate(loader):
                self.faults.check(epoch, it)
                loaded = time.perf_counter()
                lr = self.schedule(step)
                self.sync.set_learning_rate(lr)
                logits = self.model(slow, fast)
                loss = F.cross_entropy(logits, labels)
                loss.backward()  # full buckets are pushed from the hooks while backward goes on
                self.sync.synchronize()
                self.sync.step()
                self.model.zero_grad(set_to_none=True)
                step += 1
                loss_sum += loss.item() * len(labels)
                correct += int((logits.argmax(1) == labels).sum())
                count += len(labels)
                now = time.perf_counter()
                data_time, step_time, tick = data_time + loaded - tick, step_time + now - loaded, now
                if self.rank == 0 and (it + 1) % 10 == 0:
                    self.log(f"epoch {epoch} [{it + 1}/{self.iters_per_epoch}] loss {loss_sum / count:.4f} lr {lr:.5f}")
            elapsed = time.perf_counter() - began
            loss_avg, acc = self._global_metrics(loss_sum, correct, count)
            if self.rank == 0:
                record = {
                    "epoch": epoch,
                    "step": step,
                    "loss": loss_avg,
                    "train_top1": acc,
                    "lr": lr,
                    "clips_per_s": count * self.num_workers / elapsed,
                    "data_time": data_time,
                    "step_time": step_time,
                    "epoch_time": elapsed,
                }
                self.log(
                    f"epoch {epoch}/{self.epochs} loss {loss_avg:.4f} train top-1 {acc:.3f} "
                    f"{record['clips_per_s']:.1f} clips/s (data {data_time:.1f} s, compute {step_time:.1f} s)"
                )
                self._append_history(record, epoch - 1)
                if epoch % self.recipe["train"]["save_frequency"] == 0 or epoch == self.epochs:
                    self._checkpoint(epoch, step)
        if self.rank == 0:
            atomic_save(
                {"model": self.model.state_dict(), "recipe": self.recipe, "epoch": self.epochs}, self.paths.model_out
            )
            self.paths.metrics_out.parent.mkdir(parents=True, exist_ok=True)
            self.paths.metrics_out.write_text(self.history_path.read_text())
            self.log(f"final model {self.paths.model_out}")
        self.kv.barrier()

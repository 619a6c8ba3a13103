"""Precise BN (clipflow.train.precise_bn, the recipe's train.precise_bn_batches): the running statistics it sets
equal the population statistics of the frozen network's BatchNorm inputs, computed here directly with plain torch
over every batch every worker ran: one worker in this process, two as real processes summing over torch.distributed
(gloo, the trainer's DDPComm). The trainer's use of it, on the parameter server, is checked through a launch whose
workers run one torch thread each, as the oracle's forward does: another thread count sums convolutions in another
order, and the deepest layers, normalising 2-clip batches of 1x1 frames, magnify that to 1e-5.

Tolerance: both sides see the same float32 activations (the same forward on the same batches); the oracle sums
them in float64. Precise BN takes each batch's mean and variance in float32 (two passes), sums batches in float64,
sends float32 sums about the common mean (2**-24 relative each, two workers) and stores float32. Its mean is then
off by a few float32 ulps of |mean| + spread (storing it alone costs one), its variance by a few ulps times the
layer's |mean| / spread (the centring in float32; up to 70 here: the BatchNorm1d's inputs): measured at most
9e-8 and 6e-7. Bounds of 1e-6 and 1e-5 leave room for other roundings, none for the batches' variances averaged
instead of the population's (PySlowFast's fvcore; here 1e-3 off and more)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe
from clipflow.train.precise_bn import batch_order, bn_layers, recompute

LIMIT = 4  # batches asked of each worker
BATCHES = {0: [4, 4, 4, 4, 4], 1: [4, 4, 2]}  # clips per batch: worker 0 has more than LIMIT, worker 1 fewer


class Tiny(nn.Module):
    """Two BatchNorm3d layers and a BatchNorm1d; a dropout that eval mode turns off."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv3d(3, 4, 3, padding=1), nn.BatchNorm3d(4)
        self.conv2, self.bn2 = nn.Conv3d(4, 5, (1, 3, 3)), nn.BatchNorm3d(5, momentum=None)
        self.fc, self.bn3, self.drop = nn.Linear(5, 6), nn.BatchNorm1d(6, momentum=0.3), nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.drop(self.bn3(self.fc(self.drop(x.mean(dim=(2, 3, 4))))))


def tiny_model() -> Tiny:
    torch.manual_seed(0)
    model = Tiny()
    model.train()
    return model


def batches_of(rank: int) -> list[torch.Tensor]:
    """Worker ``rank``'s clips (N, 3, 2, 5, 5), mean 20 times their spread: a one-pass E[x^2] - E[x]^2 in float32
    would lose the variance's digits."""
    g = torch.Generator().manual_seed(100 + rank)
    return [20.0 + torch.randn(n, 3, 2, 5, 5, generator=g) for n in BATCHES[rank]]


def population(
    model: nn.Module, batches: list[torch.Tensor], batchwise: bool = False
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The oracle: each BatchNorm layer's input over every batch, the frozen network running each batch as precise
    BN does (BatchNorm normalising with the batch's statistics, dropout off), mean and unbiased variance per channel
    over all its elements, in float64. ``batchwise``: the variance as the mean of the batches' unbiased variances
    (PySlowFast's fvcore), which leaves out the spread of the batch means."""
    model = _copy(model)
    seen: dict[int, list[torch.Tensor]] = {}
    layers = bn_layers(model)
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda _m, args, i=i: seen.setdefault(i, []).append(args[0].detach()))
    model.eval()
    for layer in layers:
        layer.train()
    with torch.no_grad():
        for x in batches:
            model(x)
    out = []
    for i in range(len(layers)):
        x = torch.cat(seen[i]).double().transpose(0, 1).reshape(layers[i].num_features, -1)
        if batchwise:
            each = [b.double().transpose(0, 1).reshape(layers[i].num_features, -1) for b in seen[i]]
            out.append((x.mean(dim=1), torch.stack([b.var(dim=1, correction=1) for b in each]).mean(dim=0)))
        else:
            out.append((x.mean(dim=1), x.var(dim=1, correction=1)))
    return out


def _copy(model: nn.Module) -> nn.Module:
    twin = Tiny()
    twin.load_state_dict(model.state_dict())
    return twin


def worst(model: nn.Module, expected: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
    """The largest differences of the model's running statistics to ``expected``: the mean's relative to
    |mean| + spread, the variance's relative to the variance."""
    mean_diff = var_diff = 0.0
    for layer, (mean, var) in zip(bn_layers(model), expected, strict=True):
        scale = mean.abs() + var.sqrt()
        mean_diff = max(mean_diff, float(((layer.running_mean.double() - mean).abs() / scale).max()))
        var_diff = max(var_diff, float(((layer.running_var.double() - var).abs() / var).max()))
    return mean_diff, var_diff


def close(diff: tuple[float, float]) -> bool:
    """Within the module's tolerance (its docstring)."""
    return diff[0] < 1e-6 and diff[1] < 1e-5


def test_one_worker_sets_the_population_statistics_with_the_weights_frozen_and_everything_put_back():
    model = tiny_model()
    weights = {k: v.clone() for k, v in model.state_dict().items() if "running" not in k}
    tracked = [layer.num_batches_tracked.clone() for layer in bn_layers(model)]
    sums: list[str] = []
    done = recompute(model, ((x,) for x in batches_of(1)), model, lambda name, t: sums.append(name), LIMIT)

    diff = worst(model, population(model, batches_of(1)))
    assert close(diff), diff
    assert sums == ["precise_bn_mean", "precise_bn_var"]  # one collective each round, every layer in it
    assert (done.batches, done.total_batches, done.clips, done.layers) == (3, 3, 10, 3)
    assert "over 3 batches per worker (train.precise_bn_batches 4: the loader had only 3)" in done.describe(1)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())  # frozen
    assert all(m.training for m in model.modules())  # the mode, momentum and counts as they were
    assert [layer.momentum for layer in bn_layers(model)] == [0.1, None, 0.3]
    assert all(torch.equal(a, b.num_batches_tracked) for a, b in zip(tracked, bn_layers(model), strict=True))
    assert worst(model, population(model, batches_of(1), batchwise=True))[1] > 1e-3  # the oracle tells them apart


def test_a_failing_batch_leaves_the_statistics_mode_and_momentum_as_they_were():
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def broken(x):
        model(x)
        raise ClipflowError("clip 3 unreadable")

    with pytest.raises(ClipflowError, match="clip 3 unreadable"):
        recompute(model, ((x,) for x in batches_of(0)), broken, lambda name, t: None, LIMIT)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert all(m.training for m in model.modules()) and bn_layers(model)[1].momentum is None


def test_the_batch_order_is_the_same_for_the_same_key_and_takes_full_batches_up_to_the_limit():
    assert batch_order(10, 3, 200, (0, 1, 2)) == batch_order(10, 3, 200, (0, 1, 2))
    assert len(batch_order(10, 3, 200, (0, 1, 2))) == 9 and len(batch_order(10, 3, 2, (0, 1, 2))) == 6
    assert sorted(batch_order(10, 1, 200, (0, 1, 2))) == list(range(10))
    assert batch_order(10, 3, 200, (0, 1, 2)) != batch_order(10, 3, 200, (0, 1, 3))


@pytest.mark.parametrize(("value", "why"), [(-1, "-1 is less than the minimum of 0"),
                                            (2.5, "2.5 is not of type 'integer'"),
                                            ("200", "'200' is not of type 'integer'")])  # fmt: skip
def test_a_bad_setting_is_refused_by_name(value, why):
    with pytest.raises(ClipflowError) as err:
        load_recipe("slowfast_tiny_synthetic", {"train": {"precise_bn_batches": value}})
    assert f"train.precise_bn_batches: {why}" in str(err.value)
    assert load_recipe("slowfast_tiny_synthetic")["train"]["precise_bn_batches"] == 0  # off unless asked


def test_two_workers_over_torch_distributed_set_the_population_statistics_of_both_workers_batches(tmp_path):
    from helpers import free_port, python_env

    port = free_port()
    began = time.perf_counter()
    workers = [
        subprocess.Popen(
            [sys.executable, __file__, str(rank), str(port), str(tmp_path)],
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [w.communicate(timeout=120)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    every = batches_of(0)[:LIMIT] + batches_of(1)  # worker 0 stops at LIMIT; worker 1 has 3
    expected = population(tiny_model(), every)
    stats = [torch.load(tmp_path / f"rank{rank}.pt") for rank in (0, 1)]
    for name in stats[0]:
        assert torch.equal(stats[0][name], stats[1][name]), name  # every worker the same statistics
    model = tiny_model()
    model.load_state_dict(stats[0], strict=False)
    diff = worst(model, expected)
    assert close(diff), diff
    done = json.loads((tmp_path / "rank0.json").read_text())
    assert done == {"batches": 4, "total_batches": 7, "clips": 26, "layers": 3}
    print(
        f"2 workers: max difference: mean {diff[0]:.1e}, variance {diff[1]:.1e}, in {time.perf_counter() - began:.1f} s"
    )


def _worker(rank: int, port: int, out: Path) -> None:
    """One of the two processes of the test above: its batches' precise BN, summed over the DDP back end."""
    from clipflow.train.comm import DDPComm, DDPConfig

    torch.set_num_threads(1)
    model = tiny_model()
    with DDPComm(DDPConfig(rank, 2, "127.0.0.1", port, 60.0)) as comm:
        done = recompute(model, ((x,) for x in batches_of(rank)), model, comm.all_sum, LIMIT)
    torch.save({k: v for k, v in model.state_dict().items() if "running" in k or "tracked" in k},
               out / f"rank{rank}.pt")  # fmt: skip
    facts = {"batches": done.batches, "total_batches": done.total_batches, "clips": done.clips, "layers": done.layers}
    (out / f"rank{rank}.json").write_text(json.dumps(facts))


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))


def test_a_trained_model_ends_with_the_population_statistics_of_both_workers_batches(tmp_path, tiny_videos):
    """The trainer on the parameter server, 2 workers of 2 batches each, asked for 3, 2 epochs: the epoch-1
    checkpoint (no validation then) and the final model hold the statistics of the batches each worker ran
    (batch_order, the epoch's draws), through that epoch's weights, as PySlowFast recomputes them at every
    checkpoint and evaluation epoch."""
    from launch_helpers import TINY, launch, two_splits

    splits = two_splits(tmp_path, tiny_videos)
    overrides = {**TINY, "train": {**TINY["train"], "epochs": 2, "precise_bn_batches": 3}}
    done = launch(tmp_path, tiny_videos, splits, overrides=overrides, env_extra={"CLIPFLOW_TORCH_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    said = "precise BN: running mean and variance of {} BatchNorm layers recomputed over 2 batches per worker"
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["precise_bn_batches"] for r in records] == [2, 2] and "val_top1" not in records[0]
    assert json.loads((tmp_path / "ckpt" / "run.json").read_text())["precise_bn_batches"] == 3
    assert (
        "(train.precise_bn_batches 3: the loader had only 2), 4 over 2 workers (8 clips)" in done.stdout + done.stderr
    )
    for epoch, saved in ((1, tmp_path / "ckpt" / "epoch_0001.pt"), (2, tmp_path / "model.pt")):
        state = torch.load(saved, weights_only=False)
        diff, layers = population_difference(state["model"], state["recipe"], splits, tiny_videos, epoch)
        assert said.format(layers) in done.stdout + done.stderr
        assert close(diff), (epoch, diff)
        print(f"trainer, 2 workers, epoch {epoch}: max difference: mean {diff[0]:.1e}, variance {diff[1]:.1e}")


def population_difference(weights: dict, recipe: dict, splits, videos, epoch: int) -> tuple[tuple[float, float], int]:
    """The largest relative differences of ``weights``' running mean and variance from the population statistics
    of the batches both workers ran for precise BN after ``epoch``, through those weights; and the layers' count."""
    from clipflow.data.build import build_dataset
    from clipflow.data.loader import make_loader
    from clipflow.models.builder import build_model

    model = build_model(recipe["model"])
    model.load_state_dict(weights)
    clips = []
    for rank in (0, 1):
        dataset = build_dataset(recipe, splits / f"worker{rank}.lst", videos, "train", 0, keys=list(range(4)))
        dataset.set_epoch(epoch)
        loader = make_loader(dataset, 2, batch_order(4, 2, 3, (0, rank, epoch)))
        clips += [[dataset.normalize(x) for x in batch[:-1]] for batch in loader]
    seen: dict[int, list[torch.Tensor]] = {}
    layers = bn_layers(build_model(recipe["model"]))
    frozen = build_model(recipe["model"])
    frozen.load_state_dict(weights)
    for i, layer in enumerate(bn_layers(frozen)):
        layer.register_forward_pre_hook(lambda _m, args, i=i: seen.setdefault(i, []).append(args[0].detach()))
    frozen.eval()
    for layer in bn_layers(frozen):
        layer.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each worker ran (CLIPFLOW_TORCH_THREADS 1): the same sums, the same activations
    try:
        with torch.no_grad():
            for inputs in clips:
                frozen(*inputs)
    finally:
        torch.set_num_threads(threads)
    diff = (0.0, 0.0)
    for i, layer in enumerate(bn_layers(model)):
        x = torch.cat(seen[i]).double().transpose(0, 1).reshape(layers[i].num_features, -1)
        mean, var = x.mean(dim=1), x.var(dim=1, correction=1)
        diff = (
            max(diff[0], float(((layer.running_mean.double() - mean).abs() / (mean.abs() + var.sqrt())).max())),
            max(diff[1], float(((layer.running_var.double() - var).abs() / var).max())),
        )
    return diff, len(layers)

"""The training loader's size (clipflow.train.loader_sizing): the rule on given rates, the measurement that leaves
training's random streams and the dataset as they were, given numbers kept, and the settings' checks. A training
run's choice, printed and recorded, is checked in tests/train/test_launch.py (auto) and tests/data/test_loader.py
(given)."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import python_env
from launch_helpers import TINY

from clipflow.data.loader import make_loader
from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe
from clipflow.train.loader_sizing import LoaderChoice, choose, size_loader


@pytest.mark.parametrize(
    ("decode_s", "step_s", "cores", "workers", "prefetch"),
    [
        (0.004, 0.200, 4, 0, 2),  # 2% of the two: decoded in the training process
        (0.052, 0.172, 1, 1, 2),  # the embedded default on this machine: one process, idle most of its time
        (0.300, 0.200, 8, 3, 2),  # 2 x 1.5 steps: three processes, each decoding half its time
        (0.100, 0.100, 1, 1, 3),  # wants 2, capped at 1 core: busy all the time, one batch deeper
        (0.600, 0.200, 1, 1, 4),  # far beyond the cap: the deepest prefetch
        (0.600, 0.200, 2, 2, 4),  # wants 6, capped at 2
    ],
)
def test_the_rule_on_given_rates(decode_s, step_s, cores, workers, prefetch):
    chosen = choose(decode_s, step_s, 8, cores)
    assert (chosen.workers, chosen.prefetch, chosen.decode_threads, chosen.auto) == (workers, prefetch, 1, True)
    assert chosen.capped == (cores == workers and workers < np.ceil(2 * decode_s / step_s))


def test_the_choice_in_words_and_through_the_trainers_float32_sum():
    assert choose(0.052, 0.180, 8, 2).describe() == (
        "decode 52 ms a batch of 8, step 180 ms: 1 loader process, prefetch 2, 1 decode thread (auto)"
    )
    assert choose(0.6, 0.2, 8, 1).describe() == (
        "decode 600 ms a batch of 8, step 200 ms: 1 loader process (capped at this worker's 1 core), prefetch 4, "
        "1 decode thread (auto)"
    )
    assert choose(0.004, 0.2, 8, 4).describe() == (
        "decode 4 ms a batch of 8, step 200 ms: in the training process (2% of the two), 1 decode thread (auto)"
    )
    assert (
        LoaderChoice(3, 5).describe()
        == "3 loader processes, prefetch 5, 1 decode thread (train.loader_workers 3, as given)"
    )
    for choice in (choose(0.052, 0.180, 8, 2), LoaderChoice(0, 2)):
        summed = torch.tensor(choice.words()).tolist()  # as _global_metrics carries it
        back = LoaderChoice.from_words(summed)
        assert back.describe() == choice.describe() and LoaderChoice.from_record(back.record()) == back
    assert LoaderChoice.from_record({"workers": 2, "prefetch": 2, "later_key": 1}) == LoaderChoice(2, 2)


class Counted(torch.utils.data.Dataset):
    """Items made from the index alone, counting what was read and at which epoch."""

    def __init__(self) -> None:
        self.epoch, self.read = 3, []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return 5

    def __getitem__(self, index: int):
        self.read.append((self.epoch, index))
        return torch.full((3, 8, 32, 32), float(index)), torch.zeros(3, 2, 32, 32), index % 4


def test_measuring_leaves_every_random_stream_and_the_dataset_as_they_were(monkeypatch):
    def time_step(recipe: dict, bound_s: float) -> float:  # as the real one: a model of its own, random clips
        torch.nn.Linear(4, 4)
        torch.randn(2, 4)
        np.random.rand()
        random.random()
        return 0.25

    monkeypatch.setattr("clipflow.models.step_timing.time_step", time_step)
    recipe = load_recipe("slowfast_tiny_synthetic", {**TINY, "train": {**TINY["train"], "loader_workers": "auto"}})
    dataset = Counted()
    torch.manual_seed(5)
    np.random.seed(5)
    random.seed(5)
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    threads = torch.get_num_threads()
    chosen = size_loader(recipe["train"], dataset, recipe, cores=2)
    assert torch.equal(torch.get_rng_state(), states[0]) and np.array_equal(np.random.get_state()[1], states[1])
    assert random.getstate() == states[2] and torch.get_num_threads() == threads
    assert dataset.epoch == 3 and dataset.read == [(3, i % 5) for i in range(6)]  # 3 batches of 2, wrapped
    assert chosen.auto and chosen.decode_s > 0 and chosen.step_s == 0.25 and chosen.batch == 2 and chosen.cores == 2
    assert chosen == choose(chosen.decode_s, 0.25, 2, 2)
    given = size_loader({**recipe["train"], "loader_prefetch": 3}, dataset, recipe, cores=2)
    assert (given.workers, given.prefetch, given.auto) == (chosen.workers, 3, True)


def test_given_numbers_are_used_as_given_and_auto_outside_training_is_in_process():
    train = {"loader_workers": 2, "loader_prefetch": "auto", "batch_size": 4}
    assert size_loader(train, None, {}) == LoaderChoice(2, 2)  # nothing measured: no dataset, no model needed
    assert size_loader({**train, "loader_workers": 0, "loader_prefetch": 6}, None, {}) == LoaderChoice(0, 6)
    evaluation = make_loader(Counted(), 2, workers="auto", prefetch="auto")  # evaluation passes the recipe's
    assert evaluation.num_workers == 0
    with pytest.raises(ClipflowError, match=r"train.loader_workers must be auto or an integer >= 0, got 'many'"):
        make_loader(Counted(), 2, workers="many")


def test_the_recipe_takes_auto_or_a_whole_number():
    assert load_recipe("slowfast_tiny_synthetic")["train"]["loader_workers"] == "auto"
    assert load_recipe("slowfast_tiny_synthetic", {"train": {"loader_workers": 0}})["train"]["loader_workers"] == 0
    for bad in ("many", -1, 1.5, True):
        with pytest.raises(ClipflowError) as err:
            load_recipe("slowfast_tiny_synthetic", {"train": {"loader_workers": bad}})
        assert str(err.value) == (
            f"recipe slowfast_tiny_synthetic.yaml with overrides: train.loader_workers: {bad!r} is not valid under "
            "any of the given schemas; give auto (sized from measured rates) or a whole number >= 0 (0: in the "
            "training process)"
        )
    with pytest.raises(ClipflowError, match=r"train.loader_prefetch: 0 is not valid .*; give auto or a whole number"):
        load_recipe("slowfast_tiny_synthetic", {"train": {"loader_prefetch": 0}})


ON_ONE_CPU = """
import os
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
from clipflow.train.loader_sizing import worker_cores
from clipflow.train.worker import set_torch_threads
import torch
print(set_torch_threads(), torch.get_num_threads(), worker_cores())
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to run on fewer")
def test_a_worker_allowed_one_cpu_of_several_computes_and_sizes_its_loader_on_one():
    """A Slurm job's or a container's CPU set, not the host's CPU count, is what a worker's torch threads and its
    loader share: more threads than CPUs would slow every step."""
    env = {k: v for k, v in python_env().items() if k != "CLIPFLOW_TORCH_THREADS"}
    done = subprocess.run([sys.executable, "-c", ON_ONE_CPU], capture_output=True, text=True,
                          env={**env, "CLIPFLOW_WORKERS_ON_HOST": "1"}, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "1"]


def test_a_multigrid_epochs_loader_is_the_rules_for_its_clips_a_step():
    """clipflow.train.loader_sizing.for_clips: decoding grows with the clips a step, the step stays; a given prefetch
    and a given choice are kept."""
    from clipflow.train.loader_sizing import for_clips

    measured = choose(0.040, 0.200, 8, 4)  # 8 clips: 1 process, prefetch 2
    assert for_clips(measured, 8, "auto") == measured
    assert for_clips(measured, 64, "auto") == choose(0.320, 0.200, 64, 4)  # 8 x the clips: 4 processes (capped)
    assert (for_clips(measured, 64, "auto").workers, for_clips(measured, 64, "auto").prefetch) == (4, 2)
    assert for_clips(measured, 2, "auto").workers == 0  # 10 ms against 200: in the training process
    assert for_clips(measured, 64, 3).prefetch == 3
    given = LoaderChoice(2, 3)
    assert for_clips(given, 64, "auto") is given

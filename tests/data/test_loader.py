"""clipflow.data.loader on real videos and real worker processes: the same clips whatever the workers,
new clips every epoch, the sampler's order, a worker's error as its own message."""

from __future__ import annotations

import json
import os
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from clipflow.data.dataset import SlowFastClips
from clipflow.data.loader import make_loader, pins
from clipflow.data.sampling import ClipSpec
from clipflow.data.splits import EpochSampler
from clipflow.data.transforms import TransformSpec
from clipflow.errors import ClipflowError

VIDEOS, FRAMES, WIDTH, HEIGHT = 6, 40, 64, 48
CLIP = ClipSpec(new_length=8, new_step=1, num_segments=1, fast_temporal_stride=2, slow_temporal_stride=4)
TRANSFORM = TransformSpec(input_size=24, scale_ratios=(1.0, 0.8))


def write_video(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.codec_context.gop_size = 16
        for _ in range(FRAMES):
            frame = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        out.mux(stream.encode())


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    """VIDEOS random-noise videos; in the list, video i has label i, so a batch's labels are its indices."""
    root = tmp_path_factory.mktemp("loader_videos")
    for i in range(VIDEOS):
        write_video(root / f"v{i}.mp4", i)
    (root / "train.lst").write_text("".join(f"v{i}.mp4 {FRAMES} {i}\n" for i in range(VIDEOS)))
    return root


def clips(root: Path, list_name: str = "train.lst") -> SlowFastClips:
    return SlowFastClips(root / list_name, root, CLIP, TRANSFORM, WIDTH, HEIGHT, "train", seed=3)


def epoch_batches(loader, dataset, sampler, epoch: int) -> list[tuple[torch.Tensor, ...]]:
    dataset.set_epoch(epoch)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    return [tuple(batch) for batch in loader]


def same(a: list[tuple[torch.Tensor, ...]], b: list[tuple[torch.Tensor, ...]]) -> bool:
    pairs = zip(a, b, strict=True) if len(a) == len(b) else []
    return len(a) == len(b) and all(torch.equal(x, y) for p, q in pairs for x, y in zip(p, q, strict=True))


def test_two_workers_give_bitwise_the_clips_of_the_main_process_every_epoch(videos):
    dataset = clips(videos)
    sampler = EpochSampler(len(dataset), seed=3, limit=VIDEOS)
    inline = make_loader(dataset, 2, sampler, workers=0)
    workers = make_loader(dataset, 2, sampler, workers=2, prefetch=2)  # persistent: one set of workers for both
    rng_before = torch.get_rng_state()
    # bitwise on any CPU: the same code on the same machine; a worker's torch thread count changes no pixel (the
    # uint8 resize sums nothing across threads)
    for epoch in (1, 2):
        expected = epoch_batches(inline, dataset, sampler, epoch)
        got = epoch_batches(workers, dataset, sampler, epoch)
        assert len(got) == VIDEOS // 2 and same(got, expected), f"epoch {epoch}"
        direct = [dataset[i] for i in sampler]  # and what the dataset gives item by item
        assert all(torch.equal(got[k // 2][0][k % 2], direct[k][0]) for k in range(VIDEOS))
        assert all(torch.equal(got[k // 2][1][k % 2], direct[k][1]) for k in range(VIDEOS))
        for batches in (got, expected):  # clips stay uint8 in (N, T, H, W, C) memory: no transpose
            for pathway in batches[0][:2]:
                assert pathway.dtype == torch.uint8 and pathway.is_contiguous(memory_format=torch.channels_last_3d)
    assert torch.equal(torch.get_rng_state(), rng_before), "iterating a loader drew from the global torch RNG"


def test_a_new_epoch_gives_new_clips_in_the_main_process_and_in_persistent_workers(videos):
    dataset = clips(videos)
    order = list(range(VIDEOS))  # a fixed order: any change comes from the dataset's epoch
    for workers in (0, 2):
        loader = make_loader(dataset, 3, order, workers=workers)
        first, second, again = (epoch_batches(loader, dataset, order, e) for e in (1, 2, 1))
        fast_1, fast_2 = torch.cat([b[1] for b in first]), torch.cat([b[1] for b in second])
        differ = [not torch.equal(fast_1[i], fast_2[i]) for i in range(VIDEOS)]
        assert all(differ), f"workers={workers}: clips repeated across epochs: {differ}"
        assert same(first, again), f"workers={workers}: epoch 1 is not reproducible"
        assert [int(x) for b in first for x in b[2]] == order


def test_the_loader_gives_exactly_the_samplers_indices(videos):
    dataset = clips(videos)
    sampler = EpochSampler(len(dataset), seed=5, limit=4)  # 4 of the 6, in the epoch's shuffled order
    for workers in (0, 2):
        loader = make_loader(dataset, 2, sampler, workers=workers)
        for epoch in (1, 2, 3):
            labels = [int(x) for b in epoch_batches(loader, dataset, sampler, epoch) for x in b[2]]
            assert labels == list(sampler), (workers, epoch)  # label i is video i
        sampler.resume({"epoch": 3, "position": 2, "length": VIDEOS, "seed": 5})  # the rest of epoch 3
        rest = [int(x) for b in loader for x in b[2]]
        assert rest == list(sampler) and len(rest) == 2
    odd = make_loader(dataset, 4, list(range(VIDEOS)), workers=2)  # 6 = 4 + 2: the short batch is dropped
    assert [len(b[2]) for b in epoch_batches(odd, dataset, range(VIDEOS), 1)] == [4]
    kept = make_loader(dataset, 4, list(range(VIDEOS)), workers=2, drop_last=False)
    assert [len(b[2]) for b in epoch_batches(kept, dataset, range(VIDEOS), 1)] == [4, 2]


def test_a_missing_video_in_a_worker_raises_its_own_message(videos):
    lines = (videos / "train.lst").read_text().splitlines()
    lines[3] = f"gone.mp4 {FRAMES} 3"
    (videos / "broken.lst").write_text("\n".join(lines) + "\n")
    dataset = clips(videos, "broken.lst")
    expected = f"video {videos}/gone.mp4 (listed in {videos}/broken.lst line 4) does not exist"
    for workers in (0, 2):
        loader = make_loader(dataset, 2, list(range(VIDEOS)), workers=workers)
        with pytest.raises(ClipflowError) as caught:
            epoch_batches(loader, dataset, range(VIDEOS), 1)
        message = str(caught.value)
        assert message.startswith(expected), message
        assert "\n" not in message and "Traceback" not in message and "worker process" not in message


class Probe(Dataset):
    """Item i: (i, the epoch the item was loaded in, the process that loaded it)."""

    def __init__(self) -> None:
        self.epoch = 0

    def __len__(self) -> int:
        return 8

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __getitem__(self, index: int) -> tuple[int, int, int, int]:
        return index, self.epoch, os.getpid(), torch.get_num_threads()


def test_persistent_workers_see_each_epoch_and_run_one_thread_each():
    probe = Probe()
    loader = make_loader(probe, 2, list(range(8)), workers=2)
    seen = []
    for epoch in (1, 2, 3):
        probe.set_epoch(epoch)
        batches = list(loader)
        assert [int(i) for b in batches for i in b[0]] == list(range(8))
        assert {int(e) for b in batches for e in b[1]} == {epoch}
        assert {int(t) for b in batches for t in b[3]} == {1}
        seen.append({int(p) for b in batches for p in b[2]})
    assert len(seen[0]) == 2 and seen[0] == seen[1] == seen[2] and os.getpid() not in seen[0]
    fresh = make_loader(probe, 2, list(range(8)), workers=2, persistent=False)
    assert {int(e) for b in fresh for e in b[1]} == {3}


def test_pinned_memory_only_for_a_cuda_device_and_bad_settings_fail(videos):
    dataset = clips(videos)
    assert pins("cuda") and pins(torch.device("cuda:1")) and not pins("cpu") and not pins(None)
    assert make_loader(dataset, 2, workers=2, device="cuda").pin_memory
    assert not make_loader(dataset, 2, workers=2, device="cpu").pin_memory
    assert not make_loader(dataset, 2).pin_memory
    for bad in ({"workers": -1}, {"workers": 1.5}, {"workers": 2, "prefetch": 0}):
        with pytest.raises(ClipflowError):
            make_loader(dataset, 2, **bad)


def test_training_with_two_loader_workers_runs_every_epoch(tmp_path, tiny_videos):
    from launch_helpers import TINY, launch, two_splits

    splits = two_splits(tmp_path, tiny_videos)
    overrides = {**TINY, "train": {**TINY["train"], "epochs": 2, "loader_workers": 2}}
    done = launch(tmp_path, tiny_videos, splits, overrides=overrides)
    assert done.returncode == 0, done.stdout + done.stderr
    history = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2] and history[-1]["step"] == 4
    given = "2 loader processes, prefetch 2, 1 decode thread (train.loader_workers 2, as given)"
    assert all(f"[worker {r} localhost] loader: {given}" in done.stdout for r in (0, 1)), done.stdout
    assert [w["loader"]["workers"] for w in history[-1]["workers"]] == [2, 2]

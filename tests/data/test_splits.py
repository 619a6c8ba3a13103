"""Split lists (wrap or drop) and the per-epoch sampler with a resumable position."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from clipflow.data.listfile import VideoEntry
from clipflow.data.splits import EpochSampler, epoch_order, split_entries
from clipflow.errors import ClipflowError


def _entries(size: int) -> list[VideoEntry]:
    return [VideoEntry(f"v{i}.mp4", i % 3, 10) for i in range(size)]


@pytest.mark.parametrize("workers", range(1, 9))
@pytest.mark.parametrize("size", [13, 50, 101])
def test_drop_gives_equal_parts_without_repeats(workers: int, size: int) -> None:
    parts = split_entries(_entries(size), workers, seed=7, fill="drop")
    assert {len(p) for p in parts} == {size // workers}
    used = [e.path for p in parts for e in p]
    assert len(used) == len(set(used)) == size - size % workers


@pytest.mark.parametrize("workers", range(1, 9))
def test_wrap_and_drop_share_the_shuffle(workers: int) -> None:
    wrap = split_entries(_entries(29), workers, seed=3, fill="wrap")
    drop = split_entries(_entries(29), workers, seed=3, fill="drop")
    flat_wrap = [e.path for p in wrap for e in p]
    assert [e.path for p in drop for e in p] == flat_wrap[: len(drop[0]) * workers]


def test_bad_fill_is_named() -> None:
    with pytest.raises(ClipflowError, match="split fill must be one of wrap, drop, not 'pad'"):
        split_entries(_entries(5), 2, 0, fill="pad")


def test_a_resumed_epoch_continues_exactly() -> None:
    sampler = EpochSampler(length=23, seed=5, limit=20)  # 5 batches of 4 out of 23
    sampler.set_epoch(3)
    full = list(sampler)
    assert full == epoch_order(23, 5, 3)[:20].tolist() and len(full) == len(set(full)) == 20
    seen = []
    for batch in DataLoader(range(23), batch_size=4, sampler=sampler):
        seen += batch.tolist()
        if len(seen) == 8:
            state = sampler.state(consumed=8)  # what a checkpoint after 2 steps keeps
            break
    resumed = EpochSampler(length=23, seed=5, limit=20)
    resumed.resume(state)
    rest = [i for batch in DataLoader(range(23), batch_size=4, sampler=resumed) for i in batch.tolist()]
    assert seen + rest == full  # nothing repeated, nothing skipped
    assert len(resumed) == 12
    resumed.set_epoch(4)  # the next epoch starts from its beginning, in a new order
    assert len(list(resumed)) == 20 and list(resumed) != full


def test_resume_refuses_another_split_or_seed() -> None:
    sampler = EpochSampler(10, seed=1)
    state = sampler.state(3)
    with pytest.raises(ClipflowError, match="checkpoint's length is 10, this run's 12"):
        EpochSampler(12, seed=1).resume(state)
    with pytest.raises(ClipflowError, match="checkpoint's seed is 1, this run's 2"):
        EpochSampler(10, seed=2).resume(state)
    with pytest.raises(ClipflowError, match="cannot resume the sampler at position 11: the epoch has 10"):
        EpochSampler(10, seed=1).resume({**state, "position": 11})

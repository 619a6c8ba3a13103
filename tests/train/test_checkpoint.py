"""A checkpoint write on a full disk (a small tmpfs; issue 30): one line naming the file, the bytes it needed and the
bytes free, what a rerun resumes from (truly: the newest checkpoint that matches its checksum, or none and a fresh
start), and no file left under a checkpoint's name or a temporary one."""

from __future__ import annotations

import pytest
import torch
from disk_helpers import PAGE, files_on, fill, full_message

from clipflow.files import DiskFull
from clipflow.train.checkpoint import CheckpointStore, resumable_from, telling_resume

BIG = {"model": {"w": torch.zeros(40_000)}}  # 160 KB: more than the small disk holds


def test_a_checkpoint_that_finds_the_disk_full_says_the_run_starts_afresh_when_none_is_saved(small_disk):
    folder = small_disk / "checkpoints"
    free = fill(small_disk, 2 * PAGE)
    with pytest.raises(DiskFull) as failed, telling_resume(folder):  # as a worker's training runs
        CheckpointStore(folder).save(BIG, 1)
    # torch writes as it goes: what it needed is known as more than what fitted
    assert str(failed.value) == (f"{full_message(folder / 'epoch_0001.pt', f'more than {free}', free)}; {folder} "
                                 "holds no complete checkpoint, so a rerun starts afresh")  # fmt: skip
    assert files_on(small_disk) == []


def test_a_checkpoint_that_finds_the_disk_full_names_the_one_a_rerun_resumes_from(small_disk):
    folder = small_disk / "checkpoints"
    store = CheckpointStore(folder)
    store.save({"model": {"w": torch.ones(10)}}, 1)
    free = fill(small_disk, 2 * PAGE)
    with pytest.raises(DiskFull) as failed, telling_resume(folder):
        store.save(BIG, 2)
    assert str(failed.value) == (f"{full_message(folder / 'epoch_0002.pt', f'more than {free}', free)}; a rerun "
                                 f"resumes from {folder / 'epoch_0001.pt'}")  # fmt: skip
    assert files_on(small_disk) == ["checkpoints/epoch_0001.pt", "checkpoints/epoch_0001.pt.sha256"]
    assert torch.load(folder / "epoch_0001.pt", weights_only=True)["model"]["w"].tolist() == [1.0] * 10


def test_what_a_rerun_resumes_from_is_the_newest_checkpoint_that_matches_its_checksum(tmp_path):
    store = CheckpointStore(tmp_path, keep=5)
    for epoch in (1, 2, 3):
        store.save({"model": {"w": torch.full((4,), float(epoch))}}, epoch)
    (tmp_path / "epoch_0003.pt").write_bytes(b"cut")  # damaged: its checksum says otherwise
    (tmp_path / "epoch_0002.pt.sha256").unlink()  # its writer did not finish
    assert resumable_from(tmp_path) == f"a rerun resumes from {tmp_path / 'epoch_0001.pt'}"
    (tmp_path / "epoch_0001.pt").unlink()
    assert resumable_from(tmp_path) == f"{tmp_path} holds no complete checkpoint, so a rerun starts afresh"

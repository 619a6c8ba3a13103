"""The checkpoint store: the run's checkpoints are the ones it recorded, by content; nobody else's file with a
checkpoint's name is resumed from, pruned or replaced; every load is weights-only (issue 30, points 1, 3, 8). A
checkpoint write on a full disk (a small tmpfs; issue 30): one line naming the file, the bytes it needed and the
bytes free, what a rerun resumes from (truly: the newest of the run's checkpoints whose bytes are the ones written,
or none and a fresh start), and no file left under a checkpoint's name or a temporary one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from disk_helpers import PAGE, files_on, fill, full_message
from safety_helpers import code_running_checkpoint

from clipflow.checksums import record_checksum, sha256_of
from clipflow.errors import ClipflowError
from clipflow.files import DiskFull
from clipflow.hosts.files import LocalFiles
from clipflow.made import JOURNAL, RECORD, Made
from clipflow.train.checkpoint import (
    BEST,
    FLAG,
    HISTORY,
    PENDING,
    RUN_FILES,
    CheckpointStore,
    atomic_save,
    points_there,
    resumable_from,
    telling_resume,
)  # fmt: skip
from clipflow.train.host_run import carry_run
from clipflow.train.trainer import plain_numpy_state

BIG = {"model": {"w": torch.zeros(40_000)}}  # 160 KB: more than the small disk holds


def test_a_checkpoint_that_finds_the_disk_full_says_the_run_starts_afresh_when_none_is_saved(small_disk):
    folder = small_disk / "checkpoints"
    Made(folder, FLAG).write_text("job.json", "{}\n")  # as the launcher leaves the folder: its record there
    free = fill(small_disk, 2 * PAGE)
    with pytest.raises(DiskFull) as failed, telling_resume(folder):  # as a worker's training runs
        CheckpointStore(folder).save(BIG, 1)
    # torch writes as it goes: what it needed is known as more than what fitted
    assert str(failed.value) == (f"{full_message(folder / 'epoch_0001.pt', f'more than {free}', free)}; {folder} "
                                 "holds no complete checkpoint, so a rerun starts afresh")  # fmt: skip
    assert files_on(small_disk) == [f"checkpoints/{RECORD}", "checkpoints/job.json"]  # issue 30: the record
    assert list(json.loads((folder / RECORD).read_text())["files"]) == ["job.json"]  # the failed save's undone


def test_a_checkpoint_that_finds_the_disk_full_names_the_one_a_rerun_resumes_from(small_disk):
    folder = small_disk / "checkpoints"
    store = CheckpointStore(folder)
    store.save({"model": {"w": torch.ones(10)}}, 1)
    free = fill(small_disk, 2 * PAGE)
    with pytest.raises(DiskFull) as failed, telling_resume(folder):
        store.save(BIG, 2)
    assert str(failed.value) == (f"{full_message(folder / 'epoch_0002.pt', f'more than {free}', free)}; a rerun "
                                 f"resumes from {folder / 'epoch_0001.pt'}")  # fmt: skip
    assert files_on(small_disk) == [f"checkpoints/{RECORD}", "checkpoints/epoch_0001.pt",
                                    "checkpoints/epoch_0001.pt.sha256"]  # fmt: skip
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


def state(epoch: int) -> dict:
    return {"model": {"w": torch.full((2,), float(epoch))}, "epoch": epoch}


def files_in(folder) -> dict[str, str]:
    return {p.name: sha256_of(p) for p in sorted(folder.iterdir()) if p.is_file()}


def not_ours(path) -> str:
    return (
        f"{path}: not a checkpoint clipflow wrote for this run (it is not in {RECORD}): left in place, never resumed "
        f"from nor pruned; move it out of {path.parent} if it is not to stay there"
    )


def test_others_files_with_checkpoint_names_are_kept_and_the_runs_newest_resumed(tmp_path):
    # the case: a user's notes.txt and two files that are no checkpoints, resumed with keep_checkpoints 1
    said: list[str] = []
    CheckpointStore(tmp_path, keep=1, log=said.append).save(state(1), 1)
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "epoch_0000.pt").write_bytes(b"the user's")
    (tmp_path / "epoch_0007.pt").write_bytes(b"not a checkpoint")
    theirs = {name: sha256_of(tmp_path / name) for name in ("notes.txt", "epoch_0000.pt", "epoch_0007.pt")}
    launcher = CheckpointStore(tmp_path, keep=1, log=said.append, name_others=False)  # rank 0 names them
    assert launcher.load_newest()[1] == tmp_path / "epoch_0001.pt" and said == []
    store = CheckpointStore(tmp_path, keep=1, log=said.append)
    found, path = store.load_newest()
    assert path == tmp_path / "epoch_0001.pt" and found["epoch"] == 1
    store.save(state(2), 2)  # prunes the run's epoch 1, nothing else
    assert said == [not_ours(tmp_path / "epoch_0000.pt"), not_ours(tmp_path / "epoch_0007.pt")]  # each once
    left = files_in(tmp_path)
    assert {name: left[name] for name in theirs} == theirs
    assert sorted(left) == [RECORD, "epoch_0000.pt", "epoch_0002.pt", "epoch_0002.pt.sha256", "epoch_0007.pt",
                            "notes.txt"]  # fmt: skip
    assert store.points() == [(2, 0)]
    found, path = CheckpointStore(tmp_path, log=said.append).load_newest()  # the next run resumes
    assert path == tmp_path / "epoch_0002.pt" and found["epoch"] == 2


def test_a_folder_from_before_the_record_adopts_only_what_its_sha256_proves(tmp_path):
    Made(tmp_path, FLAG).write_text("job.json", "{}\n")  # the launcher's record, naming no checkpoint yet
    for epoch in (1, 2):
        atomic_save(state(epoch), tmp_path / f"epoch_{epoch:04d}.pt")  # with the .sha256 an earlier clipflow wrote
    torch.save(state(0), tmp_path / "epoch_0000.pt")  # no .sha256: not proven clipflow's
    damaged = tmp_path / "epoch_0005.pt"
    atomic_save(state(5), damaged)
    damaged.write_bytes(damaged.read_bytes()[:-10])
    said: list[str] = []
    store = CheckpointStore(tmp_path, keep=1, log=said.append)
    assert store.points() == [(0, 0), (1, 0), (2, 0), (5, 0)]  # an earlier run's names are the run's to resume from
    found, path = store.load_newest()
    assert path.name == "epoch_0002.pt" and found["epoch"] == 2
    recorded = (tmp_path / "epoch_0005.pt.sha256").read_text().split()[0]
    assert said == [
        f"checkpoint {damaged} cannot be loaded (damaged: its sha256 is {sha256_of(damaged)[:12]}..., not the "
        f"{recorded[:12]}... its writer recorded in epoch_0005.pt.sha256 (truncated or changed since)); trying an "
        "older one"
    ]
    store.save(state(3), 3)  # adopts epochs 1 and 2, prunes them; 0 and 5 were never proven clipflow's
    assert said[1:] == [not_ours(tmp_path / "epoch_0000.pt"), not_ours(tmp_path / "epoch_0005.pt")]
    assert sorted(files_in(tmp_path)) == [RECORD, "epoch_0000.pt", "epoch_0003.pt", "epoch_0003.pt.sha256",
                                          "epoch_0005.pt", "epoch_0005.pt.sha256", "job.json"]  # fmt: skip
    assert CheckpointStore(tmp_path).points() == [(3, 0)]


def test_a_checkpoint_changed_since_it_was_written_is_neither_resumed_from_nor_pruned(tmp_path):
    said: list[str] = []
    store = CheckpointStore(tmp_path, keep=3, log=said.append)
    for epoch in (1, 2):
        store.save(state(epoch), epoch)
    changed = tmp_path / "epoch_0002.pt"
    atomic_save(state(9), changed)  # replaced, with a .sha256 of its own: only the record tells
    found, path = store.load_newest()
    assert path.name == "epoch_0001.pt"
    assert said == [
        f"checkpoint {changed} cannot be loaded (changed since clipflow wrote it: its sha256 "
        f"{sha256_of(changed)[:12]}... is not the one {RECORD} records); trying an older one"
    ]
    store.keep = 1
    store.save(state(3), 3)
    assert said[1] == (
        f"checkpoint {changed} is not pruned (changed since clipflow wrote it: its sha256 {sha256_of(changed)[:12]}"
        f"... is not the one {RECORD} records): left in place"
    )
    assert sorted(files_in(tmp_path)) == [RECORD, "epoch_0002.pt", "epoch_0002.pt.sha256", "epoch_0003.pt",
                                          "epoch_0003.pt.sha256"]  # fmt: skip


def test_someone_elses_file_of_the_name_a_save_writes_is_moved_aside_not_replaced(tmp_path):
    said: list[str] = []
    store = CheckpointStore(tmp_path, log=said.append)
    store.save(state(1), 1)
    (tmp_path / "epoch_0002.pt").write_bytes(b"the user's")
    store.save(state(2), 2)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("epoch_0002.pt.not-clipflow-")]
    assert len(aside) == 1 and aside[0].read_bytes() == b"the user's"
    assert said[-1] == (
        f"{tmp_path / 'epoch_0002.pt'}: not a file clipflow wrote for this run, and the run writes one of that name "
        f"now: moved to {aside[0].name} beside it, not replaced"
    )
    assert store.load_newest()[0]["epoch"] == 2


def test_a_save_killed_before_its_sha256_was_recorded_is_still_the_runs(tmp_path):
    store = CheckpointStore(tmp_path, keep=1)
    store.save(state(1), 1)
    Made(tmp_path, FLAG).update({"epoch_0002.pt": [PENDING]})  # what save records first; then the kill came
    atomic_save(state(2), tmp_path / "epoch_0002.pt")
    assert store.load_newest()[1].name == "epoch_0002.pt"
    store.save(state(3), 3)  # and it is pruned like any of the run's
    assert sorted(files_in(tmp_path)) == [RECORD, "epoch_0003.pt", "epoch_0003.pt.sha256"]
    assert json.loads((tmp_path / RECORD).read_text())["files"] == {
        "epoch_0003.pt": [sha256_of(tmp_path / "epoch_0003.pt")]
    }


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "before-the-record"])
def test_a_checkpoint_whose_pickle_would_run_code_is_refused_and_nothing_runs(tmp_path, recorded):
    marker = tmp_path / "ran"
    folder = tmp_path / "ckpt"
    store = CheckpointStore(folder, log=lambda line: None)
    if recorded:
        store.save(state(1), 1)
        code_running_checkpoint(folder / "x.pt", marker)  # made the run's by the record, as if clipflow wrote it
        (folder / "x.pt").replace(folder / "epoch_0002.pt")
        Made(folder, FLAG).update({"epoch_0002.pt": [record_checksum(folder / "epoch_0002.pt")]})
    else:
        code_running_checkpoint(folder / "epoch_0002.pt", marker)
    with pytest.raises(ClipflowError) as err:
        store.load_newest()
    assert str(err.value) == (
        f"checkpoint {folder / 'epoch_0002.pt'}: its pickle asks for exec, which no file clipflow writes holds "
        "(loading it could run code): not loaded; use a file clipflow wrote, or, if you trust this one, load it "
        "yourself and save its tensors again with torch.save"
    )
    assert not marker.exists()


def test_a_checkpoints_rng_state_is_plain_values(tmp_path):
    np.random.seed(1)
    plain = plain_numpy_state()
    atomic_save({"model": {}, "rng": {"numpy": plain, "torch": torch.get_rng_state()}}, tmp_path / "epoch_0001.pt")
    assert torch.serialization.get_unsafe_globals_in_checkpoint(tmp_path / "epoch_0001.pt") == []
    expected = np.random.rand()
    np.random.set_state(torch.load(tmp_path / "epoch_0001.pt", weights_only=True)["rng"]["numpy"])
    assert np.random.rand() == expected


def test_a_hosts_folder_lists_the_run_s_checkpoints_as_the_store_does(tmp_path):
    # what collect and the own-disk resume read on a host: its listing and its record
    store = CheckpointStore(tmp_path / "ckpt", log=lambda line: None)
    store.save(state(1), 1)
    (tmp_path / "ckpt" / "epoch_0007.pt").write_bytes(b"not a checkpoint")
    where = LocalFiles("localhost", tmp_path)
    assert points_there(where, "ckpt") == store.points() == [(1, 0)]
    (tmp_path / "ckpt" / RECORD).write_text("not a record")  # unreadable: every name counts, each copy checked
    assert points_there(where, "ckpt") == [(1, 0), (7, 0)]


def write_run_file(store: CheckpointStore, name: str, epoch: int) -> None:
    """The run's file ``name`` as the trainer writes it: best.pt a model, the others text."""
    if name == BEST:
        store.put(name, lambda to: atomic_save(state(epoch), to))
    else:
        store.put_text(name, json.dumps({"epoch": epoch}) + "\n")


def moved_aside(folder) -> dict:
    """name -> the file set aside in ``folder`` for it (``<name>.not-clipflow-<UTC>``, its .sha256 beside it)."""
    sums = {True: ".sha256", False: ""}
    return {p.name.split(".not-clipflow-")[0] + sums[p.suffix == ".sha256"]: p
            for p in folder.iterdir() if ".not-clipflow-" in p.name}  # fmt: skip


def test_the_runs_other_files_replace_their_own_and_set_anyone_elses_aside(tmp_path):
    # best.pt, best.json, the history and run.json beside the checkpoints: a user's file of one of those names, or
    # one changed since the run wrote it, is moved aside and named once; the run's own is replaced silently
    said: list[str] = []
    store = CheckpointStore(tmp_path, log=said.append)
    store.save(state(1), 1)
    theirs = {name: f"the user's {name}".encode() for name in RUN_FILES}
    for name, data in theirs.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "best.pt.sha256").write_text("their own checksum file\n")
    assert [store.is_runs(name) for name in RUN_FILES] == [False] * 4
    for name in RUN_FILES:
        write_run_file(store, name, 1)
    aside = moved_aside(tmp_path)
    assert sorted(aside) == sorted([*RUN_FILES, "best.pt.sha256"])
    assert {name: aside[name].read_bytes() for name in RUN_FILES} == theirs
    assert aside["best.pt.sha256"].read_text() == "their own checksum file\n"
    assert aside["best.pt.sha256"].name == aside[BEST].name + ".sha256"
    assert said == [
        f"{tmp_path / name}: not a file clipflow wrote for this run, and the run writes one of that name now: moved "
        f"to {aside[name].name} beside it, not replaced"
        for name in RUN_FILES
    ]
    assert [store.is_runs(name) for name in RUN_FILES] == [True] * 4
    record = json.loads((tmp_path / RECORD).read_text())["files"]
    assert record[HISTORY] == JOURNAL  # appended to by its name; the others by their bytes
    assert all(record[name] == [sha256_of(tmp_path / name)] for name in RUN_FILES if name != HISTORY)
    (tmp_path / "best.json").write_text('{"epoch": 9}\n')  # edited by hand since: not the run's any more
    for name in RUN_FILES:
        write_run_file(store, name, 2)
    assert len(said) == 5 and said[-1].startswith(f"{tmp_path / 'best.json'}: not a file clipflow wrote")
    assert json.loads((tmp_path / "best.json").read_text()) == {"epoch": 2}
    assert torch.load(tmp_path / BEST, weights_only=True)["epoch"] == 2


def test_the_runs_other_files_from_before_the_record_are_adopted_when_their_sha256_proves_them(tmp_path):
    store = CheckpointStore(tmp_path, log=lambda line: None)
    store.save(state(1), 1)  # a record naming the run's checkpoints but none of its other files (before issue 30)
    record = json.loads((tmp_path / RECORD).read_text())["files"]
    for name in RUN_FILES:  # as an earlier clipflow wrote them, each with its .sha256
        write_run_file(CheckpointStore(tmp_path / "earlier"), name, 1)
        for file in (name, name + ".sha256"):
            (tmp_path / "earlier" / file).replace(tmp_path / file)
    (tmp_path / RECORD).write_text(json.dumps({"files": record}))
    (tmp_path / "run.json").write_text('{"edited": true}\n')  # its .sha256 no longer proves it
    assert [store.is_runs(name) for name in RUN_FILES] == [True, True, True, False]
    for name in RUN_FILES:
        write_run_file(store, name, 2)
    assert sorted(moved_aside(tmp_path)) == ["run.json", "run.json.sha256"]


def test_a_copy_brought_home_sets_aside_a_users_file_of_its_name(tmp_path):
    # own disks: rank 0's newest checkpoint and the run's files come home into the run's checkpoint folder, where
    # a user's epoch_0002.pt and best.pt are kept, not replaced
    host = CheckpointStore(tmp_path / "host" / "ckpt", log=lambda line: None)
    host.save(state(2), 2)
    write_run_file(host, BEST, 2)
    write_run_file(host, HISTORY, 2)
    home = tmp_path / "home"
    home.mkdir()
    (home / "epoch_0002.pt").write_bytes(b"the user's checkpoint")
    (home / "best.pt").write_bytes(b"the user's best")
    carry_run(LocalFiles("host", tmp_path / "host"), "ckpt", (2, 0), home)
    aside = moved_aside(home)
    assert {name: aside[name].read_bytes() for name in aside} == {
        "epoch_0002.pt": b"the user's checkpoint",
        "best.pt": b"the user's best",
    }
    store = CheckpointStore(home)
    assert store.load_newest()[1] == home / "epoch_0002.pt"
    assert store.is_runs(BEST) and store.is_runs(HISTORY)
    assert (home / BEST).read_bytes() == (host.folder / BEST).read_bytes()

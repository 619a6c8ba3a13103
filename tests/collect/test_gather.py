"""`clipflow collect` after a real short training on this machine: every role's log and rank 0's model and
checkpoints come home with the checksums their writers recorded; a damaged or unrecorded file is named; an --out
that is not collect's own folder (the run's folder, '.', a file, a link) is refused and nothing in it changes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from disk_helpers import PAGE, files_on, fill, full_message
from helpers import assert_refused, python_env
from launch_helpers import TINY, launch, scanned_val, two_splits
from safety_helpers import listing

from clipflow.collect.gather import MARKER

ROLES = ["scheduler-0", "server-0", "worker-0", "worker-1"]  # the plan's default: one server


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_videos) -> Path:
    """Two epochs of two workers and a server, validated each epoch (so best.pt is kept)."""
    run = tmp_path_factory.mktemp("collect") / "run"  # a folder of its own around it: tests list what is beside it
    run.mkdir()
    splits = two_splits(run, tiny_videos)
    scanned_val(run, tiny_videos)
    two = {**TINY, "train": {**TINY["train"], "epochs": 2, "eval_every": 1}}
    done = launch(run, tiny_videos, splits, "--val-list", str(run / "val.lst"), overrides=two)
    assert done.returncode == 0, done.stdout + done.stderr
    return run


def collect(run: Path, out: Path, plan: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    args = ["--plan", str(plan or run / "plan.json"), "--log-dir", str(run / "logs"), "--checkpoint-root",
            str(run / "ckpt"), "--model", str(run / "model.pt"), "--out", str(out)]  # fmt: skip
    return subprocess.run([sys.executable, "-m", "clipflow", "collect", *args], env=python_env(), capture_output=True,
                          text=True, timeout=120, cwd=cwd)  # fmt: skip


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_log_and_the_checkpoints_come_home_verified(trained: Path) -> None:
    out = trained / "results" / "collected"
    done = collect(trained, out)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["verified"] is True
    files = manifest["files"]
    logs = {f"{f['role']}-{f['rank']}": f for f in files if f["kind"] == "log"}
    assert sorted(logs) == ROLES
    assert {f["kind"] for f in files} == {"log", "model", "checkpoint", "best", "best_facts", "restarts"}
    folder = trained / "ckpt"
    remote = {f["kind"]: f["remote"] for f in files}
    assert remote["checkpoint"] == str(folder / "epoch_0002.pt") and remote["model"] == str(trained / "model.pt")
    assert remote["restarts"] == str(trained / "ckpt" / "restarts.jsonl")  # the launcher's record of its attempts
    for f in files:
        assert f["host"] == ("home" if f["kind"] == "restarts" else "localhost") and f["verified"] is True
        assert f["sha256"] == sha(Path(f["remote"])) == sha(Path(f["local"])), f
        assert f["bytes"] == Path(f["local"]).stat().st_size and Path(f["local"]).is_relative_to(out)
    # the role's own log holds what the launcher's log got from it
    worker0 = Path(logs["worker-0"]["local"]).read_text()
    assert "final model" in worker0 and worker0 == (trained / "logs" / "worker-0.log").read_text()
    assert (trained / "logs" / "on-host" / "worker-0.log.sha256").read_text().split() == [
        logs["worker-0"]["sha256"], "worker-0.log",
    ]  # fmt: skip
    assert "collected 9 files from 1 host(s), every sha256 verified" in done.stdout


def test_a_damaged_log_a_truncated_checkpoint_and_a_missing_checksum_are_each_named(trained: Path) -> None:
    log = trained / "logs" / "on-host" / "worker-0.log"  # worker 1 and the PS roles print nothing here
    folder = trained / "ckpt"
    best = folder / "best.pt"
    originals = {p: p.read_bytes() for p in (log, best)}
    server_sum = trained / "logs" / "on-host" / "server-0.log.sha256"
    kept_sum = server_sum.read_bytes()
    out = trained / "damaged" / "collected"
    try:
        data = bytearray(originals[log])
        data[len(data) // 2] ^= 0x01  # one flipped bit
        log.write_bytes(bytes(data))
        best.write_bytes(originals[best][: len(originals[best]) // 2])
        server_sum.unlink()
        done = collect(trained, out)
    finally:
        for path, data in originals.items():
            path.write_bytes(data)
        server_sum.write_bytes(kept_sum)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("clipflow: error: ")]
    assert len(errors) == 4, done.stderr  # three problems, all named, then the summary
    recorded = hashlib.sha256(originals[log]).hexdigest()[:12]
    damaged = next(line for line in errors if f"host localhost: {log}: " in line)
    assert f"sha256 recorded {recorded}... but the copy has " in damaged
    assert damaged.endswith(": damaged on the host or in transit")
    assert f"host localhost: {trained / 'logs' / 'on-host' / 'server-0.log'}: no checksum server-0.log.sha256" in (
        done.stderr
    )
    assert f"host localhost: {best}: sha256 recorded {sha(best)[:12]}... but the copy has" in done.stderr
    assert "3 problem(s) collecting the run: no manifest.json written" in errors[-1]
    assert not (out / "manifest.json").exists()  # nothing partly collected passes for complete
    again = collect(trained, out)  # once mended, the same folder is complete
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "manifest.json").read_text())["verified"] is True


def test_a_missing_file_a_bad_plan_and_an_unwritable_out_are_named(trained: Path, tmp_path: Path) -> None:
    missing = collect(trained, tmp_path / "c", plan=tmp_path / "nope.json")
    assert missing.returncode == 2 and f"cluster plan {tmp_path / 'nope.json'} does not exist" in missing.stderr
    (tmp_path / "bad.json").write_text('{"launcher": "local"')
    broken = collect(trained, tmp_path / "c", plan=tmp_path / "bad.json")
    assert broken.returncode == 2 and f"cluster plan {tmp_path / 'bad.json'} line 1 is not JSON" in broken.stderr
    (tmp_path / "file").write_text("not a folder")
    unwritable = collect(trained, tmp_path / "file" / "collected")
    assert unwritable.returncode == 2
    assert f"cannot write the collection to --out {tmp_path / 'file' / 'collected'}" in unwritable.stderr
    model = trained / "model.pt"
    model.rename(tmp_path / "away.pt")
    try:
        gone = collect(trained, tmp_path / "c")
    finally:
        (tmp_path / "away.pt").rename(model)
    assert gone.returncode == 2 and f"clipflow: error: host localhost: {model}: missing" in gone.stderr


def test_out_naming_the_runs_own_folder_is_refused_and_nothing_in_it_changes(trained: Path) -> None:
    """Issue 17: `--out results/<run>` said every sha256 verified and replaced the run's 32 files by its 9."""
    before = listing(trained.parent)
    done = collect(trained, trained)
    assert_refused(done, f"--out {trained}: {trained} is a folder collect did not make", f"no {MARKER}",
                   f"--out {trained / 'collected'}", "nothing was changed")  # fmt: skip
    assert listing(trained.parent) == before  # the run's folder, and no .partial beside it


def test_out_dot_or_a_folder_holding_the_working_folder_is_refused(trained: Path, tmp_path: Path) -> None:
    """`--out .` ended in a ValueError traceback; an empty working folder would have been replaced."""
    here = tmp_path / "work"
    (here / "sub").mkdir(parents=True)
    (here / "notes.txt").write_text("mine\n")
    (here / "sub" / "data.csv").write_text("1,2\n")
    (tmp_path / "empty").mkdir()
    before = listing(tmp_path)
    for cwd, out in ((here, "."), (here, ".."), (here / "sub", "."), (tmp_path / "empty", ".")):
        done = collect(trained, Path(out), cwd=cwd)
        assert_refused(done, f"--out {out} is the folder collect runs in ({cwd}) or holds it", "--out ")
        assert listing(tmp_path) == before, (cwd, out)


def test_a_file_a_link_and_a_partial_folder_of_someone_else_are_refused(trained: Path, tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("mine\n")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "a.txt").write_text("theirs\n")
    (tmp_path / "link").symlink_to(tmp_path / "theirs")
    (tmp_path / "new.partial").mkdir()
    (tmp_path / "new.partial" / "b.txt").write_text("theirs too\n")
    before = listing(tmp_path)
    cases = {
        "file.txt": f"{tmp_path / 'file.txt'} is a file;",
        "link": f"{tmp_path / 'link'} is a link;",
        "new": f"{tmp_path / 'new.partial'} is a folder collect did not make",
    }
    for name, message in cases.items():
        done = collect(trained, tmp_path / name)
        line = assert_refused(done, f"--out {tmp_path / name}: ", message, "nothing was changed")
        assert name != "new" or f"move {tmp_path / 'new.partial'} away" in line
        assert listing(tmp_path) == before, name


def test_collecting_twice_into_its_own_folder_replaces_its_earlier_collection(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "collected"
    out.mkdir()  # empty, as Snakemake makes an output's folder before the rule runs: nothing there to lose
    first = collect(trained, out)
    assert first.returncode == 0, first.stderr
    assert (out / MARKER).is_file() and not (tmp_path / "collected.partial").exists()
    names = sorted(listing(out))
    (out / "manifest.json").unlink()  # as Snakemake removes a rule's output before it runs the rule again
    again = collect(trained, out)
    assert again.returncode == 0, again.stderr
    assert "every sha256 verified" in again.stdout
    assert json.loads((out / "manifest.json").read_text())["verified"] is True
    assert sorted(listing(out)) == names and not (tmp_path / "collected.partial").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["collected"]


def test_a_collection_on_a_full_disk_stops_in_one_line_and_leaves_nothing_under_out(
    trained: Path, small_disk: Path
) -> None:
    """Issue 30: every file collect writes goes through a temporary name; a full disk stops it in one line."""
    free = fill(small_disk, PAGE)  # the partial folder's marker fits, then nothing
    out = small_disk / "collected"
    line = assert_refused(collect(trained, out))
    on_host = trained / "logs" / "on-host"
    first = next(role for role in ROLES if (on_host / f"{role}.log").stat().st_size)  # an empty log fits
    needed = (on_host / f"{first}.log").stat().st_size
    assert line == "clipflow: error: " + full_message(small_disk / f"collected.partial/logs/{first}.log", needed,
                                                      free - PAGE)  # fmt: skip
    empty = [f"collected.partial/logs/{role}.log" for role in ROLES[: ROLES.index(first)]]
    assert files_on(small_disk) == sorted([f"collected.partial/{MARKER}", *empty])
    assert not out.exists()

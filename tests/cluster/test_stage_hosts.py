"""`clipflow cluster stage` and `unstage` against three sshd hosts without shared storage (tests/netns_hosts.py).

Each host is a network namespace with its own home; the stage copies into ``~/clipflow-stage/<name>`` there, over
real rsync and ssh. The data set is a few tens of small files of random bytes (the stage does not decode them)
with the scan's videos.json, three workers' train lists (one worker per host) and a val list. The tests share
the hosts and the data (module-scoped) and pass in any order: each one that changes what is staged stages a data
set of its own name (or into a staging folder of its own).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_refused, free_port, python_env
from netns_hosts import NetnsHosts, ssh_hosts  # noqa: F401

pytestmark = pytest.mark.hosts

NAME = "clips-1a2b3c4d"
WORKERS = 3
SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]


def run(hosts: NetnsHosts, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m clipflow ARGS`` on the launching side (HOME = local_home, the admin agent)."""
    env = {**python_env(), "HOME": str(hosts.local_home), **hosts.agent_env}
    return subprocess.run(
        [sys.executable, "-m", "clipflow", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def ssh(hosts: NetnsHosts, i: int, command: str) -> subprocess.CompletedProcess[str]:
    """A shell command on host ``i`` as its sessions see it (its own mounts included), with the admin key."""
    host = hosts.hosts[i]
    argv = ["ssh", *SSH_OPTS, "-o", "ConnectTimeout=5", host.target, command]
    return subprocess.run(argv, env={**os.environ, **hosts.agent_env}, capture_output=True, text=True, timeout=30)


def staged_files(hosts: NetnsHosts, i: int, name: str) -> dict[str, int]:
    """{path: size} of the files in ``~/clipflow-stage/<name>`` on host ``i`` as the host sees it, dotfiles aside."""
    listing = ssh(hosts, i, f"cd ~/clipflow-stage/{name} 2>/dev/null && find . -type f -printf '%P %s\\n' || true")
    assert listing.returncode == 0, listing.stderr
    sizes = dict(line.rsplit(" ", 1) for line in listing.stdout.splitlines())
    return {path: int(size) for path, size in sizes.items() if not path.startswith(".")}


def tree_state(root: Path) -> dict[str, tuple[str, int]]:
    """{relative path: (sha256, mtime_ns)} of every file under ``root``."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def job(ssh_hosts: NetnsHosts, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:  # noqa: F811
    """The job's key authorised on every host, a plan (worker r on host r), checks.json with local storage."""
    work = tmp_path_factory.mktemp("stage")
    hosts_file = work / "hosts"
    hosts_file.write_text("".join(f"{h.target}\n" for h in ssh_hosts.hosts))
    ssh = ["--ssh-key", str(ssh_hosts.local_home / ".ssh" / "id_ed25519"), "--known-hosts", str(work / "known_hosts")]
    done = run(ssh_hosts, "cluster", "keys", "--hosts-file", str(hosts_file), *ssh)
    assert done.returncode == 0, done.stdout + done.stderr
    plan = work / "plan.json"
    args = ["--launcher", "ssh", "--hosts-file", str(hosts_file), "--num-workers", str(WORKERS), "--num-servers", "3"]
    done = run(ssh_hosts, "cluster", "plan", *args, "--root-port", str(free_port()), *ssh, "--out", str(plan))
    assert done.returncode == 0, done.stdout + done.stderr
    checks = work / "checks.json"
    checks.write_text(json.dumps({"ok": True, "storage": {"setting": "local", "mode": "local", "reason": "test"}}))
    return {"work": work, "plan": plan, "checks": checks}


@pytest.fixture(scope="module")
def data(job: dict[str, Path]) -> dict[str, Path]:
    """30 files of 5-15 kB under root/videos/c<k>/, their videos.json, worker lists of 8 each, a val list of 6."""
    rng = random.Random(18)
    root, index, splits = job["work"] / "root", job["work"] / "index", job["work"] / "splits"
    paths = [f"videos/c{n % 3}/clip {n:02d}.mp4" for n in range(30)]  # a space in each name, as Kinetics has
    records = {}
    for path in paths:
        full = root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(rng.randbytes(rng.randrange(5000, 15000)))
        st = full.stat()
        digest = hashlib.sha256(full.read_bytes()).hexdigest()
        records[path] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    index.mkdir()
    splits.mkdir()
    (index / "videos.json").write_text(json.dumps({"version": 1, "root": str(root), "files": records}))
    lines = [f"{path} 16 {n % 3}\n" for n, path in enumerate(paths)]
    for r in range(WORKERS):
        (splits / f"worker{r}.lst").write_text("".join(lines[8 * r : 8 * r + 8]))
    (index / "val.lst").write_text("".join(lines[24:]))
    return {"root": root, "index": index, "splits": splits, "paths": paths}


def expected_share(data: dict[str, Path], rank: int) -> dict[str, int]:
    """{path: size} host ``rank`` needs: worker ``rank``'s train list and val entries ``val[rank::3]``."""
    paths = [*data["paths"][8 * rank : 8 * rank + 8], *data["paths"][24:][rank::WORKERS]]
    return {path: (data["root"] / path).stat().st_size for path in paths}


def stage(hosts: NetnsHosts, job: dict[str, Path], data: dict[str, Path], name: str = NAME,  # noqa: F811
          stage_dir: str = "~/clipflow-stage", **paths: Path):  # fmt: skip
    """`clipflow cluster stage` of ``data`` (``paths`` replace checks/index/splits/root); (result, out file)."""
    where = {"checks": job["checks"], "index": data["index"], "splits": data["splits"], "root": data["root"], **paths}
    out = job["work"] / f"staged-{name}.json"
    out.unlink(missing_ok=True)
    done = run(hosts, "cluster", "stage", "--plan", str(job["plan"]), "--checks", str(where["checks"]),
               "--index-dir", str(where["index"]), "--splits-dir", str(where["splits"]), "--root", str(where["root"]),
               "--stage-dir", stage_dir, "--name", name, "--out", str(out))  # fmt: skip
    return done, out


@pytest.fixture(scope="module")
def first(ssh_hosts: NetnsHosts, job: dict[str, Path], data: dict[str, Path]):  # noqa: F811
    """The first stage of the data set (before any other test stages)."""
    return stage(ssh_hosts, job, data)


def test_each_host_gets_exactly_its_share_and_a_second_run_copies_nothing(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
    data: dict[str, Path],
    first,
) -> None:
    done, out = first
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(out.read_text())
    assert summary["storage"] == "local" and summary["name"] == NAME and summary["stage_dir"] == "~/clipflow-stage"
    assert summary["total_files"] == 30 and summary["source_root"] == str(data["root"])
    mtimes = {}
    for i, host in enumerate(ssh_hosts.hosts):
        want = expected_share(data, i)
        folder = host.home / "clipflow-stage" / NAME
        got = {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}
        assert {k: v for k, v in got.items() if not k.startswith(".")} == want
        for path in want:
            assert (folder / path).read_bytes() == (data["root"] / path).read_bytes()
        record = json.loads((folder / ".clipflow-staged.json").read_text())
        assert sorted(record["files"]) == sorted(want)
        assert not (folder / ".clipflow-partial").exists()
        entry = summary["hosts"][host.target]
        assert entry["root"] == f"~/clipflow-stage/{NAME}"
        assert (entry["files"], entry["bytes"]) == (len(want), sum(want.values()))
        assert (entry["train_files"], entry["val_files"]) == (8, 2)
        assert (entry["copied_files"], entry["copied_bytes"]) == (len(want), sum(want.values()))
        total = f"{sum(want.values()) / 1000:.1f} kB"
        assert f"stage {host.target}: {total} of {total} (100%), " in done.stdout, done.stdout
        assert "; copied 10 files, 10 verified, 0 already staged" in done.stdout
        mtimes[i] = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    assert summary["total_bytes"] == sum(r["bytes"] for r in summary["hosts"].values())

    os.utime(data["root"] / data["paths"][0])  # a new mtime, the same bytes: still the scanned video
    again, out = stage(ssh_hosts, job, data)
    assert again.returncode == 0, again.stdout + again.stderr
    for i, host in enumerate(ssh_hosts.hosts):
        assert f"stage {host.target}: nothing to copy (10 already staged, 10 files)" in again.stdout, again.stdout
        entry = json.loads(out.read_text())["hosts"][host.target]
        assert (entry["copied_files"], entry["copied_bytes"], entry["files"]) == (0, 0, 10)
        folder = host.home / "clipflow-stage" / NAME
        assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == mtimes[i]


def test_a_damaged_stage_is_repaired(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
    data: dict[str, Path],
    first,
) -> None:
    name = "repair"  # a data set of its own: the tests pass in any order
    done, _ = stage(ssh_hosts, job, data, name)
    assert done.returncode == 0, done.stdout + done.stderr
    folders = [h.home / "clipflow-stage" / name for h in ssh_hosts.hosts]
    gone, cut, unrecorded = data["paths"][0], data["paths"][9], data["paths"][17]  # on hosts 0, 1, 2
    (folders[0] / gone).unlink()
    with open(folders[1] / cut, "r+b") as fh:
        fh.truncate(100)  # as a copy stopped halfway would leave it
    record_file = folders[2] / ".clipflow-staged.json"
    record = json.loads(record_file.read_text())
    del record["files"][unrecorded]  # copied complete, but stopped before the check: hashed, not copied again
    record_file.write_text(json.dumps(record))
    done, out = stage(ssh_hosts, job, data, name)
    assert done.returncode == 0, done.stdout + done.stderr
    hosts = json.loads(out.read_text())["hosts"]
    copied = [hosts[h.target]["copied_files"] for h in ssh_hosts.hosts]
    assert copied == [1, 1, 0]
    for i, folder in enumerate(folders):
        assert staged_files(ssh_hosts, i, name) == expected_share(data, i)
        record = json.loads((folder / ".clipflow-staged.json").read_text())["files"]
        assert sorted(record) == sorted(expected_share(data, i))
    assert (folders[1] / cut).read_bytes() == (data["root"] / cut).read_bytes()


def test_another_recipe_on_the_same_data_copies_only_what_it_adds(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
    data: dict[str, Path],
    first,
) -> None:
    name = "recipes"  # a data set of its own: the tests pass in any order
    done, _ = stage(ssh_hosts, job, data, name)
    assert done.returncode == 0, done.stdout + done.stderr
    splits = job["work"] / "splits-rotated"  # worker r reads worker r+1's list: each host needs 8 files more
    splits.mkdir()
    for r in range(WORKERS):
        shutil.copy(data["splits"] / f"worker{(r + 1) % WORKERS}.lst", splits / f"worker{r}.lst")
    done, out = stage(ssh_hosts, job, data, name, splits=splits)
    assert done.returncode == 0, done.stdout + done.stderr
    hosts = json.loads(out.read_text())["hosts"]
    assert [hosts[h.target]["copied_files"] for h in ssh_hosts.hosts] == [8, 8, 8]
    for i, h in enumerate(ssh_hosts.hosts):
        both = {**expected_share(data, i), **expected_share(data, (i + 1) % WORKERS)}
        both = {p: s for p, s in both.items() if p not in data["paths"][24:] or p in expected_share(data, i)}
        record = json.loads((h.home / "clipflow-stage" / name / ".clipflow-staged.json").read_text())["files"]
        assert sorted(record) == sorted(both)  # the first recipe's entries are kept
    again, _ = stage(ssh_hosts, job, data, name)  # the first recipe again: all there
    assert again.stdout.count(": nothing to copy (10 already staged, 10 files)") == 3, again.stdout


@pytest.fixture
def refused_cleanly(ssh_hosts: NetnsHosts, data: dict[str, Path], first):  # noqa: F811
    """After the test: the source untouched, and nothing staged under the name "bad" on any host."""
    before = tree_state(data["root"])
    yield
    assert tree_state(data["root"]) == before
    assert [staged_files(ssh_hosts, i, "bad") for i in range(3)] == [{}, {}, {}]
    for h in ssh_hosts.hosts:
        shutil.rmtree(h.home / "clipflow-stage" / "bad", ignore_errors=True)


@pytest.mark.usefixtures("refused_cleanly")
def test_a_host_too_small_for_its_share_is_refused(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
    data: dict[str, Path],
) -> None:
    ssh_hosts.mount_tmpfs(1, "/root/clipflow-stage/bad", "64k")
    try:
        done, out = stage(ssh_hosts, job, data, "bad")
        need = sum(expected_share(data, 1).values()) / 1000
        line = assert_refused(done, ssh_hosts.hosts[1].target, f"needs {need:.1f} kB", "has 65.5 kB free", "nothing")
        assert ssh_hosts.hosts[0].target not in line and not out.exists()
        assert staged_files(ssh_hosts, 1, "bad") == {}
    finally:
        ssh_hosts.unmount(1, "/root/clipflow-stage/bad")


@pytest.mark.usefixtures("refused_cleanly")
def test_rsync_missing_on_a_host_is_refused(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
    data: dict[str, Path],
) -> None:
    rsync = shutil.which("rsync")
    assert rsync is not None
    ssh_hosts.hide_program(2, rsync)
    try:
        done, _ = stage(ssh_hosts, job, data, "bad")
        line = assert_refused(done, ssh_hosts.hosts[2].target, "rsync is not installed there")
        assert ssh_hosts.hosts[0].target not in line
    finally:
        ssh_hosts.unmount(2, rsync)


@pytest.mark.usefixtures("refused_cleanly")
def test_a_staging_folder_that_is_not_writable_is_refused(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
    data: dict[str, Path],
) -> None:
    ssh_hosts.mount_readonly(0, "/root/clipflow-stage")
    try:
        done, _ = stage(ssh_hosts, job, data, "bad")
        assert_refused(done, ssh_hosts.hosts[0].target, "/root/clipflow-stage/bad is not writable", "Read-only")
    finally:
        ssh_hosts.unmount(0, "/root/clipflow-stage")


@pytest.mark.usefixtures("refused_cleanly")
def test_a_video_changed_after_the_scan_is_refused(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
    data: dict[str, Path],
) -> None:
    changed = data["root"] / data["paths"][12]
    original = changed.read_bytes()
    recorded = hashlib.sha256(original).hexdigest()[:12]
    copy = job["work"] / "root-changed"
    shutil.copytree(data["root"], copy)  # the source itself stays untouched; a changed copy of it is staged
    (copy / data["paths"][12]).write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # same size, new mtime
    now = hashlib.sha256((copy / data["paths"][12]).read_bytes()).hexdigest()[:12]
    done, _ = stage(ssh_hosts, job, data, "bad", root=copy)
    assert_refused(done, data["paths"][12], f"recorded sha256 {recorded}, now {now}", "--forcerun data_scan")


@pytest.mark.usefixtures("refused_cleanly")
def test_lists_and_checks_that_do_not_match_are_refused(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
    data: dict[str, Path],
) -> None:
    index = job["work"] / "index-short"
    shutil.copytree(data["index"], index, dirs_exist_ok=True)
    videos = json.loads((index / "videos.json").read_text())
    del videos["files"][data["paths"][27]]
    (index / "videos.json").write_text(json.dumps(videos))
    done, _ = stage(ssh_hosts, job, data, "bad", index=index)
    assert_refused(done, data["paths"][27], "videos.json", "rerun the data stage")

    checks = job["work"] / "checks-old.json"
    checks.write_text(json.dumps({"ok": True, "hosts": []}))
    done, _ = stage(ssh_hosts, job, data, "bad", checks=checks)
    assert_refused(done, str(checks), "no storage decision", "rerun the cluster check")


def test_shared_storage_stages_nothing(ssh_hosts: NetnsHosts, job: dict[str, Path], data: dict[str, Path]) -> None:  # noqa: F811
    checks = job["work"] / "checks-shared.json"
    checks.write_text(json.dumps({"storage": {"setting": "auto", "mode": "shared", "reason": "one file system"}}))
    done, out = stage(ssh_hosts, job, data, "shared", checks=checks)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == {"version": 1, "storage": "shared"}
    assert not any((h.home / "clipflow-stage" / "shared").exists() for h in ssh_hosts.hosts)


def test_unstage_removes_staged_folders_only(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
    data: dict[str, Path],
    first,
) -> None:
    where = "~/clipflow-unstage"  # a staging folder of its own: the tests pass in any order
    for name in ("one", "other"):
        done, _ = stage(ssh_hosts, job, data, name, stage_dir=where)
        assert done.returncode == 0, done.stdout + done.stderr
    mine = ssh_hosts.hosts[0].home / "clipflow-unstage" / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("the user's own")
    plan = str(job["plan"])

    refused = run(ssh_hosts, "cluster", "unstage", "--plan", plan, "--stage-dir", where, "--name", "mine")
    assert_refused(refused, ssh_hosts.hosts[0].target, "/root/clipflow-unstage/mine", ".clipflow-staged.json")
    assert (mine / "notes.txt").read_text() == "the user's own"

    one = run(ssh_hosts, "cluster", "unstage", "--plan", plan, "--stage-dir", where, "--name", "one")
    assert one.returncode == 0, one.stdout + one.stderr
    for h in ssh_hosts.hosts:
        record = h.home / "clipflow-unstage" / "other" / ".clipflow-staged.json"
        assert f"unstage {h.target}: removed /root/clipflow-unstage/one (" in one.stdout, one.stdout
        assert not (h.home / "clipflow-unstage" / "one").exists() and record.exists()

    rest = run(ssh_hosts, "cluster", "unstage", "--plan", plan, "--stage-dir", where)
    assert rest.returncode == 0, rest.stdout + rest.stderr
    assert "left /root/clipflow-unstage/mine" in rest.stdout
    for h in ssh_hosts.hosts:
        assert [p.name for p in (h.home / "clipflow-unstage").iterdir()] == (
            ["mine"] if h is ssh_hosts.hosts[0] else []
        )
    assert all((h.home / "clipflow-stage" / NAME).is_dir() for h in ssh_hosts.hosts)  # another folder: untouched


def test_an_interrupted_stage_resumes_from_its_partial_copy(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, Path],
) -> None:
    """A 24 MB video to host 0 over a link shaped to 16 Mbit/s (tc on its veth); the stage is killed (its process
    group, as Ctrl-C or a lost launcher would end it) once rsync has part of the file there. rsync's partial copy
    stays on the host; the next stage, on the unshaped link, finishes from it: fewer bytes cross host 0's link than
    the file holds, and the copy is checked against the scan's sha256."""
    work = job["work"] / "big"
    root, index, splits = work / "root", work / "index", work / "splits"
    for folder in (root / "videos", index, splits):
        folder.mkdir(parents=True)
    sizes = {"videos/big.mp4": 24_000_000, "videos/small1.mp4": 4000, "videos/small2.mp4": 4000}
    records = {}
    for path, size in sizes.items():
        (root / path).write_bytes(random.Random(path).randbytes(size))
        st = (root / path).stat()
        digest = hashlib.sha256((root / path).read_bytes()).hexdigest()
        records[path] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    (index / "videos.json").write_text(json.dumps({"version": 1, "root": str(root), "files": records}))
    for r, path in enumerate(sizes):
        (splits / f"worker{r}.lst").write_text(f"{path} 16 0\n")
    (index / "val.lst").write_text("videos/small1.mp4 16 0\n")
    data = {"root": root, "index": index, "splits": splits}
    veth = ssh_hosts.hosts[0].veth
    shaped = subprocess.run(["tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "16mbit", "burst", "32kbit",
                             "latency", "400ms"], capture_output=True, text=True)  # fmt: skip
    if shaped.returncode != 0:
        pytest.skip(f"cannot shape a link here (tc: {shaped.stderr.strip()})")
    videos = ssh_hosts.hosts[0].home / "clipflow-stage" / "big" / "videos"
    partial_dir = videos / ".clipflow-partial"  # where rsync keeps an interrupted file
    try:
        out = job["work"] / "staged-big.json"
        argv = [sys.executable, "-m", "clipflow", "cluster", "stage", "--plan", str(job["plan"]), "--checks",
                str(job["checks"]), "--index-dir", str(index), "--splits-dir", str(splits), "--root", str(root),
                "--stage-dir", "~/clipflow-stage", "--name", "big", "--out", str(out)]  # fmt: skip
        env = {**python_env(), "HOME": str(ssh_hosts.local_home), **ssh_hosts.agent_env}
        stager = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)  # fmt: skip

        def receiving() -> int:  # rsync's temporary file while the copy runs
            return sum(p.stat().st_size for p in videos.glob(".big.mp4.*")) if videos.is_dir() else 0

        deadline = time.monotonic() + 60
        while receiving() < 4_000_000 and stager.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stager.poll() is None, "the stage ended before it could be interrupted"
        os.killpg(stager.pid, signal.SIGTERM)
        stager.wait(timeout=30)
        time.sleep(1)  # the host's rsync keeps what it received when its connection ends
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], capture_output=True)

    def partial_size() -> int:
        return sum(p.stat().st_size for p in partial_dir.glob("*")) if partial_dir.is_dir() else 0

    kept = partial_size()
    assert 0 < kept < sizes["videos/big.mp4"] and not out.exists()
    sent_before = int(Path(f"/sys/class/net/{veth}/statistics/tx_bytes").read_text())
    done, out = stage(ssh_hosts, job, data, "big")
    assert done.returncode == 0, done.stdout + done.stderr
    sent = int(Path(f"/sys/class/net/{veth}/statistics/tx_bytes").read_text()) - sent_before
    print(f"interrupted stage: {kept} bytes kept on the host, {sent} bytes sent to finish")
    assert sent < sizes["videos/big.mp4"] - kept // 2, (sent, kept)  # the partial copy was used, not sent again
    staged = ssh_hosts.hosts[0].home / "clipflow-stage" / "big" / "videos" / "big.mp4"
    assert hashlib.sha256(staged.read_bytes()).hexdigest() == records["videos/big.mp4"]["sha256"]
    assert not partial_size()
    unstaged = run(ssh_hosts, "cluster", "unstage", "--plan", str(job["plan"]), "--name", "big")
    assert unstaged.returncode == 0, unstaged.stdout + unstaged.stderr

"""Cluster preparation and the ssh launcher against real sshd hosts in network namespaces.

tests/netns_hosts.py makes three hosts (each its own network namespace, address, sshd,
host key and home directory) and removes them afterwards. The launching side uses a
fresh HOME (``local_home``) and an ssh-agent holding an "admin" key that every host
accepts: the access a user has before clipflow authorises its own key. The tests run
in order on the same hosts (module-scoped fixture).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_refused, free_port, python_env
from netns_hosts import NetnsHosts, ssh_hosts  # noqa: F401

pytestmark = pytest.mark.hosts


def run(hosts: NetnsHosts, *args: str, timeout: float = 180, agent: bool = True) -> subprocess.CompletedProcess:
    """``python -m clipflow ARGS`` on the launching side (HOME = local_home; the agent when asked)."""
    env = {**python_env(), "HOME": str(hosts.local_home), **(hosts.agent_env if agent else {})}
    if not agent:
        env.pop("SSH_AUTH_SOCK", None)
    return subprocess.run(
        [sys.executable, "-m", "clipflow", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def job(ssh_hosts: NetnsHosts, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # noqa: F811
    """Paths the tests share: the job's key (not made yet), the project known_hosts, a hosts file."""
    work = tmp_path_factory.mktemp("cluster")
    hosts_file = work / "hosts"
    hosts_file.write_text("# the three namespaces\n" + "".join(f"{h.target}\n" for h in ssh_hosts.hosts))
    return {
        "key": str(ssh_hosts.local_home / ".ssh" / "id_ed25519"),
        "known_hosts": str(work / "known_hosts"),
        "hosts_file": str(hosts_file),
        "work": str(work),
    }


@pytest.fixture(scope="module")
def first_keys(ssh_hosts: NetnsHosts, job: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict]:  # noqa: F811
    """The first `cluster keys` on the fresh hosts and its report (--out), what
    test_keys_are_authorised_once_and_modes_fixed checks: made before any test that needs the key (through
    ``authorised``), whichever of them runs first."""
    wrong = ssh_hosts.hosts[1].home / ".ssh"  # host 2 has a ~/.ssh with modes sshd refuses, and a key of its own
    wrong.mkdir()
    wrong.chmod(0o755)
    (wrong / "authorized_keys").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherKeyOfTheUser other@box")
    (wrong / "authorized_keys").chmod(0o644)
    assert not (ssh_hosts.hosts[0].home / ".ssh").exists()

    report_file = Path(job["work"]) / "keys.json"
    done = run(
        ssh_hosts, "cluster", "keys", "--hosts-file", job["hosts_file"], *ssh_args(job), "--out", str(report_file)
    )
    return done, json.loads(report_file.read_text()) if report_file.exists() else {}


@pytest.fixture(scope="module")
def authorised(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, str],
    first_keys: tuple[subprocess.CompletedProcess, dict],
) -> dict[str, str]:
    """``job`` once the job's key is authorised on every host and their host keys pinned (after first_keys, a
    no-op)."""
    done = run(ssh_hosts, "cluster", "keys", "--hosts-file", job["hosts_file"], *ssh_args(job))
    assert done.returncode == 0, done.stdout + done.stderr
    return job


def ssh_args(job: dict[str, str]) -> list[str]:
    return ["--ssh-key", job["key"], "--known-hosts", job["known_hosts"]]


def test_keys_are_authorised_once_and_modes_fixed(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, str],
    first_keys: tuple[subprocess.CompletedProcess, dict],
) -> None:
    wrong = ssh_hosts.hosts[1].home / ".ssh"  # the ~/.ssh that first_keys found with modes sshd refuses
    report_file = Path(job["work"]) / "keys.json"
    done, report = first_keys
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"made a new ed25519 key pair {job['key']} (+ .pub)" in report["local"]
    first, second, third = (report["hosts"][h.target] for h in ssh_hosts.hosts)
    assert (
        first
        == third
        == [
            "created ~/.ssh (700)",
            "created ~/.ssh/authorized_keys (600)",
            "added the job's key to ~/.ssh/authorized_keys",
        ]
    )
    assert second == [
        "~/.ssh had mode 755: now 700",
        "~/.ssh/authorized_keys had mode 644: now 600",
        "added the job's key to ~/.ssh/authorized_keys",
    ]
    assert done.stdout.count("pinned its host key ssh-ed25519 SHA256:") == 3
    public = Path(job["key"] + ".pub").read_text().strip()
    for h in ssh_hosts.hosts:
        authorized = h.home / ".ssh" / "authorized_keys"
        assert (oct(authorized.parent.stat().st_mode & 0o777), oct(authorized.stat().st_mode & 0o777)) == (
            "0o700",
            "0o600",
        )
        assert authorized.read_text().splitlines().count(public) == 1
    assert "OtherKeyOfTheUser" in (wrong / "authorized_keys").read_text()  # the user's own entry is kept

    again = run(
        ssh_hosts, "cluster", "keys", "--hosts-file", job["hosts_file"], *ssh_args(job), "--out", str(report_file)
    )
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(report_file.read_text())
    assert report["local"] == [] and all(c == [] for c in report["hosts"].values()) and report["pinned"] == []
    for h in ssh_hosts.hosts:
        assert (h.home / ".ssh" / "authorized_keys").read_text().splitlines().count(public) == 1

    private = Path(job["key"]).read_text().strip().splitlines()[1]  # a line of the private key's body
    for h in ssh_hosts.hosts:
        for path in h.home.rglob("*"):
            if path.is_file():
                assert private not in path.read_text(errors="replace"), f"private key material in {path}"

    # the job's key alone now logs in (no agent), with the pinned host keys and strict checking
    for h in ssh_hosts.hosts:
        login = subprocess.run(
            ["ssh", "-i", job["key"], "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={job['known_hosts']}",
             "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", h.target, "echo", "in"],
            env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}, capture_output=True, text=True,
            timeout=30,
        )  # fmt: skip
        assert login.stdout.strip() == "in", login.stderr


def _plan(ssh_hosts: NetnsHosts, job: dict[str, str], name: str, ssh_key: str = "") -> Path:  # noqa: F811
    out = Path(job["work"]) / name
    args = ["--launcher", "ssh", "--hosts-file", job["hosts_file"], "--num-workers", "3", "--num-servers", "3"]
    args += ["--root-port", str(free_port()), "--heartbeat-timeout", "6", *ssh_args(job), "--out", str(out)]
    if ssh_key:
        args += ["--ssh-key", ssh_key]
    done = run(ssh_hosts, "cluster", "plan", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.mark.usefixtures("authorised")  # the job's key authorised, the host keys pinned
def test_checks_table_names_a_host_whose_sshd_is_down(ssh_hosts: NetnsHosts, job: dict[str, str]) -> None:  # noqa: F811
    plan = _plan(ssh_hosts, job, "plan-checks.json")
    out = Path(job["work"]) / "checks.json"
    ok = run(ssh_hosts, "cluster", "check", "--plan", str(plan), "--path", job["work"], "--out", str(out))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(out.read_text())["ok"] is True
    down = ssh_hosts.hosts[2]
    ssh_hosts.stop_sshd(2)
    try:
        bad = run(ssh_hosts, "cluster", "check", "--plan", str(plan), "--path", "/no/such/data", "--out", str(out))
    finally:
        ssh_hosts.start_sshd(2)
    assert bad.returncode == 2
    assert f"{down.target}: ssh: {down.target}: cannot connect" in bad.stderr
    assert "Debug with: ssh -vvv -p 22 -i" in bad.stderr
    row = next(line for line in bad.stdout.splitlines() if line.startswith(down.target))
    assert " NO " in row and "cannot connect" in row
    checks = json.loads(out.read_text())
    assert checks["ok"] is False
    by_host = {c["host"]: c for c in checks["hosts"]}
    assert by_host[down.target]["ok"] is False
    assert by_host[ssh_hosts.hosts[0].target]["problems"] == ["/no/such/data does not exist there"]
    assert by_host[ssh_hosts.hosts[0].target]["facts"]["torch"] == checks["launcher"]["torch"]


@pytest.mark.usefixtures("authorised")  # the job's key authorised, the host keys pinned
def test_the_checks_decide_the_storage_with_a_marker_every_host_must_see_and_answer(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, str],
) -> None:
    """These hosts share this machine's disk: auto decides shared. With the run's folder read-only on host 2 (it
    sees the marker but cannot answer beside it), auto decides local naming that host, shared set by the user
    fails naming it, and with local storage a data root missing on the hosts is no failure (it is staged)."""
    plan = _plan(ssh_hosts, job, "plan-storage.json")
    folder = Path(job["work"]) / "storage"
    folder.mkdir()
    out = folder / "checks.json"

    def check(storage: str, *paths: str) -> tuple[subprocess.CompletedProcess, dict]:
        args = [arg for path in paths for arg in ("--path", path)]
        done = run(ssh_hosts, "cluster", "check", "--plan", str(plan), *args, "--storage", storage,
                   "--marker-dir", str(folder), "--out", str(out))  # fmt: skip
        return done, json.loads(out.read_text())

    done, checks = check("auto", job["work"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert checks["storage"] == {"setting": "auto", "mode": "shared", "reason": f"every host sees and writes {folder}"}
    assert f"storage shared (auto): every host sees and writes {folder}" in done.stdout
    ssh_hosts.mount_readonly(1, folder)
    try:
        done, checks = check("auto", "/no/such/data")
        assert done.returncode == 0, done.stdout + done.stderr  # the data root is staged with local storage
        reason = checks["storage"]["reason"]
        assert checks["storage"]["mode"] == "local" and ssh_hosts.hosts[1].target in reason, checks["storage"]
        assert "cannot write beside it: Read-only file system" in reason
        assert ssh_hosts.hosts[0].target not in reason and ssh_hosts.hosts[2].target not in reason
        done, checks = check("shared", job["work"])
        assert_refused(
            done, ssh_hosts.hosts[1].target, "cluster.storage is shared, but it sees", "set cluster.storage: local"
        )
        assert checks["storage"]["mode"] == "shared" and checks["ok"] is False
    finally:
        ssh_hosts.unmount(1, folder)
    assert not list(folder.glob(".clipflow-storage-*"))  # the marker and the replies are gone


@pytest.mark.usefixtures("authorised")  # the job's key authorised, the host keys pinned
def test_a_changed_host_key_is_refused_until_reviewed(ssh_hosts: NetnsHosts, job: dict[str, str]) -> None:  # noqa: F811
    host = ssh_hosts.hosts[0]
    ssh_hosts.change_host_key(0)
    done = run(ssh_hosts, "cluster", "keys", "--hosts", host.target, *ssh_args(job))
    assert done.returncode == 2
    assert f"{host.target}: its host key changed" in done.stderr
    assert f"ssh-keygen -R {host.address} -f {job['known_hosts']}" in done.stderr
    forget = subprocess.run(["ssh-keygen", "-R", host.address, "-f", job["known_hosts"]], capture_output=True)
    assert forget.returncode == 0
    accepted = run(ssh_hosts, "cluster", "keys", "--hosts", host.target, *ssh_args(job))
    assert accepted.returncode == 0, accepted.stderr
    assert "pinned its host key" in accepted.stdout


@pytest.mark.usefixtures("authorised")  # the job's key authorised, the host keys pinned
def test_bad_hosts_ports_keys_homes_and_sync_targets_are_named(ssh_hosts: NetnsHosts, job: dict[str, str]) -> None:  # noqa: F811
    h = ssh_hosts.hosts[1]
    wrong_port = run(ssh_hosts, "cluster", "keys", "--hosts", f"{h.target}:2299", *ssh_args(job))
    assert wrong_port.returncode == 2 and f"{h.target}:2299: cannot connect" in wrong_port.stderr
    unknown = run(ssh_hosts, "cluster", "keys", "--hosts", "root@no-such-host.invalid", *ssh_args(job))
    assert unknown.returncode == 2 and "root@no-such-host.invalid: cannot connect" in unknown.stderr
    stranger = Path(job["work"]) / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    plan = _plan(ssh_hosts, job, "plan-stranger.json", ssh_key=str(stranger))  # a key no host authorised
    out = Path(job["work"]) / "checks-stranger.json"
    refused = run(ssh_hosts, "cluster", "check", "--plan", str(plan), "--out", str(out), agent=False)
    assert refused.returncode == 2
    assert f"{h.target}: ssh: {h.target}: the login was refused" in refused.stderr
    assert f"-i {stranger}" in refused.stderr  # the ssh -vvv command to debug it
    malformed = Path(job["work"]) / "bad_hosts"
    malformed.write_text(f"{h.target}\nroot@:22\n")
    bad_file = run(ssh_hosts, "cluster", "keys", "--hosts-file", str(malformed), *ssh_args(job))
    assert bad_file.returncode == 2 and f"{malformed} line 2" in bad_file.stderr

    ro = subprocess.run(["nsenter", "-t", str(ssh_hosts.sshd_pid(1)), "-m", "mount", "-o", "remount,bind,ro", "/root"])
    assert ro.returncode == 0
    try:
        (h.home / ".ssh").rename(h.home / ".ssh-away")
        unwritable = run(ssh_hosts, "cluster", "keys", "--hosts", h.target, *ssh_args(job))
    finally:
        subprocess.run(["nsenter", "-t", str(ssh_hosts.sshd_pid(1)), "-m", "mount", "-o", "remount,bind,rw", "/root"])
        (h.home / ".ssh-away").rename(h.home / ".ssh")
    assert unwritable.returncode == 2
    assert f"{h.target}: cannot authorise the job's key: cannot create /root/.ssh" in unwritable.stderr

    plan = _plan(ssh_hosts, job, "plan-sync.json")
    missing = run(ssh_hosts, "cluster", "sync", "--plan", str(plan), "--dst", "/no/such/parent/job")
    assert missing.returncode == 2
    assert "the parent folder of /no/such/parent/job does not exist there" in missing.stderr


def _pids_left(ssh_hosts: NetnsHosts, timeout: float) -> dict[int, list[str]]:  # noqa: F811
    """Processes other than sshd still in each namespace, after waiting up to ``timeout`` for them to go."""
    deadline = time.monotonic() + timeout
    while True:
        left = {}
        for i in range(len(ssh_hosts.hosts)):
            names = []
            for pid in ssh_hosts.pids(i):
                try:
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    state = Path(f"/proc/{pid}/stat").read_text().split()[2]
                except OSError:
                    continue
                if comm != "sshd" and state != "Z":
                    names.append(f"{pid} {comm}")
            if names:
                left[i] = names
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


SECRET = "s3cr3t-4f9a"
LONG_JOB = (
    "import hashlib, os, time, torch; from clipflow.ps import KVStore\n"
    "kv = KVStore.create('dist_sync'); kv.init(0, torch.zeros(1000)); g = torch.ones(1000)\n"
    "seen = hashlib.sha256(os.environ.get('TEST_SECRET', '').encode()).hexdigest()[:16]\n"
    "print('worker', kv.rank, 'started; secret digest', seen, flush=True)\n"
    "end = time.time() + 120\n"
    "while time.time() < end:\n"
    "    kv.pushpull(0, g, g); g.fill_(1.0); time.sleep(0.05)\n"
    "kv.close()\n"
)
# LONG_JOB that stops on SIGUSR1: the workers agree through the sum of a flag (all stop after the same round)
NOTICED_JOB = (
    "import os, signal, time, torch; from clipflow.ps import KVStore\n"
    "told = []; signal.signal(signal.SIGUSR1, lambda *a: told.append(1))\n"
    "kv = KVStore.create('dist_sync'); kv.init(0, torch.zeros(1)); g = torch.zeros(1)\n"
    "print('worker', kv.rank, 'started', flush=True)\n"
    "end = time.time() + 120\n"
    "while time.time() < end:\n"
    "    g.fill_(float(len(told))); kv.pushpull(0, g, g)\n"
    "    if g[0] > 0: break\n"
    "    time.sleep(0.05)\n"
    "kv.close(); print('worker', kv.rank, 'got SIGUSR1' if told else 'ran out', flush=True)\n"
)


def _launch(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, str],
    log_dir: Path,
    *extra: str,
    cwd: Path | None = None,
    program: str = LONG_JOB,
) -> subprocess.Popen:
    env = {**python_env(), "HOME": str(ssh_hosts.local_home), **ssh_hosts.agent_env}
    args = ["launch", "-n", "3", "-s", "3", "-H", job["hosts_file"], "--port", str(free_port()),
            "--heartbeat-timeout", "6", "--grace", "5", "--log-dir", str(log_dir), *ssh_args(job), *extra,
            "--", sys.executable, "-c", program]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "clipflow", *args],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _wait_started(proc: subprocess.Popen, log_dir: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = [log_dir / f"worker-{r}.log" for r in range(3)]
        if all(p.exists() and "started" in p.read_text() for p in logs):
            return
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.3)
    raise AssertionError("the workers did not start in time")


def test_a_host_cut_off_mid_run_fails_the_run_naming_it(ssh_hosts: NetnsHosts, authorised: dict[str, str]) -> None:  # noqa: F811
    job = authorised
    log_dir = Path(job["work"]) / "cutoff"
    proc = _launch(ssh_hosts, job, log_dir)
    try:
        _wait_started(proc, log_dir)
        cut = ssh_hosts.hosts[2]
        ssh_hosts.link_down(2)
        cut_at = time.monotonic()
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - cut_at
    finally:
        ssh_hosts.link_up(2)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode not in (0, None), out
    assert took < 30, f"the launcher took {took:.0f} s"
    assert f"on {cut.address} stopped answering" in out, out  # the scheduler names the silent host's roles
    assert "clipflow launch:" in out and "failed" in out
    assert _pids_left(ssh_hosts, 30) == {}


def test_ctrl_c_on_the_launcher_ends_every_process_on_every_host(
    ssh_hosts: NetnsHosts,  # noqa: F811
    authorised: dict[str, str],
) -> None:
    job = authorised
    log_dir = Path(job["work"]) / "ctrl-c"
    src = Path(job["work"]) / "launch-src"
    src.mkdir()
    (src / "train_me.py").write_text("print('synced')\n")
    extra = ["--sync-dst-dir", "~/launch-job", "--env", f"TEST_SECRET={SECRET}"]
    proc = _launch(ssh_hosts, job, log_dir.absolute(), *extra, cwd=src)
    try:
        _wait_started(proc, log_dir)
        carriers = [p for p in _cmdlines_with(SECRET) if p != proc.pid]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, out
    assert "clipflow launch: got SIGINT; stopped 7 running processes" in out
    assert _pids_left(ssh_hosts, 30) == {}
    assert carriers == []  # no ssh client, supervisor or role had the secret on its command line ...
    for r, h in enumerate(ssh_hosts.hosts):
        digest = hashlib.sha256(SECRET.encode()).hexdigest()[:16]
        assert f"secret digest {digest}" in (log_dir / f"worker-{r}.log").read_text()  # ... but every worker got it
        assert (h.home / "launch-job" / "train_me.py").read_text() == "print('synced')\n"


def test_sigusr1_to_the_launcher_reaches_the_programs_on_every_host(
    ssh_hosts: NetnsHosts,  # noqa: F811
    authorised: dict[str, str],
) -> None:
    """`clipflow launch` over ssh passes SIGUSR1 on (a notice line to each host's remote_exec, which signals its
    program): the programs end cleanly, the scheduler and servers with them, and nothing is left on the hosts."""
    job = authorised
    log_dir = Path(job["work"]) / "notice"
    proc = _launch(ssh_hosts, job, log_dir, program=NOTICED_JOB)
    try:
        _wait_started(proc, log_dir)
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "clipflow launch: got SIGUSR1: a notice; passed SIGUSR1 on to 3 workers" in out
    assert "clipflow launch: got SIGUSR1; every worker then exited 0" in out
    for r in range(3):
        assert f"worker {r} got SIGUSR1" in (log_dir / f"worker-{r}.log").read_text()
    assert _pids_left(ssh_hosts, 30) == {}


def _cmdlines_with(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.usefixtures("authorised")  # the job's key authorised, the host keys pinned
def test_the_tiny_recipe_trains_across_the_three_hosts_through_snakemake(
    ssh_hosts: NetnsHosts,  # noqa: F811
    job: dict[str, str],
    repo: Path,
) -> None:
    from workflow_helpers import TINY, three_host_cluster, workflow_for_hosts

    work = Path(job["work"]) / "flow"
    work.mkdir()
    python = workflow_for_hosts(repo, work)  # the roles on the hosts run this checkout's clipflow
    # storage shared: the hosts share this disk, the run as it was before storage could be local
    shared = {"sync_dst_dir": "~/clipflow-job", "storage": "shared"}
    cluster = three_host_cluster(python, job["key"], job["known_hosts"], **shared)
    overrides = {**TINY["overrides"], "train": {**TINY["overrides"]["train"], "epochs": 2}}
    (work / "tiny.yaml").write_text(json.dumps({**TINY, "overrides": overrides, "run": "hosts", "cluster": cluster}))
    env = {**python_env(), "HOME": str(ssh_hosts.local_home), **ssh_hosts.agent_env}
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "train_slowfast", "--configfile", "tiny.yaml",
         "--config", f"cluster={{hosts_file: {job['hosts_file']}}}"],  # merged into the file's cluster
        cwd=work, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    train_log = (work / "logs/hosts/train.log").read_text()
    assert f"[worker 0 {ssh_hosts.hosts[0].target}] linear scaling rule" in train_log
    plan = json.loads((work / "results/hosts/cluster/plan.json").read_text())
    for r, h in enumerate(ssh_hosts.hosts):
        placed = {(x["role"], x["rank"]): x["host"] for x in plan["roles"]}
        assert placed[("worker", r)] == placed[("server", r)] == h.target  # a server beside each worker
        assert (work / f"logs/hosts/train/worker-{r}.log").exists()
        assert (h.home / "clipflow-job" / "Snakefile").exists()  # synced to that host's own home
        assert not (h.home / "clipflow-job" / "results").exists()
    checks = json.loads((work / "results/hosts/cluster/checks.json").read_text())
    assert checks["ok"] is True and checks["storage"]["mode"] == "shared"
    assert json.loads((work / "results/hosts/cluster/staged.json").read_text()) == {"version": 1, "storage": "shared"}
    assert plan["security"] == "curve"  # not on loopback: every parameter-server socket is encrypted
    metrics = json.loads((work / "results/hosts/metrics.json").read_text())
    assert 0.0 <= metrics["top1"] <= 1.0 and metrics["num_videos"] == TINY["data"]["synthetic"]["num_val"]
    assert _pids_left(ssh_hosts, 30) == {}
    _collected_from_the_hosts_and_a_damaged_log_named(ssh_hosts, work, env)


def _collected_from_the_hosts_and_a_damaged_log_named(ssh_hosts: NetnsHosts, work: Path, env: dict) -> None:  # noqa: F811
    """The workflow's collect rule brought every role's log home from its host's own ~/clipflow-job, and rank 0's
    files; with one byte added to host 2's worker log on that host, collecting again names the host and file."""
    manifest = json.loads((work / "results/hosts/collected/manifest.json").read_text())
    logs = {(f["role"], f["rank"]): f for f in manifest["files"] if f["kind"] == "log"}
    assert len(logs) == 7 and manifest["verified"] is True  # scheduler, 3 servers, 3 workers
    for r, h in enumerate(ssh_hosts.hosts):
        got = logs[("worker", r)]
        assert got["host"] == h.target and got["remote"] == f"~/clipflow-job/logs/hosts/train/on-host/worker-{r}.log"
        on_host = h.home / "clipflow-job/logs/hosts/train/on-host" / f"worker-{r}.log"
        assert got["sha256"] == hashlib.sha256(on_host.read_bytes()).hexdigest() == _sha(Path(work / got["local"]))
    rank0 = {f["kind"]: f for f in manifest["files"] if f["kind"] not in ("log", "restarts")}  # restarts: from home
    assert {"model", "checkpoint", "best", "best_facts"} == set(rank0) and {f["host"] for f in rank0.values()} == {
        ssh_hosts.hosts[0].target
    }
    assert rank0["checkpoint"]["remote"].endswith("/epoch_0002.pt")

    damaged = ssh_hosts.hosts[1].home / "clipflow-job/logs/hosts/train/on-host/server-1.log"
    with open(damaged, "ab") as fh:
        fh.write(b"\n")
    args = [
        "--plan",
        "results/hosts/cluster/plan.json",
        "--log-dir",
        "logs/hosts/train",
        "--checkpoint-root",
        "results/hosts/checkpoints",
        "--model",
        "results/hosts/train/model_final.pt",
        "--out",
        "results/again",
    ]
    again = subprocess.run([sys.executable, "-m", "clipflow", "collect", *args], cwd=work, env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert again.returncode == 2, again.stdout + again.stderr
    problems = [line for line in again.stderr.splitlines() if line.startswith("clipflow: error: host ")]
    assert len(problems) == 1, again.stderr
    host = ssh_hosts.hosts[1]
    assert problems[0].startswith(
        f"clipflow: error: host {host.target}: ~/clipflow-job/logs/hosts/train/on-host/server-1.log: sha256 recorded "
    ) and problems[0].endswith("damaged on the host or in transit")
    assert host.address in problems[0] and not (work / "results/again/manifest.json").exists()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()

"""Self-test of the fake-host fixture (tests/netns_hosts.py): logins, per-host homes, sshd control, cleanup."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from netns_hosts import (
    NetnsHosts,
    link_names,
    netns_names,
    pid_alive,
    shared_under_root,
    ssh_hosts,  # noqa: F401  (the fixture)
    tcp_accepts,
    wait_until,
)

SSH_OPTS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]


def ssh(h: NetnsHosts, i: int, command: str) -> subprocess.CompletedProcess[str]:
    host = h.hosts[i]
    argv = ["ssh", *SSH_OPTS, "-o", "ConnectTimeout=5", "-p", str(host.port), host.target, command]
    return subprocess.run(argv, env={**os.environ, **h.agent_env}, capture_output=True, text=True, timeout=20)


def connect_error(address: str, port: int, timeout_s: float = 1.0) -> type[OSError] | None:
    """The OSError subclass a TCP connect raises, or None if it succeeds."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return type(exc)


def host_key_seen(address: str) -> str:
    out = subprocess.run(["ssh-keyscan", "-t", "ed25519", address], capture_output=True, text=True, timeout=10)
    keys = [line.split(maxsplit=1)[1] for line in out.stdout.splitlines() if line and not line.startswith("#")]
    assert len(keys) == 1, (out.stdout, out.stderr)
    return keys[0]


def test_each_host_has_its_own_home(ssh_hosts: NetnsHosts) -> None:  # noqa: F811
    h = ssh_hosts
    assert len({host.address for host in h.hosts}) == 3
    for host in h.hosts:
        assert sorted(p.name for p in host.home.iterdir()) == sorted(q.name for q in shared_under_root())
        assert host.home.stat().st_mode & 0o777 == 0o700 and host.home.stat().st_uid == 0
    real_marker_before = Path("/root/marker").exists()
    for i, host in enumerate(h.hosts):
        result = ssh(h, i, "echo hello > ~/marker && echo $HOME")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "/root"
        assert (host.home / "marker").read_text() == "hello\n"
        assert [(other.home / "marker").exists() for other in h.hosts] == [j <= i for j in range(3)]
    assert Path("/root/marker").exists() == real_marker_before  # the real /root is untouched
    # sessions are over: only the sshd listener is left in each namespace (no wrapper processes)
    assert all(wait_until(lambda i=i: h.pids(i) == [], 5) for i in range(3)), [h.pids(i) for i in range(3)]


def test_marker_lands_only_on_the_host_written_to(ssh_hosts: NetnsHosts) -> None:  # noqa: F811
    h = ssh_hosts
    try:
        result = ssh(h, 1, "echo only-on-2 > ~/only2")
        assert result.returncode == 0, result.stderr
        assert [(host.home / "only2").exists() for host in h.hosts] == [False, True, False]
    finally:  # the homes as they were: test_each_host_has_its_own_home lists them
        (h.hosts[1].home / "only2").unlink(missing_ok=True)


def test_run_local_isolates_the_launcher_home(ssh_hosts: NetnsHosts) -> None:  # noqa: F811
    h = ssh_hosts
    real_known_hosts = Path("/root/.ssh/known_hosts")
    before = real_known_hosts.read_bytes() if real_known_hosts.exists() else None
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new", h.hosts[0].target, "true"]
    result = h.run_local(argv, capture_output=True, text=True, timeout=20)
    assert result.returncode == 0, result.stderr
    known_hosts = h.local_home / ".ssh" / "known_hosts"
    found = subprocess.run(["ssh-keygen", "-F", h.hosts[0].address, "-f", known_hosts], capture_output=True, text=True)
    assert found.returncode == 0 and "ssh-ed25519" in found.stdout  # (entries may be hashed)
    assert (real_known_hosts.read_bytes() if real_known_hosts.exists() else None) == before


def test_stop_and_start_sshd(ssh_hosts: NetnsHosts) -> None:  # noqa: F811
    h = ssh_hosts
    host = h.hosts[1]
    h.stop_sshd(1)
    assert h.sshd_pid(1) is None
    assert connect_error(host.address, host.port) is ConnectionRefusedError
    assert tcp_accepts(h.hosts[0].address, 22)
    h.start_sshd(1)
    assert connect_error(host.address, host.port) is None
    assert ssh(h, 1, "true").returncode == 0


def test_change_host_key(ssh_hosts: NetnsHosts) -> None:  # noqa: F811
    h = ssh_hosts
    address = h.hosts[2].address
    before = host_key_seen(address)
    assert before.split()[:2] == h.hosts[2].host_key_pub.read_text().split()[:2]
    h.change_host_key(2)
    after = host_key_seen(address)
    assert after != before
    assert after.split()[:2] == h.hosts[2].host_key_pub.read_text().split()[:2]


def test_hosts_reach_each_other_and_link_down_cuts_one_off(ssh_hosts: NetnsHosts) -> None:  # noqa: F811
    h = ssh_hosts
    probe = f"import socket; socket.create_connection(('{h.hosts[0].address}', 22), timeout=1).close()"
    assert h.run_in(2, [sys.executable, "-c", probe], capture_output=True).returncode == 0
    h.link_down(0)
    try:
        assert connect_error(h.hosts[0].address, 22, timeout_s=0.3) is TimeoutError
        cut_off = h.run_in(2, [sys.executable, "-c", probe.replace("timeout=1", "timeout=0.3")], capture_output=True)
        assert b"TimeoutError" in cut_off.stderr
    finally:
        h.link_up(0)
    assert tcp_accepts(h.hosts[0].address, 22)  # link_up returns once the host answers


def test_kill_all_in_spares_the_listener(ssh_hosts: NetnsHosts) -> None:  # noqa: F811
    h = ssh_hosts
    sleeper = subprocess.Popen(["ip", "netns", "exec", h.hosts[0].name, "sleep", "60"])
    try:
        assert wait_until(lambda: sleeper.pid in h.pids(0), 5)
        listener = h.sshd_pid(0)
        h.kill_all_in(0)
        assert sleeper.wait(timeout=5) == -9
        assert h.pids(0) == [] and h.sshd_pid(0) == listener
        assert tcp_accepts(h.hosts[0].address, 22)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_everything_is_removed_on_exit() -> None:
    with NetnsHosts() as h:
        names = [host.name for host in h.hosts]
        links = [h.bridge, *(host.veth for host in h.hosts)]
        assert set(names) <= set(netns_names())
        assert set(links) <= set(link_names())
        daemons = [h.sshd_pid(i) for i in range(3)] + [int(h.agent_env["SSH_AGENT_PID"])]
        dirs = [h.local_home, *(host.home for host in h.hosts), Path(h.agent_env["SSH_AUTH_SOCK"]).parent]
        # leave a process behind in host 1's namespace: teardown must kill it
        assert ssh(h, 0, "nohup sleep 30 >/dev/null 2>&1 </dev/null & echo started").returncode == 0
        assert wait_until(lambda: len(h.pids(0)) >= 1, 5)
        leftover = h.pids(0)
        h.mount_tmpfs(1, "/root/disk", "1m")  # left mounted: close() unmounts it (else __exit__ raises)
        h.hide_program(2, "/bin/true")
    assert not set(names) & set(netns_names())
    assert not set(links) & set(link_names())
    assert not any(pid_alive(pid) for pid in [*daemons, *leftover] if pid)
    assert not any(d.exists() for d in dirs)


def test_setup_failure_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    h = NetnsHosts()

    def broken_sshd_config(self: NetnsHosts, host) -> str:
        return "ThisIsNotAnSshdOption yes\n"

    monkeypatch.setattr(NetnsHosts, "_sshd_config", broken_sshd_config)
    with pytest.raises(RuntimeError, match="did not come up"):
        h.__enter__()
    assert not any(name.startswith(h.tag) for name in netns_names() + link_names())
    assert h._state is None


def test_a_hosts_own_mounts_stay_inside_it(ssh_hosts: NetnsHosts) -> None:  # noqa: F811
    h = ssh_hosts
    small = h.hosts[0].home / "small"
    h.mount_tmpfs(0, "/root/small", "64k")
    try:
        wrote = ssh(
            h, 0, "echo on-tmpfs > ~/small/f && df -k ~/small | tail -1 && head -c 100000 /dev/zero > ~/small/big"
        )
        assert "tmpfs" in wrote.stdout and wrote.returncode != 0, wrote.stdout + wrote.stderr  # 64 kB: full
        assert "No space left" in wrote.stderr
        assert small.is_dir() and not (small / "f").exists()  # the root namespace sees the empty mount point
        assert ssh(h, 1, "test -e ~/small/f || echo absent").stdout.strip() == "absent"
        assert ssh(h, 0, "cat ~/small/f").stdout == "on-tmpfs\n"
    finally:
        h.unmount(0, "/root/small")
    assert ssh(h, 0, "test -e ~/small/f || echo absent").stdout.strip() == "absent"  # the tmpfs is gone

    (h.hosts[1].home / "ro").mkdir()
    h.mount_readonly(1, "/root/ro")
    try:
        refused = ssh(h, 1, "touch ~/ro/x")
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused.stderr
        assert ssh(h, 0, "mkdir -p ~/ro && touch ~/ro/x").returncode == 0  # host 0's ~/ro is writable
        (h.hosts[1].home / "ro" / "y").write_text("")  # and so is host 1's from the root namespace
    finally:
        h.unmount(1, "/root/ro")
    assert ssh(h, 1, "touch ~/ro/x").returncode == 0

    rsync = shutil.which("rsync")
    if rsync is not None:
        h.hide_program(2, rsync)
        try:
            probe = f"test -x {rsync} && echo present || echo missing"
            assert [ssh(h, i, probe).stdout.strip() for i in range(3)] == ["present", "present", "missing"]
        finally:
            h.unmount(2, rsync)
        assert ssh(h, 2, f"test -x {rsync} && echo present").stdout.strip() == "present"
    for i, name in ((0, "small"), (0, "ro"), (1, "ro")):  # the homes as they were
        shutil.rmtree(h.hosts[i].home / name)

"""Parameter-server transport: CURVE security, resend with duplicate suppression, fault injection.

Unit tests first, then real scheduler/server/worker processes on 127.0.0.1 (the
Cluster helper of tests/ps/ps_cluster_helpers.py).
"""

from __future__ import annotations

import signal
import stat
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from ps_cluster_helpers import HB_TIMEOUT, Cluster, Proc, rounds
from ps_cluster_helpers import base_env as env

from clipflow.errors import ABORTED, ClipflowError
from clipflow.ps import PSConfig
from clipflow.ps.reliable import ACK, PROBE, Dedup, Outbox
from clipflow.ps.security import load_keys, make_keys
from clipflow.ps.store import KeyValueStore
from clipflow.ps.wire import Message, Op

# -- settings -----------------------------------------------------------------------------------


def test_security_settings(tmp_path: Path) -> None:
    assert PSConfig.from_env(env()).security == "none"  # auto on loopback
    assert PSConfig.from_env(env(CLIPFLOW_PS_SECURITY="auto", DMLC_PS_ROOT_URI="localhost")).security == "none"
    for extra in ({"CLIPFLOW_PS_SECURITY": "curve"}, {"DMLC_PS_ROOT_URI": "10.1.2.3", "DMLC_NODE_HOST": "10.1.2.4"}):
        with pytest.raises(ClipflowError, match="CLIPFLOW_PS_KEYS is not set") as info:
            PSConfig.from_env(env(**extra))
        assert "python -m clipflow ps keys DIR" in str(info.value)
    with pytest.raises(ClipflowError, match="CLIPFLOW_PS_KEYS=.* is not a folder"):
        PSConfig.from_env(env(CLIPFLOW_PS_SECURITY="curve", CLIPFLOW_PS_KEYS=str(tmp_path / "nope")))
    with pytest.raises(ClipflowError, match="CLIPFLOW_PS_SECURITY must be one of curve, none, auto"):
        PSConfig.from_env(env(CLIPFLOW_PS_SECURITY="tls"))
    keys = make_keys(tmp_path / "keys")
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert {p.name for p in keys.iterdir()} == {"server.key", "server.key_secret", "client.key", "client.key_secret"}
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in keys.glob("*.key_secret"))
    cfg = PSConfig.from_env(env(DMLC_PS_ROOT_URI="10.1.2.3", DMLC_NODE_HOST="10.1.2.4", CLIPFLOW_PS_KEYS=str(keys)))
    assert (cfg.security, cfg.keys_dir) == ("curve", str(keys))
    assert len(load_keys(str(keys)).server_public) == 40  # Z85
    none = PSConfig.from_env(env(CLIPFLOW_PS_SECURITY="none", DMLC_PS_ROOT_URI="10.1.2.3", CLIPFLOW_PS_INSECURE="1"))
    assert (none.security, none.insecure) == ("none", True)  # beyond loopback only with the opt-in (test_badinput)


def test_resend_settings() -> None:
    cfg = PSConfig.from_env(env())
    assert (cfg.resend, cfg.resend_timeout, cfg.drop_percent, cfg.drop_seed) == (False, 1.0, 0.0, None)
    cfg = PSConfig.from_env(
        env(PS_RESEND="1", PS_RESEND_TIMEOUT="100", CLIPFLOW_PS_DROP_PERCENT="10", CLIPFLOW_PS_DROP_SEED="7")
    )
    assert (cfg.resend, cfg.resend_timeout, cfg.drop_percent, cfg.drop_seed) == (True, 0.1, 10.0, 7)
    for name, bad in (("PS_RESEND", "2"), ("PS_RESEND_TIMEOUT", "0"), ("CLIPFLOW_PS_DROP_PERCENT", "101")):
        with pytest.raises(ClipflowError, match=name):
            PSConfig.from_env(env(**{name: bad}))


# -- duplicate suppression ----------------------------------------------------------------------


def _push(seq: int, rank: int, values: list[float], lo: int | None = None) -> Message:
    fields = {"key": 1, "seq": seq, "rank": rank, "sync": True, "lo": seq if lo is None else lo}
    return Message(Op.PUSHPULL, fields, [np.array(values, dtype=np.float32)])


def _serve(dedup: Dedup, store: KeyValueStore, peer: bytes, msg: Message) -> list[tuple[bytes, Message]]:
    fresh, out = dedup.admit(peer, msg)
    sent = [(peer, m) for m in out]
    if fresh:
        for to, reply in store.handle(peer, msg):
            dedup.answered(to, reply)
            sent.append((to, reply))
    return sent


def test_dedup_never_applies_a_request_twice_and_replays_its_reply() -> None:
    store = KeyValueStore(server_rank=0, num_worker=2)
    store.handle(b"w0", Message(Op.INIT, {"key": 1, "seq": 1}, [np.zeros(2, dtype=np.float32)]))
    dedup = Dedup("server 0", resend=True)
    assert [m.op for _, m in _serve(dedup, store, b"w0", _push(5, 0, [1, 2]))] == [ACK]
    assert [m.op for _, m in _serve(dedup, store, b"w0", _push(5, 0, [1, 2]))] == [ACK]  # pending: not summed again
    done = _serve(dedup, store, b"w1", _push(9, 1, [10, 20]))
    assert [(to, m.op) for to, m in done] == [(b"w1", ACK), (b"w0", Op.VALUE), (b"w1", Op.VALUE)]
    np.testing.assert_array_equal(done[1][1].arrays[0], [11, 22])
    replay = _serve(dedup, store, b"w0", _push(5, 0, [1, 2]))  # its reply was lost: the same reply again
    assert [m.op for _, m in replay] == [Op.VALUE] and replay[0][1] is done[1][1]
    probe = Message(PROBE, {"seq": 5, "key": 1, "rank": 0, "lo": 5, "of": Op.PUSHPULL})
    assert _serve(dedup, store, b"w0", probe)[0][1] is done[1][1]
    assert _serve(dedup, store, b"w0", _push(5, 0, [1, 2], lo=6)) == []  # below lo: stale, forgotten
    assert dedup.peers[b"w0"].answered == {} and dedup.duplicates == 3  # probes are not counted
    unknown = _serve(dedup, store, b"w0", Message(PROBE, {"seq": 7, "key": 1, "rank": 0, "of": Op.PUSH}))
    assert unknown[0][1].op == Op.ERROR and "never received push of key 1 (seq 7)" in unknown[0][1]["reason"]
    quiet = Dedup("server 0", resend=False)
    assert _serve(quiet, store, b"w0", _push(11, 0, [1, 1])) == []  # no ACK without PS_RESEND
    _serve(quiet, store, b"w1", _push(12, 1, [1, 1]))
    lost = _serve(quiet, store, b"w0", _push(11, 0, [1, 1]))[0][1]
    assert lost.op == Op.ERROR and "the reply was lost; PS_RESEND=1" in lost["reason"]


def test_outbox_resends_until_acknowledged_then_probes() -> None:
    now = [0.0]
    box = Outbox(2, resend=True, timeout_s=0.1, clock=lambda: now[0])
    msg = Message(Op.PUSH, {"key": 3, "seq": 4, "rank": 0}, [np.ones(2, dtype=np.float32)])
    box.add(1, msg)
    assert msg["lo"] == 4 and box.due() == []
    now[0] = 0.2
    assert box.due() == [(1, msg)] and box.resent == 1
    box.acked(1, 4)
    now[0] = 0.35
    ((server, probe),) = box.due()
    assert (server, probe.op, probe["seq"], probe.arrays) == (1, PROBE, 4, [])
    assert box.answered(1, 4) and not box.answered(1, 4)  # the second reply is a duplicate
    box.add(0, Message(Op.PULL, {"key": 3, "seq": 5, "rank": 0}))
    for step in range(40):
        now[0] = 1 + step
        errors = [m for _, m in box.due() if m.op == Op.ERROR]
        if errors:
            break
    assert "did not acknowledge pull of key 3 (seq 5)" in errors[0]["reason"]


# -- real processes -----------------------------------------------------------------------------


def _wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_curve_job_runs_and_keeps_intruders_out(make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys")
    other = make_keys(tmp_path / "other")
    cluster = make_cluster(1, 2, CLIPFLOW_PS_SECURITY="curve", CLIPFLOW_PS_KEYS=str(keys))
    cluster.scheduler()
    cluster.server()
    # intruders first: they must fail fast and clearly, and the job must not notice them
    wrong = rounds(cluster, "wrong-keys", CLIPFLOW_PS_KEYS=str(other), CLIPFLOW_STARTUP_TIMEOUT="5")
    plain = rounds(cluster, "no-security", CLIPFLOW_PS_SECURITY="none", CLIPFLOW_STARTUP_TIMEOUT="5")
    exits = cluster.wait_exits([wrong, plain], 25)  # startup timeout 5 s, plus a slow start on a loaded machine
    for p in (wrong, plain):  # 75 from the heartbeat thread, or 1 when the main thread's wait ends first
        assert exits[p.name][0] in (1, ABORTED), (exits, p.stderr())
        # usually the failed handshakes are seen within a second, at worst the startup timeout ends the wait
        assert "CLIPFLOW_PS_SECURITY" in p.stderr() and "CLIPFLOW_PS_KEYS" in p.stderr(), p.stderr()
    cluster.procs = [p for p in cluster.procs if p not in (wrong, plain)]
    honest = [rounds(cluster, f"worker{i}") for i in range(2)]
    cluster.wait_ok()
    assert sorted(w.facts()["rank"] for w in honest) == [0, 1]


def test_client_key_not_in_the_folder_is_refused(make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys")
    stranger = tmp_path / "stranger"  # the job's server key, but a client key the job does not list
    stranger.mkdir(mode=0o700)
    for name in ("server.key", "server.key_secret"):
        (stranger / name).write_bytes((keys / name).read_bytes())
    make_keys(stranger)
    cluster = make_cluster(1, 1, CLIPFLOW_PS_SECURITY="curve", CLIPFLOW_PS_KEYS=str(keys), CLIPFLOW_STARTUP_TIMEOUT="5")
    scheduler = cluster.scheduler()
    intruder = rounds(cluster, "stranger", CLIPFLOW_PS_KEYS=str(stranger))
    exits = cluster.wait_exits([intruder], 10)
    assert exits["stranger"][0] == ABORTED, intruder.stderr()
    assert "refused this node's CURVE key" in intruder.stderr(), intruder.stderr()
    assert scheduler.popen.poll() is None  # unaffected (it goes on waiting for its real nodes)


def _rounds_job(cluster: Cluster) -> list[Proc]:
    cluster.scheduler()
    cluster.server()
    return [rounds(cluster, f"worker{i}", DMLC_RANK=str(i)) for i in range(2)]


@pytest.mark.parametrize("drop", ["0", "10"])
def test_resend_gives_exact_sums_despite_drops(make_cluster: Callable[..., Cluster], drop: str) -> None:
    cluster = make_cluster(
        1, 2, PS_RESEND="1", PS_RESEND_TIMEOUT="100", CLIPFLOW_PS_DROP_PERCENT=drop, CLIPFLOW_PS_DROP_SEED="3"
    )
    workers = _rounds_job(cluster)
    cluster.wait_ok()
    facts = [w.facts() for w in workers]
    server_log = cluster.procs[1].stderr()
    if drop == "0":
        assert sum(f["dropped"] for f in facts) == 0
    else:  # messages were lost both ways, resent, and repeats were not applied twice (the sums are exact)
        assert sum(f["dropped"] for f in facts) > 0 and sum(f["resent"] for f in facts) > 0
        assert "fault injection dropped" in server_log and " 0 repeated requests" not in server_log, server_log


def test_drops_without_resend_end_with_a_clear_error(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(
        1, 2, PS_RESEND="0", PS_RESEND_TIMEOUT="100", CLIPFLOW_PS_DROP_PERCENT="10", CLIPFLOW_PS_DROP_SEED="3"
    )
    _rounds_job(cluster)
    exits = cluster.wait_exits(cluster.procs, 30)
    codes = {name: rc for name, (rc, _) in exits.items()}
    assert None not in codes.values() and 1 in codes.values(), codes  # nobody hangs; a worker fails itself
    assert set(codes.values()) <= {1, ABORTED}, codes
    logs = "".join(p.stderr() for p in cluster.procs)
    assert "PS_RESEND=1 resends lost messages" in logs, logs
    assert "lost" in cluster.procs[0].stderr()  # the scheduler's abort names the cause


def test_killed_server_aborts_the_whole_job(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster(1, 2)
    scheduler = cluster.scheduler()
    victim = cluster.server()
    workers = [cluster.worker(f"worker{i}", "hang", DMLC_RANK=str(i)) for i in range(2)]
    _wait_until(lambda: all('"round0"' in w.stdout() for w in workers), 40, "both workers finish round 0")
    time.sleep(0.5)  # worker 0 waits in its second pushpull, worker 1 "computes"
    victim.popen.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    others = [scheduler, *workers]
    exits = cluster.wait_exits(others, HB_TIMEOUT + 5)
    for p in others:
        rc, at = exits[p.name]
        assert rc == ABORTED, f"{p.name} exited {rc}:\n{p.stderr()}"
        assert at - killed_at < HB_TIMEOUT + 4
        assert "server 0 on 127.0.0.1 stopped answering" in p.stderr(), p.stderr()

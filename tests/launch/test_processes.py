"""The launcher with real child processes: prefixed output, logs, first failure, signals."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

from clipflow.hosts.plan import Role
from clipflow.launch.processes import Launcher, RoleCommand


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_output_is_prefixed_and_logged_and_success_is_zero(tmp_path):
    console = io.StringIO()
    cmds = [
        RoleCommand(Role("scheduler", 0, "localhost"), py("print('hello from the scheduler')")),
        RoleCommand(Role("worker", 1, "localhost"), py("import os; print('rank', os.environ['X'])"), {"X": "1"}),
    ]
    assert Launcher(cmds, tmp_path, console=console).run() == 0
    text = console.getvalue()
    assert "[scheduler 0 localhost] hello from the scheduler" in text
    assert "[worker 1 localhost] rank 1" in text
    assert (tmp_path / "worker-1.log").read_text() == "rank 1\n"


def test_first_failure_stops_the_others_and_sets_the_exit_code(tmp_path):
    console = io.StringIO()
    pidfile = tmp_path / "pids"
    sleeper = py(f"import os,time; open({str(pidfile)!r},'a').write(f'{{os.getpid()}}\\n'); time.sleep(120)")
    cmds = [
        RoleCommand(Role("scheduler", 0, "localhost"), sleeper),
        RoleCommand(Role("worker", 0, "localhost"), sleeper),
        RoleCommand(Role("worker", 1, "localhost"), py("import time,sys; time.sleep(1.5); sys.exit(3)")),
    ]
    began = time.monotonic()
    code = Launcher(cmds, tmp_path, grace_s=5, console=console).run()
    assert code == 3
    assert time.monotonic() - began < 30
    assert "worker 1 on localhost failed (exit code 3); stopped the 2 other running processes" in console.getvalue()
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2 and not any(alive(p) for p in pids)


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    stubborn = py(
        "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(120)"
    )
    cmds = [
        RoleCommand(Role("server", 0, "localhost"), stubborn),
        RoleCommand(Role("worker", 0, "localhost"), py("import time; time.sleep(1); raise SystemExit(1)")),
    ]
    began = time.monotonic()
    assert Launcher(cmds, tmp_path, grace_s=1, console=io.StringIO()).run() == 1
    assert time.monotonic() - began < 15


def test_sigterm_to_the_launcher_stops_every_process(tmp_path):
    """The launcher in its own process gets SIGTERM, as from Ctrl-C or a scheduler's kill."""
    script = tmp_path / "launch.py"
    pidfile = tmp_path / "pids"
    sleeper = f"import os,time; open({str(pidfile)!r},'a').write(str(os.getpid())+'\\n'); time.sleep(120)"
    script.write_text(
        "import sys\n"
        "from clipflow.hosts.plan import Role\n"
        "from clipflow.launch.processes import Launcher, RoleCommand\n"
        f"cmds = [RoleCommand(Role('worker', r, 'localhost'), [sys.executable, '-c', {sleeper!r}]) for r in range(3)]\n"
        f"sys.exit(Launcher(cmds, {str(tmp_path)!r}, grace_s=5).run())\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not pidfile.exists() or len(pidfile.read_text().split()) < 3):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "got SIGTERM; stopped 3 running processes" in out
    assert not any(alive(int(p)) for p in pidfile.read_text().split())


def test_launcher_handles_a_signal_from_another_thread_of_the_test(tmp_path):
    """SIGINT delivered while run() is waiting: it stops the children and returns 130."""
    cmds = [RoleCommand(Role("worker", 0, "localhost"), py("import time; time.sleep(60)"))]
    launcher = Launcher(cmds, tmp_path, grace_s=2, console=io.StringIO())
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    assert launcher.run() == 130


def test_an_echo_of_a_failure_is_not_taken_for_its_cause_while_the_cause_is_still_exiting(tmp_path):
    """The scheduler learns of worker 1's error and exits ABORTED at once; worker 1, slow to exit after printing
    its error (as a torch process on a loaded machine), exits 2 seconds later: its failure is the launcher's."""
    console = io.StringIO()
    cmds = [
        RoleCommand(Role("scheduler", 0, "localhost"), py("import sys; sys.exit(75)")),
        RoleCommand(Role("worker", 1, "localhost"),
                    py("import sys,time; print('clipflow: error: no video', flush=True); time.sleep(5); sys.exit(2)")),
    ]  # fmt: skip
    assert Launcher(cmds, tmp_path, grace_s=5, console=console).run() == 2
    assert "worker 1 on localhost failed (exit code 2)" in console.getvalue(), console.getvalue()


def test_a_role_failing_while_the_job_stops_on_notice_ends_the_launch_without_a_restart(tmp_path):
    """SIGUSR1 to the launcher (a notice, passed on to the workers); a worker that dies while the others stop
    (found by the soak, bench/soak.py): the launch ends with that failure, not restartable (a restart would
    undo the notice), and says why."""
    from clipflow.launch.processes import TRAIN_NOTICE, NoticePolicy
    from clipflow.train.restarts import restartable

    ready = tmp_path / "ready"
    mark = f"open({str(ready)!r}, 'a')"
    stops = f"import signal,sys,time; signal.signal(signal.SIGUSR1, lambda *_: sys.exit(79)); {mark}"
    dies = f"import os,signal,time; signal.signal(signal.SIGUSR1, lambda *_: os.kill(os.getpid(), 9)); {mark}"
    cmds = [RoleCommand(Role("worker", 0, "localhost"), py(stops + ".write('0'); time.sleep(60)")),
            RoleCommand(Role("worker", 1, "localhost"), py(dies + ".write('1'); time.sleep(60)"))]  # fmt: skip
    console = io.StringIO()
    launcher = Launcher(cmds, tmp_path, grace_s=5, console=console, notice=NoticePolicy(TRAIN_NOTICE, 20))

    def notice() -> None:
        deadline = time.monotonic() + 30
        while (not ready.exists() or len(ready.read_text()) < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)

    threading.Thread(target=notice, daemon=True).start()
    assert launcher.run() == 137
    assert launcher.ending.cause == "worker 1 on localhost failed (killed by signal SIGKILL) while stopping on notice"
    assert not restartable(launcher.ending)
    assert (
        "clipflow launch: the failure came while the job stopped on notice, so the launch ends here without a "
        "restart; rerun the same command to go on"
    ) in console.getvalue()

"""A training worker's side of a stop on notice (a spot reclaim, Slurm's ``--signal=USR1@120``).

SIGUSR1 or SIGTERM to a worker (passed on by `clipflow train launch`, or sent by Slurm or the system to every
process) only sets a flag: the step under way goes on. Another SIGUSR1 changes nothing (Slurm signals every
process, and the launcher passes its own on too); a SIGTERM after it ends the worker at once (the launcher's
teardown). After each step the workers agree whether any of them got a notice, with one float summed through
the back end (:meth:`Notice.agreed`), so that all of them stop after the same step; rank 0 then writes a
checkpoint inside the epoch and every worker exits :data:`clipflow.errors.RESUMABLE`.

The launcher starts a training worker with SIGUSR1 blocked (:data:`HELD`): a notice that comes while the worker
is still starting waits, pending, until :meth:`Notice.install` has put the handler in place and unblocks it. A
Slurm task is started by slurmstepd on its node, not by the launcher, so there the role's command is wrapped by
:func:`notice_argv`: a bare Python (no site packages, a few milliseconds) that blocks SIGUSR1 (a worker) or
ignores it (the scheduler and servers, which never take it) and execs the role, which keeps that. Slurm's
time-limit warning reaches every task of the job and may come that early: slurmctld sends it at its first look at
the job's time after it is due, and for a short job that can be seconds after the start.
"""

from __future__ import annotations

import signal

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
HELD = frozenset({signal.SIGUSR1})  # blocked from a training worker's start until its handler is in place
STOPPED = "stopped on notice at epoch {epoch} iteration {iteration}; checkpoint {path}"


_BEFORE_EXEC = {
    "hold": "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})",
    "ignore": "signal.signal(signal.SIGUSR1, signal.SIG_IGN)",
}


def notice_argv(python: str, argv: list[str], how: str) -> list[str]:
    """``argv`` started by ``python`` (isolated, without site: it only sets SIGUSR1 and execs) with SIGUSR1 held
    (``how`` "hold") or ignored ("ignore"); both survive the exec."""
    code = f"import os, signal, sys; {_BEFORE_EXEC[how]}; os.execvp(sys.argv[1], sys.argv[1:])"
    return [python, "-I", "-S", "-c", code, *argv]


class StoppedOnNotice(Exception):
    """Raised by the trainer once every worker finished the step and rank 0 saved (its ``path``; None on the
    other ranks)."""

    def __init__(self, epoch: int, iteration: int, path: object = None):
        super().__init__(STOPPED.format(epoch=epoch, iteration=iteration, path=path))
        self.epoch, self.iteration, self.path = epoch, iteration, path


class Notice:
    """The flag a notice sets, and the workers' agreement on it."""

    def __init__(self) -> None:
        self.received: int | None = None

    @classmethod
    def install(cls) -> Notice:
        """A notice whose handler takes SIGUSR1 and SIGTERM in this process (main thread); a signal held pending
        since the start is delivered now."""
        notice = cls()
        for signum in SIGNALS:
            signal.signal(signum, notice._on_signal)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        return notice

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.received is not None and signum == signal.SIGTERM:  # after a notice: the launcher's teardown
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        self.received = self.received or signum  # no print here: the main thread may be inside one

    @staticmethod
    def retire() -> None:
        """The worker is past its last step (done, stopped or failed): from now to the process's end SIGUSR1 is
        ignored and SIGTERM ends it. Slurm signals every process of the job and its warning may come after the
        launcher passed one on, while the worker exits; Python's shutdown gives a signal it had a handler for back
        its default action (death: exit 138 instead of 79), but leaves an ignored one ignored."""
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def agreed(self, comm) -> bool:
        """Collective: whether any worker got a notice (one float summed over the workers)."""
        import torch  # here: the launcher reads this module's constants without torch

        flag = torch.tensor([0.0 if self.received is None else 1.0])
        comm.all_sum("notice", flag)
        return bool(flag.item() > 0)

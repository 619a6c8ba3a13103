"""Failures by kind, each with its own exit status and the words the command line prints before it.

* :class:`ClipflowError`: something the user can fix (an input, a setting, the environment); the message
  names the thing and the fix. Exit 2, ``clipflow: error: ...``.
* :class:`CommError`: the job's communication failed (a peer's message broken or out of protocol, no
  answer in time), with inputs that were fine: the message says what failed and where, never to change an
  input. Exit 76 (EX_PROTOCOL), ``clipflow: communication failure: ...``.

A process that stops because the job failed elsewhere exits :data:`ABORTED` (75), also when it learns so by an
exception (:class:`JobAborted`): a launcher that sees several processes exit takes that status for an echo (it
only repeats the scheduler's reason), and names the process with any other status as the cause. A training
worker stopped on notice after a checkpoint exits :data:`RESUMABLE` (79). Every exit status the program gives
is here.
"""

ABORTED = 75  # EX_TEMPFAIL: not this process's fault; fix the cause and rerun
RESUMABLE = 79  # stopped on notice (SIGTERM/SIGUSR1 to the launcher) after a checkpoint: rerun to go on


class ClipflowError(Exception):
    """A problem with the user's input or environment, with the fix in its message."""

    exit_status = 2
    label = "error"


class CommError(Exception):
    """A message between the job's processes broken or out of protocol, or a peer's answer not in time."""

    exit_status = 76  # EX_PROTOCOL
    label = "communication failure"


class JobAborted(CommError):
    """The job was torn down because of a failure elsewhere (the scheduler's ABORT, or the scheduler gone):
    this process only echoes it, so it exits like the nodes the heartbeat thread ends."""

    exit_status = ABORTED
    label = "aborted"


FAILURES = (ClipflowError, CommError)  # what the command line prints as one line and exits with

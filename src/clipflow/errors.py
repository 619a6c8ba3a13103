"""Failures by kind, each with its own exit status and the words the command line prints before it.

* :class:`ClipflowError`: something the user can fix (an input, a setting, the environment); the message
  names the thing and the fix. Exit 2, ``clipflow: error: ...``.
* :class:`CommError`: the job's communication failed (a peer's message broken or out of protocol, no
  answer in time), with inputs that were fine: the message says what failed and where, never to change an
  input. Exit 76 (EX_PROTOCOL), ``clipflow: communication failure: ...``.

A process that stops because the job failed elsewhere exits 75 (:data:`clipflow.ps.exitcodes.ABORTED`),
also when it learns so by an exception (:class:`JobAborted`): a launcher takes that status for an echo, and
names the process with any other status as the cause.
"""


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

    exit_status = 75  # clipflow.ps.exitcodes.ABORTED (not imported: clipflow.ps imports this module)
    label = "aborted"


FAILURES = (ClipflowError, CommError)  # what the command line prints as one line and exits with

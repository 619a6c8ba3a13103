"""Exit status of a node that stops because the job failed somewhere else.

A launcher that sees several processes exit tells the cause (any other non-zero
status) from the echoes (this one): the echoes only repeat the scheduler's reason.
"""

ABORTED = 75  # EX_TEMPFAIL: not this process's fault; fix the cause and rerun
RESUMABLE = 79  # stopped on notice (SIGTERM/SIGUSR1 to the launcher) after a checkpoint: rerun to go on

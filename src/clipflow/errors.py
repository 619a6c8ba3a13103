"""Errors a user can cause. The command line prints them as one line and exits 2."""


class ClipflowError(Exception):
    """A problem with the user's input or environment, with the fix in its message."""

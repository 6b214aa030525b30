"""The one exception type users see: a clear sentence naming the problem, never a traceback."""


class LeakwatchError(Exception):
    """A problem the user can fix; the CLI prints the message and exits non-zero."""

    exit_code = 2

"""One error family for everything a user can cause, and the exit codes it maps to."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # the environment or the run failed
    USAGE = 2  # the command line was wrong
    INTERRUPTED = 130  # Ctrl-C


class DdpkitError(Exception):
    """An error with a one-line message, a hint that says what to do, and an exit code."""

    code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(DdpkitError):
    """Bad flags, bad host specs, a missing script: the user can fix the command line."""

    code = ExitCode.USAGE


class EnvironmentFailure(DdpkitError):
    """Something outside the command line is wrong: a host, a port, a missing tool."""

    code = ExitCode.FAILURE

"""The one error type of cagtool: it carries the exit code the CLI turns it into."""

from __future__ import annotations

# Documented exit codes (README, "Exit codes").
EXIT_OK = 0
EXIT_GATE_FAILED = 1  # also: the target's own non-zero code on `run`; `diff-graphs` found a difference
EXIT_USAGE = 2
EXIT_UNREADABLE = 3
EXIT_INTERNAL = 4  # a bug in cagtool (an exception it did not expect): never mistaken for a usage error or a gate
# A gate whose checks all held except timing checks the evidence could not decide (their interval
# contains the bound): neither a pass nor a failure, and never mistaken for either.
EXIT_INCONCLUSIVE = 5


class CagtoolError(Exception):
    """An expected failure: printed as one line, never as a traceback (unless --debug)."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CagtoolError):
    """Bad arguments or a target that cannot be started (missing file, syntax error...)."""

    exit_code = EXIT_USAGE


class UnreadableInput(CagtoolError):
    """A run record, graph file or baseline that is missing, corrupt or from a newer schema."""

    exit_code = EXIT_UNREADABLE


class CannotWrite(CagtoolError):
    """A file cagtool must write that the machine refused: a full or read-only disk, no permission."""

    exit_code = EXIT_USAGE

"""The error taxonomy.

`ConfigError` is the user's input being wrong (exit code 2, one line, no traceback).
`TrialError` subclasses travel from user code to the trial record; they never stop a search.
"""
from __future__ import annotations


class MpioptError(Exception):
    """Base class of mpiopt's own errors."""


class ConfigError(MpioptError):
    """The input is wrong: usage, YAML, search space, paths, rank counts (exit code 2).

    The message is one line that names the file, the field and what was expected.
    """

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        prefix = ""
        if source:
            prefix += f"{source}: "
        if field:
            prefix += f"{field}: "
        super().__init__(prefix + message)


class TrialFailed(MpioptError):
    """A trial could not produce a figure of merit (recorded as `failed`; the search goes on)."""


class TrialTimeout(MpioptError):
    """A trial ran past `training.time_limit` (recorded as `timeout`)."""


class GroupPeerFailed(MpioptError):
    """Raised on the ranks of a group when another rank of the group failed the trial."""

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


class DataError(TrialFailed):
    """The objective's data cannot be read as the space says (a file corrupt past the part the
    check read, one without its dataset): every trial would fail alike, so the search stops."""

    def line(self) -> str:
        return str(self.args[0]).splitlines()[0]


class TrialTimeout(MpioptError):
    """A trial ran past `training.time_limit` (recorded as `timeout`)."""


class GroupPeerFailed(MpioptError):
    """Raised on the ranks of a group when another rank of the group failed the trial."""


class GroupPeerReturned(GroupPeerFailed):
    """Raised on a rank of a `function(params, comm)` group that waits in an operation of the
    group which a peer, whose function has returned, will never join: the objective's misuse."""

    def __init__(self, peer: int, rank: int) -> None:
        super().__init__(f"rank {peer} returned from the function while rank {rank} waited for it in a call of comm "
                         "(or trial.should_stop): every rank of the group must make the same calls")

    def line(self) -> str:
        return str(self.args[0])

"""The error taxonomy.

`ConfigError` is the user's input being wrong (exit code 2, one line, no traceback).
`TrialError` subclasses travel from user code to the trial record; they never stop a search.
"""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path

# what no trial can be blamed for: its rerun, once there is room again, would go through
_STORAGE_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


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


def storage_failure(exc: BaseException, own: Path | None = None) -> bool:
    """Whether `exc` is the storage failing under mpiopt rather than the trial's code: a full disk,
    a spent quota or a read-only file system, or a file under `own` (the trial's folder) that may
    no longer be written. Outside `own` the objective's own files are its business: a read-only
    cache of its container fails every trial alike, and a stop would have --resume stop again."""
    if not isinstance(exc, OSError):
        return False
    full, where = exc.errno in _STORAGE_FULL, _named(exc)
    if full and (where is None or own is None):  # a write() names no file
        return True
    return (full or isinstance(exc, PermissionError)) and where is not None and own is not None and _inside(where, own)


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a loop of links
        return False


def _named(exc: OSError) -> Path | None:
    """The file an OSError names, if any (bytes decoded as the file system does)."""
    if isinstance(exc.filename, bytes):
        return Path(os.fsdecode(exc.filename))
    return Path(exc.filename) if isinstance(exc.filename, str) else None


def file_error(exc: BaseException) -> bool:
    """Whether `exc` is a file that could not be read or written (an OSError naming it) or the
    storage failing: said in one line, not as an internal error."""
    return isinstance(exc, OSError) and (exc.filename is not None or storage_failure(exc))


# h5py's OSError carries HDF5's own text, which names the file inside it over two lines
_HDF5_FILE = re.compile(r"filename = '([^']*)'")


def storage_text(exc: OSError) -> str:
    """'FILE: No space left on device' (the reason alone where the error names no file)."""
    reason, where = exc.strerror or str(exc), exc.filename
    found = _HDF5_FILE.search(reason) if where is None and exc.errno else None
    if found:
        where, reason = found.group(1), os.strerror(exc.errno)
    return f"{where}: {reason}" if where is not None else reason

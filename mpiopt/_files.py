"""Writing files that readers never see half-written, and where files can be written at all."""
from __future__ import annotations

import os
from pathlib import Path
from typing import IO
from collections.abc import Callable

from ._errors import ConfigError


def atomic_write(path: Path, data: bytes | Callable[[IO[bytes]], None], *, durable: bool = True) -> None:
    """Replace `path` with `data` (bytes, or a function that writes to the open file) so that
    readers see the old or the new file, never a mix; `durable`: on disk (the file and its
    folder fsynced) before this returns."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        if callable(data):
            data(f)
        else:
            f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (a no-op where the system cannot open folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def refuse_a_file_in_the_way(path: Path, source: str | None = None) -> None:
    """A ConfigError (under `source`, default the path) where a file stands where `path` or one
    of its parents must be a folder to write in."""
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ConfigError(f"cannot write here: {blocker} exists and is not a directory",
                          source=str(path) if source is None else source)

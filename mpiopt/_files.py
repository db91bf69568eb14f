"""Writing files that readers never see half-written."""
from __future__ import annotations

import os
from pathlib import Path
from typing import IO
from collections.abc import Callable


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


def not_a_folder(path: Path) -> Path | None:
    """The first of `path` and its parents that exists but is not a folder (a file in the way
    of writing there), or None."""
    return next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)

"""Writing files that readers never see half-written, and where files can be written at all."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from ._errors import ConfigError


def atomic_write(path: Path, data: bytes | Callable[[IO[bytes]], None], *, durable: bool = True) -> None:
    """Replace `path` with `data` (bytes, or a function that writes to the open file) so that
    readers see the old or the new file, never a mix; `durable`: on disk (the file and its
    folder fsynced) before this returns."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with naming(path, tmp), open(tmp, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written file left to hold its space
        with contextlib.suppress(OSError):  # none made (a read-only file system): the first error stands
            tmp.unlink()
        raise
    if durable:
        fsync_dir(path.parent)


@contextlib.contextmanager
def naming(path: Path, tmp: Path | None = None) -> Iterator[None]:
    """An OSError that names no file (a write to a full disk), or only the temporary file `tmp`
    written in its place, re-raised naming `path`: the user hears of the file they know."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None or exc.filename is not None and (tmp is None or exc.filename != str(tmp)):
            raise  # (an OSError of a message alone, no errno, cannot be made again naming a file)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


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
    try:
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    except OSError as exc:  # a name longer than the file system takes, a loop of links
        raise ConfigError(f"cannot use this path: {exc.strerror}", source=str(path) if source is None else source) \
            from None
    if blocker is not None:
        raise ConfigError(f"cannot write here: {blocker} exists and is not a directory",
                          source=str(path) if source is None else source)


def missing_folders(path: Path) -> list[Path]:
    """The folders of `path` (itself and its parents) that do not exist yet, deepest first: what
    `path.mkdir(parents=True)` makes, and what to remove again if what follows fails."""
    return [p for p in (path, *path.parents) if not p.exists()]


def remove_made(files: list[Path], folders: list[Path]) -> None:
    """Remove `files`, then `folders` (deepest first, from `missing_folders`). The first that
    cannot go stops it: something else was put there meanwhile, and stays."""
    with contextlib.suppress(OSError):
        for f in files:
            f.unlink(missing_ok=True)
        for folder in folders:
            folder.rmdir()

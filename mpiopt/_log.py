"""Logging under the `mpiopt` root logger; lines from ranks carry `[group g rank r]`."""
from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time

from . import _env

_ROOT = "mpiopt"
_FORMAT = "%(asctime)s mpiopt%(ranktag)s %(levelname)s: %(message)s"


class _RankFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.tag = ""

    def filter(self, record: logging.LogRecord) -> bool:
        record.ranktag = self.tag
        return True


_filter = _RankFilter()


TRIALS = "mpiopt.trials"  # the coordinator's line for each trial that ends or pauses
TRIAL_LINES_PER_S = 10  # on the console; search.log keeps every line


class _Console(logging.StreamHandler):
    """The stderr handler that `setup_logging` adds, at most once a process.

    It shows at most TRIAL_LINES_PER_S trial lines (logger TRIALS) a second. When trials end by
    the hundred a second nobody reads them, and each write to the launcher's pipe holds up the
    coordinator's loop. The lines held back are counted in a line of their own before the next
    line shown; search.log has them all.
    """

    def __init__(self, clock=time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.window_start = -math.inf
        self.shown_in_window = 0
        self.held_back = 0

    # the stderr of the moment, not the one at setup: a process that swaps sys.stderr (a notebook,
    # pytest's capture, mpiopt.cli.main called twice) gets the lines where it now looks
    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == TRIALS and not self._room_for_a_trial_line():
            self.held_back += 1
            return
        if self.held_back:
            super().emit(self._held_back_note(record))
            self.held_back = 0
        super().emit(record)

    def _room_for_a_trial_line(self) -> bool:
        now = self.clock()
        if now - self.window_start >= 1.0:
            self.window_start, self.shown_in_window = now, 0
        self.shown_in_window += 1
        return self.shown_in_window <= TRIAL_LINES_PER_S

    def _held_back_note(self, before: logging.LogRecord) -> logging.LogRecord:
        lines = f"{self.held_back} trial line" + ("" if self.held_back == 1 else "s")
        return logging.makeLogRecord({**before.__dict__, "name": TRIALS, "levelno": logging.INFO,
                                      "levelname": "INFO", "args": None, "exc_info": None,
                                      "msg": f"{lines} not shown (over {TRIAL_LINES_PER_S} a second); "
                                             f"search.log has them all"})


def setup_logging(level: int | str | None = None) -> None:
    """Send `mpiopt` log records to stderr, once per process."""
    root = logging.getLogger(_ROOT)
    if level is None:
        level = _env.get("MPIOPT_LOG_LEVEL")
    root.setLevel(level)
    if not any(isinstance(h, _Console) for h in root.handlers):
        handler = _Console()
        handler.setFormatter(logging.Formatter(_FORMAT, "%H:%M:%S"))
        handler.addFilter(_filter)
        handler.addFilter(_for_the_console)
        root.addHandler(handler)
        root.propagate = False


STATS = "mpiopt.stats"  # the coordinator's own figures: in the run's search.log, on stderr only at DEBUG


FILE_ONLY = "mpiopt.file_only"  # the logger of lines printed to the console already: in search.log only


def _for_the_console(record: logging.LogRecord) -> bool:
    """Not a line printed already, nor the coordinator's own figures unless debugging."""
    if record.name == FILE_ONLY:
        return False
    return record.name != STATS or logging.getLogger(_ROOT).level <= logging.DEBUG


class _LogFile(logging.FileHandler):
    """search.log: a path that is not UTF-8 written with escapes; on a full disk, one line on the
    console and no more writing, instead of logging's traceback at every line."""

    def __init__(self, path) -> None:
        super().__init__(path, encoding="utf-8", errors="backslashreplace")

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            return super().handleError(record)
        logging.getLogger(_ROOT).removeHandler(self)
        stream, self.stream = self.stream, None  # closing would write the refused text again, and fail
        with contextlib.suppress(OSError, ValueError):
            stream.close()
        print(f"mpiopt: {self.baseFilename}: {exc.strerror or exc}: no more lines are written to it",
              file=sys.stderr, flush=True)


def log_to_file(path) -> logging.Handler:
    """Also append this process's `mpiopt` lines to `path` (dated, at the level set); returns the handler."""
    handler = _LogFile(path)
    handler.setFormatter(logging.Formatter(_FORMAT, "%Y-%m-%d %H:%M:%S"))
    handler.addFilter(_filter)
    logging.getLogger(_ROOT).addHandler(handler)
    return handler


class HeldLines(logging.Handler):
    """This process's `mpiopt` lines from now until `stop`, for a log file opened later (a
    resume's notes come before the run directory's search.log is open)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        logging.getLogger(_ROOT).addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def stop(self) -> list[logging.LogRecord]:
        logging.getLogger(_ROOT).removeHandler(self)
        return self.records


def stop_logging_to(handler: logging.Handler) -> None:
    logging.getLogger(_ROOT).removeHandler(handler)
    handler.close()


def set_rank_tag(tag: str) -> None:
    """Tag every line of this process, e.g. ``[coordinator]`` or ``[group 2 rank 1]``."""
    _filter.tag = f" {tag}" if tag else ""


_TF_NOISE = (b"I0000 ", b"WARNING: All log messages before absl::InitializeLog()",
             b"To enable the following instructions:")  # the second line of cpu_feature_guard's notice
_CPU_NOISE = (b"cuInit", b"cuda drivers", b"Unable to register cu", b"computation placer already registered")


class quiet_tensorflow:
    """Drop TensorFlow's start-up chatter that it writes straight to file descriptor 2.

    TensorFlow 2.2x prints oneDNN and CUDA-probe notices before its logging is initialised, so
    TF_CPP_MIN_LOG_LEVEL cannot hide them; with many ranks they drown mpiopt's own lines. Other
    lines are passed through. Set MPIOPT_TF_LOGS=1 to see everything.
    """

    def __enter__(self):
        self._saved = None
        if _env.get("MPIOPT_TF_LOGS") == "1":
            return self
        import tempfile

        try:
            sys.stderr.flush()
            self._tmp = tempfile.TemporaryFile()
            self._saved = os.dup(2)
            os.dup2(self._tmp.fileno(), 2)
        except OSError:
            self._saved = None
        return self

    def __exit__(self, *exc):
        if self._saved is None:
            return False
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._tmp.seek(0)
        for line in self._tmp.read().splitlines(keepends=True):
            if line.startswith(_TF_NOISE) or any(n in line for n in _CPU_NOISE):
                continue
            sys.stderr.buffer.write(line)
        sys.stderr.flush()
        self._tmp.close()
        return False

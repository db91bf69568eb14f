"""The console handler: trial lines at most TRIAL_LINES_PER_S a second, the rest counted."""
from __future__ import annotations

import io
import logging
import sys

from mpiopt._log import TRIAL_LINES_PER_S, TRIALS, _Console


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(name: str, msg: str) -> logging.LogRecord:
    return logging.makeLogRecord({"name": name, "msg": msg, "levelno": logging.INFO, "levelname": "INFO"})


def console(monkeypatch) -> tuple[_Console, io.StringIO, Clock]:
    out, clock = io.StringIO(), Clock()
    monkeypatch.setattr(sys, "stderr", out)
    handler = _Console(clock=clock)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler, out, clock


def test_trial_lines_past_the_rate_are_held_back_and_counted_before_the_next_line(monkeypatch):
    handler, out, clock = console(monkeypatch)
    for n in range(TRIAL_LINES_PER_S + 15):
        handler.handle(record(TRIALS, f"trial {n} pruned"))
    handler.handle(record("mpiopt.coordinator", "progress: 25 of 100"))  # any other line is shown at once
    clock.now += 1.0
    handler.handle(record(TRIALS, "trial 25 completed"))
    lines = out.getvalue().splitlines()
    assert lines == [f"trial {n} pruned" for n in range(TRIAL_LINES_PER_S)] + [
        "15 trial lines not shown (over 10 a second); search.log has them all",
        "progress: 25 of 100",
        "trial 25 completed"]


def test_a_new_second_shows_trial_lines_again(monkeypatch):
    handler, out, clock = console(monkeypatch)
    for second in range(3):
        for n in range(TRIAL_LINES_PER_S + 1):
            handler.handle(record(TRIALS, f"trial {second}.{n}"))
        clock.now += 1.0
    lines = out.getvalue().splitlines()
    assert lines.count("1 trial line not shown (over 10 a second); search.log has them all") == 2
    assert len([line for line in lines if line.startswith("trial ")]) == 3 * TRIAL_LINES_PER_S


def test_lines_go_to_the_stderr_of_the_moment(monkeypatch):
    # a process that swaps sys.stderr (pytest's capture, a notebook, main() called again) gets the
    # lines where it now looks, not in the stream of the first call, which may be closed by then
    handler, first, _ = console(monkeypatch)
    handler.handle(record("mpiopt.coordinator", "one"))
    first.close()
    then = io.StringIO()
    monkeypatch.setattr(sys, "stderr", then)
    handler.handle(record("mpiopt.coordinator", "two"))
    assert then.getvalue() == "two\n"


def test_search_log_keeps_every_trial_line(tmp_path):
    from mpiopt._log import log_to_file, stop_logging_to

    root = logging.getLogger("mpiopt")
    level = root.level
    root.setLevel(logging.INFO)
    handler = log_to_file(tmp_path / "search.log")
    try:
        for n in range(3 * TRIAL_LINES_PER_S):
            logging.getLogger(TRIALS).info("trial %d pruned", n)
    finally:
        stop_logging_to(handler)
        root.setLevel(level)
    assert (tmp_path / "search.log").read_text().count(" pruned") == 3 * TRIAL_LINES_PER_S


def test_search_log_on_a_full_disk_says_so_once_and_a_path_not_utf8_is_escaped(tmp_path, capsys):
    import errno

    from mpiopt._log import log_to_file, stop_logging_to

    class FullDisk:  # as a buffered file: closing writes out the text refused, and fails again
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

        def close(self):
            raise OSError(errno.ENOSPC, "No space left on device")

    root = logging.getLogger("mpiopt")
    level = root.level
    root.setLevel(logging.INFO)
    handler = log_to_file(tmp_path / "search.log")
    try:
        # straight to the file's handler: pytest captures what loggers log, and pytest-xdist cannot
        # pass text that is not UTF-8 on to its controller
        handler.handle(logging.LogRecord("mpiopt.coordinator", logging.INFO, __file__, 1, "run directory %s",
                                         (tmp_path / "bad\udcff",), None))
        handler.stream = FullDisk()
        for n in range(3):
            logging.getLogger("mpiopt.coordinator").info("trial %d completed", n)
    finally:
        stop_logging_to(handler)  # a search that finished still finishes: closing the log raises nothing
        root.setLevel(level)
    assert "bad\\udcff" in (tmp_path / "search.log").read_text()
    said = capsys.readouterr().err.splitlines()  # beside the trial lines, where the console shows them
    assert said.count(f"mpiopt: {tmp_path / 'search.log'}: No space left on device: no more lines are written to "
                      "it") == 1, said
    assert handler not in root.handlers

"""The run directory: lock, append-only journal, atomic results table (SPEC §4).

Pure Python: no MPI, no TensorFlow, no pandas. Nothing read from a run directory is unpickled or
executed: the journal is JSON lines, the config is YAML read safely.
"""
from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import errno
import fcntl
import io
import json
import logging
import math
import os
import queue
import re
import reprlib
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterable

import yaml

from ._errors import ConfigError
from . import pareto
from ._files import atomic_write, missing_folders, naming, refuse_a_file_in_the_way, remove_made
from .pareto import Goals
from .trial import TrialRecord, TrialStatus, apply_event, clean, trial_of

log = logging.getLogger(__name__)

JOURNAL = "trials.jsonl"
RESULTS = "results.csv"
CONFIG = "config.yaml"
LOCK = ".lock"
HEARTBEAT = "heartbeat.json"  # the coordinator's sign of life, for `mpiopt status` (no lock needed)
HEARTBEAT_EVERY_S = 10.0
# a heartbeat older than this many periods: the coordinator is gone (killed, or its node lost)
STALE_BEATS = 3
LOG = "search.log"  # the coordinator's log lines, appended across resumes
ERROR_TEXT = "error.txt"  # in trials/<id>/: a failed trial's whole error text
CHECKPOINT = ("checkpoint.npz", "checkpoint.json")  # in trials/<id>/: a trial's last checkpoint (mpiopt.learn)
PARAM_COUNT = "params"  # a model trial's parameter count: a metric in the journal, an integer column in the table
TRAIN_INFO = "train.yaml"  # beside `mpiopt train`'s weights: the configuration and values it trained
FORMAT_VERSION = 2  # the journal's first record says so; journals without one (version 1) read the same
MIN_FREE_BYTES = 16 * 2**20  # room for a journal, a table and a few checkpoints, checked at start


def iso(t: float | None) -> str:
    if t is None:
        return ""
    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).isoformat(timespec="milliseconds")


# -- replay ------------------------------------------------------------------------------------
def read_journal(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The journal's trial events, and a warning for each line that could not be read.

    A torn last line (a crash mid-write) and corrupt lines are skipped; the rest is kept.
    """
    events: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        data = path.read_bytes()
    except OSError as exc:  # a folder of that name, no permission: the run directory's fault, not mpiopt's
        raise ConfigError(f"cannot read the journal: {exc.strerror or exc}", source=str(path)) from None
    lines = data.split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        last = i == len(lines)  # no newline after it: torn
        try:
            event = _record(line)
        except ValueError as exc:
            kind = "torn last line (the search was stopped mid-write)" if last else f"corrupt line ({exc})"
            problems.append(f"{path}: line {i}: skipped a {kind}")
            continue
        events.append(event)
    if events and events[0].get("event") == "journal":  # the format header: checked, not a trial's event
        check_version(path, events.pop(0))
    return events, problems


def drop_checkpoint(folder: Path) -> None:
    """Delete the training checkpoint in `folder` (a trial's, a fold's), if any."""
    for name in CHECKPOINT:
        (folder / name).unlink(missing_ok=True)
    for part in folder.glob("checkpoint.worker*.npz"):  # master/worker training's workers' own parts
        part.unlink(missing_ok=True)


def _record(line: bytes) -> dict[str, Any]:
    """One line of the journal as its record; ValueError where it is none (a prefix of a record
    is no JSON object; UnicodeDecodeError is a ValueError too)."""
    event = json.loads(line.decode("utf-8"))
    if not isinstance(event, dict) or "event" not in event:
        raise ValueError("not a journal record")
    return event


def _is_a_record(line: bytes) -> bool:
    try:
        _record(line)
    except ValueError:
        return False
    return True


def header() -> dict[str, Any]:
    """A journal's first record: its format version, so that an older mpiopt refuses it in one line."""
    from . import __version__

    return {"event": "journal", "version": FORMAT_VERSION, "mpiopt": __version__}


def check_version(path: Path, first: dict[str, Any]) -> None:
    version = first.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ConfigError(f"journal format version {version} is newer than this mpiopt reads ({FORMAT_VERSION}); "
                          f"upgrade mpiopt to read it (written by mpiopt {first.get('mpiopt', '?')})", source=str(path))


def read_run_config(run: Path) -> dict[str, Any] | None:
    """The configuration a search in `run` last ran with (its config.yaml); None where it is
    missing, unreadable, or not a mapping."""
    try:
        config = yaml.safe_load((run / CONFIG).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return config if isinstance(config, dict) else None


def _first_record(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            return json.loads(f.readline().decode("utf-8"))
    except (OSError, ValueError):
        return None


def replay(events: Iterable[dict[str, Any]]) -> dict[int, TrialRecord]:
    """Rebuild the trials from journal events, through the function the live search applies them with."""
    trials: dict[int, TrialRecord] = {}
    for e in events:
        apply_event(trials, e)
    return dict(sorted(trials.items()))


# -- the results table -------------------------------------------------------------------------
Merit = tuple[str, str]  # the figure of merit: (metric, "minimize" | "maximize")


def front(trials: list[TrialRecord], goals: Goals) -> set[int]:
    """The trials on the Pareto front of `goals`: completed, and dominated by no other."""
    scored = [(t.trial, pareto.losses(goals, t.metrics, t.duration_s)) for t in trials
              if t.status == TrialStatus.COMPLETED]
    scored = [(n, v) for n, v in scored if v is not None]
    if not scored:
        return set()
    mask = pareto.front_mask([v for _, v in scored])
    return {n for (n, _), on in zip(scored, mask, strict=True) if on}


def _columns(trials: list[TrialRecord], param_names: list[str],
             goals: Goals = ()) -> tuple[list[str], list[str], list[str]]:
    """(columns, parameter names with extras, metric names) of the results table."""
    metric_names: list[str] = []
    for t in trials:
        for k in [*t.metrics, *(k for report in t.reports for k in report)]:
            if k not in metric_names and k not in ("epochs", "objective"):
                metric_names.append(k)
    metric_names.sort(key=lambda k: (k == PARAM_COUNT, k.startswith("val_"), k))  # the count after the metrics
    extra = sorted({k for t in trials for k in t.params if k not in param_names})
    names = list(param_names) + extra
    rung = ["rung"] if any(t.rung is not None for t in trials) else []  # only where a scheduler judged trials
    marks = ["pareto"] if goals else []
    std = ["objective_std"] if any(t.objective_std is not None for t in trials) else []  # only k-fold searches
    reported = [REPORTED_OBJECTIVE] if any(_reported_objective(t) for t in trials) else []
    columns = [*_FIRST_COLUMNS, "objective", *std, *reported, *marks, *(f"params_{n}" for n in names), *metric_names,
               "epochs", *rung, *_LAST_COLUMNS]
    return columns, names, metric_names


# A function's reports name its figure of merit `objective`, the table's column that is empty
# unless the trial completed: what a trial that did not reported of it (the report judged at its
# rung where paused or pruned, its best where interrupted) has a column of its own, as a model's
# `val_loss` has
REPORTED_OBJECTIVE = "reported_objective"


def _reported_objective(t: TrialRecord) -> bool:
    return t.status != TrialStatus.COMPLETED and any(finite_metric(m, "objective") for m in (t.metrics, *t.reports))


_FIRST_COLUMNS = ("trial", "status")
_LAST_COLUMNS = ("start", "end", "duration_s", "group", "ranks", "dispatch_ms", "wait_ms", "error")
# the table's own columns, which no metric may be named (`objective` and `epochs` a function may
# return: they are what the table holds under those names)
NOT_METRICS = (*_FIRST_COLUMNS, "objective_std", REPORTED_OBJECTIVE, "pareto", "rung", *_LAST_COLUMNS)


def column_clash(names) -> str | None:
    """The first of the metric `names` that a column of the results table already has, or None."""
    return next((n for n in names if n in NOT_METRICS or n.startswith("params_")), None)


def finite_metric(metrics: dict[str, Any], metric: str) -> bool:
    """Whether `metrics` hold a finite number for `metric` (a report that can be judged by it)."""
    value = metrics.get(metric)
    return isinstance(value, (int, float)) and math.isfinite(value)


def shown_metrics(t: TrialRecord, live: bool, merit: Merit | None) -> dict[str, float]:
    """A trial's metrics in the table: its result's. One the search left without a result for its
    last stretch (interrupted, or paused or pruned at its last report) shows those of its best
    report by `merit`, as a model trial's result holds its best epoch's (its checkpoint its weights)."""
    if merit is None or t.status != TrialStatus.RUNNING or t.shown_status(live) == TrialStatus.RUNNING:
        return t.metrics
    metric, direction = merit
    judged = [m for m in (t.metrics, *t.reports) if finite_metric(m, metric)]
    pick = min if direction == "minimize" else max
    return {**t.metrics, **pick(judged, key=lambda m: m[metric])} if judged else t.metrics  # its parameter count


def _row(t: TrialRecord, names: list[str], metric_names: list[str], live: bool,
         on_front: bool | None = None, merit: Merit | None = None) -> dict[str, Any]:
    status = t.shown_status(live)
    metrics = shown_metrics(t, live, merit)
    row: dict[str, Any] = {"trial": t.trial, "status": status.value,
                           "objective": t.objective if status == TrialStatus.COMPLETED else None,
                           "objective_std": t.objective_std if status == TrialStatus.COMPLETED else None,
                           "pareto": on_front}
    for n in names:
        row[f"params_{n}"] = t.params.get(n)
    for m in metric_names:
        row[m] = metrics.get(m)
    row[REPORTED_OBJECTIVE] = metrics.get("objective")
    if isinstance(row.get(PARAM_COUNT), float) and row[PARAM_COUNT].is_integer():  # journaled as a metric, a float
        row[PARAM_COUNT] = int(row[PARAM_COUNT])
    row["epochs"] = t.epochs
    row["rung"] = t.rung
    row["start"] = iso(t.first_start if t.first_start is not None else t.start)
    row["end"] = iso(t.end)  # a paused trial's too: the end of its last stretch
    row["duration_s"] = round(t.duration_s, 3) if t.duration_s is not None else None
    row["group"] = t.group
    row["ranks"] = t.ranks
    row["dispatch_ms"] = _ms(t.dispatch_s)
    row["wait_ms"] = _ms(t.wait_s)
    row["error"] = t.error
    return row


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 3) if seconds is not None else None


def result_rows(trials: Iterable[TrialRecord], param_names: list[str], *,
                live: bool = False, goals: Goals = (), merit: Merit | None = None) -> tuple[list[str], list[dict]]:
    """The results table's columns and rows (SPEC §5); a Pareto search's (`goals`) with a
    `pareto` column that marks its front.

    Trials still marked running are `running` while their search is `live`, else `interrupted`
    (`shown_metrics`: with the metrics of their best report by `merit`).
    """
    trials = list(trials)
    columns, names, metric_names = _columns(trials, param_names, goals)
    on = front(trials, goals) if goals else None
    return columns, [_row(t, names, metric_names, live, None if on is None else t.trial in on, merit) for t in trials]


STRETCH_COLUMNS = ["trial", "status", "epochs", "start", "end", "group", "ranks", "dispatch_ms", "wait_ms"]


def stretch_rows(events: Iterable[dict[str, Any]], *, live: bool = False,
                 last_beat: float | None = None) -> list[dict[str, Any]]:
    """The rows of `STRETCH_COLUMNS`, one a stretch of training: a trial from a hand-out (its
    first, a promotion, a re-run) to its group's result, which gives the status it ended in and
    the epochs it reached. A trial that is never paused is one stretch, as in the results table.
    A result with no stretch open (a paused trial pruned at the end, unpromoted) is the status of
    the trial's last stretch. A stretch with no result was cut off (a crash, a lost group) where
    its trial was handed out again or the search is not live: it ends at its last report (or its
    start), or, left open by a killed run, at that run's last record (the last run's: or its last
    heartbeat, `last_beat`, if later). In a live search the open stretch is running, without an `end`."""
    trials: dict[int, TrialRecord] = {}
    ended: list[dict[str, Any]] = []
    last: dict[int, dict[str, Any]] = {}
    unended: dict[int, TrialRecord] = {}
    reached: dict[int, tuple[float | None, int | None]] = {}  # per open stretch: (time, epoch) of its latest report
    run_last: float | None = None  # the latest record of the run (the first, each --resume) read so far
    marked = False  # runs are marked (`session` records): a journal from before them tells no run's end
    for event in events:
        kind = event.get("event")
        if kind == "session":  # a --resume: what the run before left open ran until that run's last record
            _ran_until(unended, reached, run_last)
            ended += [_cut_off(rec, reached) for rec in unended.values()]
            unended.clear()
            run_last, marked = None, True
        at = event.get("time", event.get("end"))  # a `finish` has the group's end instead
        if isinstance(at, (int, float)) and not isinstance(at, bool):
            run_last = max(run_last, at) if run_last is not None else float(at)
        again = trial_of(event) if kind == "start" else None
        if again in unended:
            ended.append(_cut_off(unended.pop(again), reached))
        rec = apply_event(trials, event)
        if rec is None:
            continue
        if kind == "start":
            unended[rec.trial] = rec
            reached[rec.trial] = (rec.start, rec.epochs)
        elif kind == "report":
            reached[rec.trial] = (event.get("time"), event.get("epoch"))
        elif unended.pop(rec.trial, None) is not None:
            last[rec.trial] = _stretch(rec, live)
            ended.append(last[rec.trial])
        elif rec.trial in last:
            last[rec.trial]["status"] = rec.shown_status(live).value
    if marked and not live:
        _ran_until(unended, reached, run_last if run_last is None or last_beat is None else max(run_last, last_beat))
    open_ = [_stretch(rec, live) if live else _cut_off(rec, reached) for rec in unended.values()]
    return _one_at_a_time(ended + open_)


def _ran_until(unended: dict[int, TrialRecord], reached: dict[int, tuple[float | None, int | None]],
               until: float | None) -> None:
    """The stretches a killed run left open ran until its last record at least (a function that
    reports no epochs would otherwise end where it started)."""
    if until is None:
        return
    for n in unended:
        at, epoch = reached.get(n, (None, None))
        if at is None or at < until:
            reached[n] = (until, epoch)


def _one_at_a_time(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A group trains one stretch at a time: a stretch that starts before the one before it on its
    group ended starts where that one ended. A stretch with no result of its own starts at its
    hand-out, and a trial sent ahead is handed out before the group's previous result."""
    ended_at: dict[int, str] = {}  # ISO times of one format: their order is the times' order
    for row in sorted(rows, key=lambda r: r["start"]):
        group, before = row["group"], ended_at.get(row["group"], "")
        if group is None:
            continue
        if row["start"] and row["start"] < before:
            row["start"] = before
            row["end"] = max(row["end"], before) if row["end"] else row["end"]
        ended_at[group] = max(before, row["end"] or "")
    return rows


def _cut_off(t: TrialRecord, reached: dict[int, tuple[float | None, int | None]]) -> dict[str, Any]:
    """The row of a stretch that has no result: it ends at its latest report, as far as it got."""
    row = _stretch(t, live=False)
    at, epoch = reached.get(t.trial, (None, None))
    row["end"], row["epochs"] = iso(at), epoch
    return row


def _stretch(t: TrialRecord, live: bool) -> dict[str, Any]:
    status = t.shown_status(live)
    return {"trial": t.trial, "status": status.value, "epochs": t.epochs, "start": iso(t.start),
            "end": iso(t.end), "group": t.group, "ranks": t.ranks,
            "dispatch_ms": _ms(t.dispatch_s), "wait_ms": _ms(t.wait_s)}


def results_csv(trials: Iterable[TrialRecord], param_names: list[str], *, live: bool = False,
                cache: dict | None = None, goals: Goals = (), merit: Merit | None = None) -> bytes:
    """The results table as CSV. With a `cache` (a dict kept by the caller), the lines of finished
    trials are formatted once and reused while the columns stay the same: rewriting the table of
    a long search then costs little more than joining its lines."""
    trials = list(trials)
    columns, names, metric_names = _columns(trials, param_names, goals)
    on = front(trials, goals) if goals else None
    if cache is not None and cache.get("columns") != columns:
        cache.clear()
        cache["columns"] = columns
    buf = io.StringIO()
    # a row also carries `rung`, a column only where a scheduler judged trials
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    out = [buf.getvalue()]
    for t in trials:
        flag = None if on is None else t.trial in on  # a later trial may push this one off the front
        key = (t.trial, t.status, t.start, t.end, flag) if cache is not None and t.status.is_finished() else None
        line = cache.get(key) if key is not None else None
        if line is None:
            buf.seek(0)
            buf.truncate()
            row = _row(t, names, metric_names, live, flag, merit)
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
            line = buf.getvalue()
            if key is not None:
                cache[key] = line
        out.append(line)
    return "".join(out).encode("utf-8")


# -- the run directory -------------------------------------------------------------------------
def _scheduler_settings(config: dict) -> dict[str, Any]:
    """The settings a search's scheduler judged its trials by (its rungs end at training.epochs),
    by dotted name; one a configuration lacks (an older mpiopt's) is left out."""
    sections = {name: part for name, part in config.items() if isinstance(part, dict)}
    search, training = sections.get("search", {}), sections.get("training", {})
    out = {f"search.{k}": search[k] for k in ("scheduler", "min_epochs", "reduction_factor") if k in search}
    if out.get("search.scheduler", "none") != "none" and "epochs" in training:
        out["training.epochs"] = training["epochs"]
    return out


def differences(old: Any, new: Any, where: str, limit: int = 3) -> list[str]:
    """What changed from `old` to `new` (parsed YAML), by dotted name, the first `limit` of them:
    `parameters.units.high 256 -> 300`, `parameters.dropout added`, `parameters.momentum removed`."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        if old == new:
            return []
        if isinstance(old, dict) or isinstance(new, dict):  # a section against none
            return [f"{where} {'added' if old is None else 'removed' if new is None else 'replaced'}"]
        return [f"{where} {_short(old)} -> {_short(new)}"]
    found = []
    for key in list(old) + [k for k in new if k not in old]:
        if key not in new:
            found.append(f"{where}.{key} removed")
        elif key not in old:
            found.append(f"{where}.{key} added")
        else:
            found += differences(old[key], new[key], f"{where}.{key}", limit)
        if len(found) >= limit:
            break
    return found[:limit]


def _short(value: Any) -> str:
    """`repr(value)` cut to a line's part: a changed list of a hundred choices is not printed whole."""
    short = reprlib.Repr()
    short.maxlist, short.maxstring, short.maxother = 8, 60, 60
    return short.repr(value)


class RunDir:
    """A search's folder: lock it, journal into it, and keep its results table current."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.shown = Path(path)  # as the user named it, for messages
        # every file is reached by its absolute path: a chdir in the user's code moves nothing
        self.path = self.shown.absolute()
        self.journal_path = self.path / JOURNAL
        self._lock_fd: int | None = None
        self._journal = None
        self._unsynced = False
        self._table_cache: dict = {}
        self._syncer: threading.Thread | None = None
        # requests to the syncer: True (fsync) or None (stop). A SimpleQueue takes them in one C
        # call: a Ctrl-C's KeyboardInterrupt can land between any two bytecodes, and one raised in
        # a Condition's Python-level __enter__ leaves its lock held, so the syncer never wakes
        self._sync_requests: queue.SimpleQueue = queue.SimpleQueue()
        self._sync_error: OSError | None = None
        self._needs_header = False  # a new journal: its first append writes the format header first
        self._made: list[Path] = []  # the folders `open` created, deepest first
        self._space: Path | None = None
        self._ranks: int | None = None
        self._nodes: int | None = None
        self._since: float | None = None  # when this search opened the directory

    def holds_search(self) -> bool:
        return self.journal_path.is_file() and self.journal_path.stat().st_size > 0

    def refuse_a_journal_that_is_no_file(self) -> None:
        if self.journal_path.exists() and not self.journal_path.is_file():
            raise ConfigError(f"{JOURNAL} is not a file (a folder of that name?): this is no run directory of "
                              "mpiopt's", source=str(self.shown))

    def started_here(self) -> bool:
        """Whether a search opened this folder (its journal and config.yaml are here), trials
        recorded or not."""
        return self.journal_path.is_file() and (self.path / CONFIG).is_file()

    def check(self, *, resume: bool, config_text: str) -> None:
        """Refuse, reading only, what `open` would refuse: a folder that holds another search (or
        none to resume), a changed space on --resume, a search running here now. Cheap enough to
        run on every rank before MPI and TensorFlow start."""
        where = str(self.shown)
        refuse_a_file_in_the_way(self.shown)
        self.refuse_a_journal_that_is_no_file()
        # a search stopped before its first trial leaves its config.yaml: --resume starts it, as
        # its interrupted line said (an empty or unknown folder is more likely a mistyped --out)
        if resume and not self.holds_search() and not self.started_here():
            why = ("no such directory" if not self.path.is_dir() else
                   f"no trial recorded in {JOURNAL}" if self.journal_path.exists() else f"no {JOURNAL}")
            raise ConfigError(f"--resume: no search to resume here ({why}); run without --resume to start one",
                              source=where)
        if is_live(self.path):
            raise ConfigError("another search is running in this directory", source=where)
        if not resume and self.holds_search():
            raise ConfigError("already holds a search; pass --resume to continue it, or choose another --out",
                              source=where)
        if not resume:
            self._refuse_files_a_search_would_overwrite()
        else:
            first = _first_record(self.journal_path)
            if isinstance(first, dict) and first.get("event") == "journal":
                check_version(self.journal_path, first)
            self._check_same_search(config_text)

    def files_a_new_search_would_overwrite(self) -> str | None:
        """What a new search here would overwrite: files of a search's names in a folder without a
        journal (the user's own, or a search's whose journal was deleted), or an `mpiopt train`
        run; None where there are none. A search writes its journal first of those, and its undoing
        (`abandon`, `discard`) removes them all."""
        if self.journal_path.exists():
            return None
        if (self.path / TRAIN_INFO).exists():  # a search's files beside it: load_model would take the search's
            return f"holds {TRAIN_INFO}, the record of an `mpiopt train` run: a search would mix its files with it"
        found = [name for name in (CONFIG, RESULTS, LOG, HEARTBEAT, "trials") if (self.path / name).exists()]
        return f"holds {', '.join(found)} but no {JOURNAL}: a new search would overwrite " \
            f"{'them' if len(found) > 1 else 'it'}" if found else None

    def _refuse_files_a_search_would_overwrite(self) -> None:
        found = self.files_a_new_search_would_overwrite()
        if found is not None:
            raise ConfigError(f"{found}; choose another --out", source=str(self.shown))

    def open(self, *, resume: bool, config_text: str, space: Path | None = None, ranks: int | None = None,
             nodes: int | None = None) -> None:
        """Create or reopen the directory for a search, refusing what would lose or mix data;
        `space` (the search-space file it runs from), `ranks` (the job's size) and `nodes` (how
        many it ran on): what the heartbeat names for a --resume."""
        self._space, self._ranks, self._nodes = space, ranks, nodes
        self._since = time.time()
        where = str(self.shown)
        self.check(resume=resume, config_text=config_text)
        self._made = missing_folders(self.path)
        probe = self.path / f".write-test.{os.getpid()}"
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"ok")
        except OSError as exc:
            self._unmake(probe.name)
            raise ConfigError(f"cannot write here: {exc.strerror or exc}", source=where) from None
        probe.unlink()
        try:
            refuse_a_full_file_system(self.path, where)
        except ConfigError:
            self._unmake()
            raise
        self._acquire_lock()
        if resume:
            self._check_same_search(config_text)
            self._mend_torn_tail()
        self._journal = open(self.journal_path, "ab")  # first: files of a search's names without it are refused
        if not resume:
            self.write_config(config_text)
        self._needs_header = not self.holds_search()

    def _acquire_lock(self) -> None:
        self._lock_fd = hold_the_lock(self.path, "search", str(self.shown))

    def _check_same_search(self, config_text: str) -> None:
        mismatch = self.journal_space_mismatch(config_text)
        if mismatch is not None:
            raise ConfigError(f"--resume: {CONFIG} is missing or unreadable, and the trials in {JOURNAL} are of "
                              f"another space ({mismatch}); resume with the space they ran, or start a new search "
                              "in another --out", source=str(self.shown))
        changed = self.setting_a_resume_may_not_change(config_text)
        if changed is None:
            return
        key, how = changed
        if key in ("parameters", "objective"):
            raise ConfigError(f"--resume: `{key}` differs from the search in {self.path / CONFIG} ({how}); resume "
                              "with the same space and objective, or start a new search in another --out",
                              source=str(self.shown))
        raise ConfigError(f"--resume: `{key}` differs from the search in {self.path / CONFIG} ({how}): its rungs and "
                          "paused trials are the journal's; resume with the same scheduler settings, or start a "
                          "new search in another --out", source=str(self.shown))

    def journal_space_mismatch(self, config_text: str) -> str | None:
        """Where config.yaml is gone or unreadable, the journal's trials tell the space: how they
        differ from `config_text`'s, else None. Each parameter they were given must be one of its
        parameters, with a value it holds, and each of those without a condition must have been
        given, or a resume would mix two searches."""
        from .space import parse_space

        if read_run_config(self.path) is not None:
            return None
        raw = (yaml.safe_load(config_text) or {}).get("parameters") or {}
        space = parse_space(raw, source=CONFIG, did_you_mean=lambda *args: "")
        given = [(e.get("trial"), e.get("params") or {}) for e in read_journal(self.journal_path)[0]
                 if e.get("event") == "start"]
        if not given:
            return None
        names = {name for _, params in given for name in params}
        unknown = sorted(names - set(space.names))
        missing = sorted({p.name for p in space.params if not p.when} - names)
        if unknown:
            return f"they were given {', '.join(unknown)}, which this space lacks"
        if missing:
            return f"none was given {', '.join(missing)}, which this space has"
        outside = next(((n, name, v) for n, params in given for name, v in params.items()
                        if not space[name].contains(v)), None)
        if outside is not None:
            n, name, v = outside
            return f"trial {n}'s {name}={v!r} is not in this space's {name}"
        return None

    def setting_a_resume_may_not_change(self, config_text: str) -> tuple[str, str] | None:
        """The first key of the search here (its config.yaml) that `config_text` changes and a
        --resume may not (the space, the objective, the scheduler's rungs), and how it changed
        (`differences`); None where none differs, or config.yaml cannot be read."""
        old, new = read_run_config(self.path), yaml.safe_load(config_text) or {}
        if old is None:
            return None
        for key in ("parameters", "objective"):
            if old.get(key) != new.get(key):
                return key, ", ".join(differences(old.get(key), new.get(key), key))
        now = _scheduler_settings(new)
        for key, value in _scheduler_settings(old).items():
            if now.get(key) != value:
                return key, f"{value!r} -> {now.get(key)!r}"
        return None

    def _mend_torn_tail(self) -> None:
        """Cut a torn last record off the journal (kept aside in trials.jsonl.torn) before appending.
        A whole record that lost only its newline is kept, as `read_journal` keeps it: its newline
        is written instead."""
        with open(self.journal_path, "rb+") as f:
            data = f.read()
            if not data or data.endswith(b"\n"):
                return
            cut = data.rfind(b"\n") + 1
            torn = data[cut:]
            if _is_a_record(torn):
                f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())
                return
            with open(self.path / (JOURNAL + ".torn"), "ab") as keep:
                keep.write(torn + b"\n")
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())
        log.warning("%s: a torn last line (%d bytes) was cut off and kept in %s.torn", self.journal_path, len(torn),
                    JOURNAL)

    def append(self, event: dict[str, Any], *, sync: bool = True) -> None:
        """Append one record, written whole and flushed to the OS (it survives a kill of this
        process at once); fsynced before this returns unless `sync=False`, in which case `sync()`
        must follow (the coordinator syncs once a loop, before it waits for the next result)."""
        assert self._journal is not None, "RunDir.open() first"
        with naming(self.journal_path):
            if self._needs_header:  # with the first event: a journal that holds no trial stays empty
                self._needs_header = False
                self._journal.write(_line(header()))
            self._journal.write(_line(event))
            self._journal.flush()
            if sync:
                os.fsync(self._journal.fileno())
            else:
                self._unsynced = True

    def sync(self) -> None:
        """fsync the journal now if records were appended with `sync=False` since the last one."""
        self._raise_sync_error()
        if self._journal is not None and self._unsynced:
            self._unsynced = False
            with naming(self.journal_path):
                os.fsync(self._journal.fileno())

    def sync_soon(self) -> None:
        """Have a helper thread fsync the journal (group commit): the records are already written
        and flushed, so a killed process loses nothing; the fsync, which waits for the disk, keeps
        them through a crash of the machine, and the caller goes on meanwhile. An error of that
        fsync is raised by the next call."""
        self._raise_sync_error()
        if self._journal is None or not self._unsynced:
            return
        self._unsynced = False
        if self._syncer is None:  # known before it starts: close() must stop any syncer that runs
            self._syncer = threading.Thread(target=self._sync_loop, args=(self._journal,), name="mpiopt-journal-sync",
                                            daemon=True)
            self._syncer.start()
        self._sync_requests.put(True)

    def _sync_loop(self, journal) -> None:
        """fsync `journal` once for all the requests waiting (group commit), until told to stop."""
        while self._take_sync_requests():
            try:
                os.fsync(journal.fileno())
            except ValueError:  # closed: close() gave up waiting for this fsync and made its own
                return
            except OSError as exc:
                self._sync_error = exc

    def _take_sync_requests(self) -> bool:
        """Wait for a request and take those queued behind it; False once one says stop."""
        requests = [self._sync_requests.get()]
        with contextlib.suppress(queue.Empty):
            while True:
                requests.append(self._sync_requests.get_nowait())
        return None not in requests

    def _raise_sync_error(self) -> None:
        if self._sync_error is not None:
            exc, self._sync_error = self._sync_error, None
            with naming(self.journal_path):
                raise exc

    def load(self) -> tuple[dict[int, TrialRecord], list[str]]:
        events, problems = self.events()
        return replay(events), problems

    def events(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Every readable event of the journal, in order, and what could not be read."""
        if not self.journal_path.exists():
            return [], []
        return read_journal(self.journal_path)

    def write_results(self, trials: Iterable[TrialRecord], param_names: list[str], *, live: bool = True,
                      goals: Goals = (), merit: Merit | None = None) -> None:
        """Rewrite results.csv. While the search is `live` the table is a view of the journal (the
        record of truth, fsynced), so it is replaced atomically but not fsynced; the final table is."""
        atomic_write(self.path / RESULTS, results_csv(trials, param_names, live=live, cache=self._table_cache,
                                                      goals=goals, merit=merit), durable=not live)

    def heartbeat(self, state: str, *, stopped: str | None = None) -> None:
        """Say the search is alive (`state` "running") or has ended ("ended"; `stopped`: why it
        ended before its budget, or failed): `mpiopt status` reads it from any machine that sees the
        file system, where the lock may not be visible."""
        body = {"state": state, "time": time.time(), "host": socket.gethostname(), "pid": os.getpid(),
                "space": str(self._space) if self._space is not None else None, "ranks": self._ranks,
                "nodes": self._nodes, "since": self._since, "stopped": stopped}
        atomic_write(self.path / HEARTBEAT, _line(body), durable=False)

    def trial_dir(self, trial: int) -> Path:
        return self.path / "trials" / str(trial)

    def drop_checkpoint(self, trial: int) -> None:
        """Delete a trial's checkpoints (its own, and its k-fold folds') once nothing will continue
        it (its best weights stay)."""
        folder = self.trial_dir(trial)
        for each in (folder, *folder.glob("fold_*")):
            drop_checkpoint(each)

    def write_error(self, trial: int, text: str) -> None:
        """Keep a failed trial's whole error text in trials/<id>/error.txt (the table has its headline)."""
        folder = self.trial_dir(trial)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(folder / ERROR_TEXT, text.encode("utf-8"), durable=False)
        except OSError as exc:  # the journal has the headline; a full disk must not stop the search here
            log.warning("could not write %s: %s", folder / ERROR_TEXT, exc.strerror or exc)

    def write_config(self, config_text: str) -> None:
        """The configuration as it runs (config.yaml). A resumed search writes it once its checks
        passed: a refused --resume leaves the budget and seed of the search that ran."""
        atomic_write(self.path / CONFIG, config_text.encode("utf-8"))

    def abandon(self) -> None:
        """Undo `open` for a new search that never started (its preflight failed): the empty
        journal, the configuration and the lock go, and the folder too if `open` made it. Only
        where this process holds the lock: an `open` refused because another search runs here
        must leave that search's files alone."""
        ours = self._lock_fd is not None and not self.holds_search()
        self.close()
        if ours:
            self._unmake(JOURNAL, CONFIG, LOCK)

    def _unmake(self, *names: str) -> None:
        """Remove the files `names` of the folder, then the folders `open` made (`remove_made`)."""
        remove_made([self.path / name for name in names], self._made)

    def discard(self) -> None:
        """Remove a new search that stopped on its objective's misuse before anything else finished
        (`Summary.discard`): what it wrote, the trial folders and the folders `open` made, so that
        the search with the objective fixed starts afresh. The one error line has said what broke."""
        self.close()
        for name in (JOURNAL, RESULTS, CONFIG, LOG, HEARTBEAT, LOCK):
            (self.path / name).unlink(missing_ok=True)
        shutil.rmtree(self.path / "trials", ignore_errors=True)
        self._unmake()

    def close(self) -> None:
        if self._syncer is not None:  # the last fsync is close's own: the syncer stops before the file closes
            self._sync_requests.put(None)
            if self._syncer.is_alive():  # not when an interrupt came before it started
                self._syncer.join(timeout=60)
            self._syncer = None
        if self._journal is not None:
            journal, self._journal = self._journal, None
            with naming(self.journal_path):
                try:
                    os.fsync(journal.fileno())
                finally:
                    journal.close()
        if self._lock_fd is not None:
            let_go(self._lock_fd)
            self._lock_fd = None


def too_little_room(folder: Path) -> int | None:
    """The free bytes of the file system of `folder` where they are too few for a search
    (MIN_FREE_BYTES), else None."""
    free = shutil.disk_usage(folder).free
    return free if free < MIN_FREE_BYTES else None


def refuse_a_full_file_system(folder: Path, where: str) -> None:
    """A ConfigError (under `where`) where the file system of `folder` has no room for a search."""
    free = too_little_room(folder)
    if free is not None:
        raise ConfigError(f"the file system is full ({free / 2**20:.1f} MiB free; a search needs at least "
                          f"{MIN_FREE_BYTES // 2**20} MiB for its journal, table and checkpoints)", source=where)


def refuse_an_unwritable_place(path: Path) -> None:
    """What a search would refuse at `path` before it writes (for `check`, which writes nothing):
    a folder it cannot write in (read-only, no permission) or a full file system."""
    folder = next(p for p in (path, *path.parents) if p.exists())
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write here: {folder} is read-only or not writable by you", source=str(path))
    refuse_a_full_file_system(folder, str(path))


def _line(event: dict[str, Any]) -> bytes:
    """The event as one JSON line, as `clean` makes it JSON-safe. Most events are plain JSON
    already, and the dispatch loop journals one per report: they skip the copy, and only a
    non-finite float (which `json` refuses here) or a key it cannot take sends one through it."""
    try:
        text = json.dumps(event, separators=(",", ":"), allow_nan=False, default=clean)
    except (ValueError, TypeError):
        text = json.dumps(clean(event), separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8") + b"\n"


# flock's errors on a file system that takes no locks (Lustre mounted `noflock`, NFS without its
# lock daemon, some FUSE mounts): there a lock can tell nothing, so its failure is not taken for
# another search holding it
_NO_LOCKS = {errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL}


def hold_the_lock(folder: Path, what: str, where: str) -> int:
    """Lock `folder` for this process (a search or a training writing there) and return the lock's
    descriptor (`let_go` lets the folder go); a ConfigError where another holds it. The lock dies
    with the process too (flock), so a killed job never leaves a stale one. The file names its
    holder; where the file system takes no locks, that is what `is_live` reads, and a warning says
    that a second search from another machine is not refused."""
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in _NO_LOCKS:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            raise ConfigError(f"another {what} is running in this directory ({holder or 'lock held'})",
                              source=where) from None
        log.warning("%s: its file system takes no file locks (%s), so a second %s started in this directory on "
                    "another machine might not be refused: start one at a time", where, os.strerror(exc.errno), what)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {iso(time.time())}\n".encode(), 0)
    return fd


def let_go(fd: int) -> None:
    """Release the lock `hold_the_lock` took: its file names no holder any more (what tells, where
    the file system takes no locks), and closing it unlocks."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)


def is_live(path: str | os.PathLike) -> bool:
    """Whether a search (or a training) holds the lock of this folder right now. Where the file
    system takes no locks: whether the process the lock file names lives on this machine, or a
    search's heartbeat from another machine is recent."""
    lock_path = Path(path) / LOCK
    if not lock_path.exists():
        return False
    fd = os.open(lock_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno not in _NO_LOCKS or _holder_lives(lock_path) or _beats_elsewhere(Path(path))
    finally:
        os.close(fd)
    return False


def lock_holder(folder: Path) -> dict[str, Any] | None:
    """The process the lock file of `folder` names, as `hold_the_lock` wrote it: its `pid`, `host`
    and `since` (seconds since the epoch); None where there is no file or `let_go` emptied it."""
    try:
        holder = re.match(r"pid (\d+) on (\S+) since (\S+)", (folder / LOCK).read_text("utf-8"))
        return None if holder is None else {"pid": int(holder[1]), "host": holder[2],
                                            "since": _dt.datetime.fromisoformat(holder[3]).timestamp()}
    except (OSError, ValueError):
        return None


def read_heartbeat(folder: Path) -> dict[str, Any] | None:
    """A run directory's heartbeat, or None where it is missing or unreadable (not JSON, no
    mapping, no time of the beat)."""
    try:
        beat = json.loads((folder / HEARTBEAT).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(beat, dict) or not isinstance(beat.get("time"), (int, float)) or isinstance(beat["time"], bool):
        return None
    return beat


def recent(beat_time: float, now: float) -> bool:
    """Whether a heartbeat of `beat_time` is recent at `now`: newer than STALE_BEATS periods."""
    return now - beat_time <= STALE_BEATS * HEARTBEAT_EVERY_S


def _holder_lives(lock_path: Path) -> bool:
    """Whether the lock file names a process of this machine that lives."""
    holder = lock_holder(lock_path.parent)
    return holder is not None and holder["host"] == socket.gethostname() and not gone_from_this_machine(holder)


def _beats_elsewhere(folder: Path) -> bool:
    """Whether a search of another machine beats here: its heartbeat says it runs, and is recent."""
    beat = read_heartbeat(folder)
    return beat is not None and "host" in beat and beat["host"] != socket.gethostname() and \
        beat.get("state") == "running" and recent(beat["time"], time.time())


def gone_from_this_machine(beat: dict) -> bool:
    """The coordinator ran on this host and its pid no longer exists: a kill -9 shows at once,
    not a few heartbeats later. On any other host only the heartbeat's age can tell."""
    pid = beat.get("pid")
    if beat.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, as another user's process
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """Whether `pid` has died and waits to be reaped: such a process keeps its pid, and
    `os.kill(pid, 0)` still succeeds on it, until its parent (or whoever adopted it) reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (not Linux), or reaped meanwhile
        return False
    return stat[stat.rindex(")") + 2:].startswith(("Z", "X"))



"""A trial's records: the task a group gets, the result it sends back, the journal's view of it.

One shape end to end: a `TrialResult` is what a rank makes of a trial, what its group merges and
reports, and (as JSON) the journal's `finish` event; a `Task` is the `start` event. `apply_event`
turns an event into the `TrialRecord` the table shows, for the live search and for the replay of a
journal alike, so the two can never disagree.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


# how the line of a search that lost or retired every group begins (`mpiopt status` offers the --resume)
NO_GROUP_LEFT = "every group was"

class TrialStatus(str, Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"  # an exception in user code
    DIVERGED = "diverged"  # a NaN/inf figure of merit or loss
    TIMEOUT = "timeout"  # past training.time_limit
    PRUNED = "pruned"  # stopped for good by the scheduler; `epochs` says how far it got
    PAUSED = "paused"  # stopped at a rung with its checkpoint; the scheduler may promote it later
    INTERRUPTED = "interrupted"  # the search stopped while it ran; --resume runs it again

    def is_finished(self) -> bool:
        return self not in (TrialStatus.RUNNING, TrialStatus.INTERRUPTED, TrialStatus.PAUSED)

    def is_cut_short(self) -> bool:
        """Ended without a result of its own: an exception, a NaN, or its time limit."""
        return self in (TrialStatus.FAILED, TrialStatus.DIVERGED, TrialStatus.TIMEOUT)

    @classmethod
    def parse(cls, value: Any) -> TrialStatus:
        """A status read from a message or a journal; anything unknown counts as a failure."""
        try:
            return cls(value)
        except ValueError:
            return cls.FAILED


@dataclass(frozen=True)
class Task:
    """What the coordinator sends a group: one trial to run."""

    trial: int
    params: dict[str, Any]
    trial_dir: str | None = None
    decide_at: tuple[int, ...] = ()  # epochs after which the group waits for the scheduler's decision
    # the trial's epochs the journal holds reports of: a checkpoint past them (a kill came between
    # its save and the report's record) reports the rest again, rungs judged, before training on
    reported: int = 0

    def to_json(self) -> dict[str, Any]:
        return clean(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Task:
        return cls(trial=int(d["trial"]), params=dict(d["params"]), trial_dir=d.get("trial_dir"),
                   decide_at=tuple(int(e) for e in d.get("decide_at") or ()), reported=int(d.get("reported") or 0))


@dataclass(frozen=True)
class Report:
    """A group's metrics after one epoch (or step) of a trial; with `decide`, the group waits for
    the scheduler's word (`continue`, `pause` or `stop`) before it goes on."""

    trial: int
    epoch: int
    metrics: dict[str, float]
    decide: bool = False

    def to_json(self) -> dict[str, Any]:
        return clean(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Report:
        return cls(trial=int(d["trial"]), epoch=int(d["epoch"]), metrics=dict(d.get("metrics") or {}),
                   decide=bool(d.get("decide")))


@dataclass(frozen=True)
class TrialResult:
    """A trial's result: what a rank made of it, then (with `trial` and its times) what its group
    reports. `detail` travels to the coordinator for the trial's error.txt but is not journaled."""

    status: TrialStatus = TrialStatus.COMPLETED
    objective: float | None = None
    objective_std: float | None = None  # k-fold cross-validation: the spread of the folds' figures of merit
    metrics: dict[str, float] = field(default_factory=dict)
    epochs: int | None = None
    error: str | None = None  # one line: the exception's type and the line that names the problem
    detail: str | None = None  # the full text and traceback
    resumed_s: float | None = None  # training time of earlier attempts, carried by the checkpoint resumed from
    misuse: bool = False  # the objective broke its contract (wrong return type): the search stops, exit 2
    misuse_field: str = "objective"  # the file's field a misuse is the fault of (objective.data: unreadable data)
    trial: int | None = None
    start: float | None = None  # when the group began and ended it (its clock, seconds since the epoch)
    end: float | None = None
    wait_s: float | None = None  # how long the group waited for this task after its previous result
    # a function's harmless misuse of `trial`, which the coordinator warns of once a search: the
    # last step it reported after the scheduler had stopped it, and past training.epochs
    reported_after_stop: int | None = None
    reported_past_top: int | None = None
    not_numbers: tuple[str, ...] = ()  # keys of a function's dict whose values are no numbers: left out

    def reported(self, trial: int, start: float, end: float, wait_s: float | None) -> TrialResult:
        """This result as the group reports it: the trial's number and when it ran."""
        return dataclasses.replace(self, trial=trial, start=start, end=end, wait_s=wait_s)

    def to_json(self) -> dict[str, Any]:
        return clean({**dataclasses.asdict(self), "status": self.status.value})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrialResult:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in names}
        values["status"] = TrialStatus.parse(d.get("status"))
        values["metrics"] = dict(values.get("metrics") or {})
        values["not_numbers"] = tuple(values.get("not_numbers") or ())  # a list in JSON
        return cls(**values)


@dataclass
class TrialRecord:
    """One trial as the journal and the results table know it."""

    trial: int
    params: dict[str, Any]
    status: TrialStatus = TrialStatus.RUNNING
    objective: float | None = None
    objective_std: float | None = None  # k-fold cross-validation only
    metrics: dict[str, float] = field(default_factory=dict)
    epochs: int | None = None
    start: float | None = None  # of this stretch of training (a paused trial's promotion starts another)
    end: float | None = None
    first_start: float | None = None  # of the trial's first stretch (an interrupted one's: its hand-out)
    group: int | None = None
    ranks: int | None = None
    error: str | None = None
    dispatch_s: float | None = None  # coordinator: from the group's previous result to this trial's hand-out
    wait_s: float | None = None  # group: from sending its previous result to receiving this trial
    resumed_s: float | None = None  # training time of earlier attempts (resumed from their checkpoint)
    rung: int | None = None  # under a scheduler: the highest rung (epochs) at which it was judged
    # the scheduler paused it at its last report, and its group's own "paused" result is not in
    # the journal yet: a search cut off there leaves it paused (its checkpoint is at the rung)
    pause_decided: bool = False
    stop_decided: bool = False  # likewise stopped: a search cut off there leaves it pruned at that report
    # the metrics of its reports since its last result: a search cut off before the next result
    # leaves the table those of its best report (`journal.shown_metrics`)
    reports: list[dict[str, float]] = field(default_factory=list)

    def shown_status(self, live: bool) -> TrialStatus:
        """The status a user sees: a trial still running when its search stopped is interrupted
        (--resume runs it again), or paused or pruned where the scheduler had paused or stopped it
        (--resume keeps it for a promotion, or prunes it, as the replayed scheduler does)."""
        if self.status != TrialStatus.RUNNING or live:
            return self.status
        if self.pause_decided:
            return TrialStatus.PAUSED
        return TrialStatus.PRUNED if self.stop_decided else TrialStatus.INTERRUPTED

    @property
    def duration_s(self) -> float | None:
        """Time spent on the trial: this attempt, and the attempts its checkpoint carried over."""
        if self.end is None or self.start is None:
            return None
        return self.end - self.start + (self.resumed_s or 0.0)


# -- journal events ------------------------------------------------------------------------------
def start_event(task: Task, group: int, ranks: int, now: float, promoted: bool = False) -> dict[str, Any]:
    """The journal's record of a trial handed out (written before the task is sent); `promoted`:
    a paused trial that goes on from its checkpoint."""
    event = {"event": "start", "trial": task.trial, "params": task.params, "group": group, "ranks": ranks,
             "time": now}
    if promoted:
        event["promoted"] = True
    return clean(event)


def report_event(report: Report, now: float, decision: str | None = None, rung: int | None = None) -> dict[str, Any]:
    """The journal's record of one epoch's metrics of a running trial; `decision`: the scheduler's
    at this report, kept when it paused or stopped the trial (a replay of the scheduler decides the
    same; the mark lets a reader of the journal alone tell such a trial from an interrupted one);
    `rung`: the highest rung it has been judged at so far, which the table of a killed search shows."""
    event = {"event": "report", "trial": report.trial, "epoch": report.epoch, "metrics": report.metrics,
             "time": now}
    if decision in ("pause", "stop"):
        event["decision"] = decision
    if rung is not None:
        event["rung"] = rung
    return clean(event)


def finish_event(result: TrialResult, rec: TrialRecord, now: float) -> dict[str, Any]:
    """The journal's record of a trial's result: a figure of merit only for a completed trial, and
    the hand-out's times where the group did not report its own."""
    status = result.status
    completed = status == TrialStatus.COMPLETED
    event = {"event": "finish", "trial": rec.trial, "status": status.value,
             "objective": result.objective if completed else None,
             "metrics": result.metrics, "epochs": result.epochs, "error": result.error,
             "start": result.start or rec.start, "end": result.end or now, "wait_s": result.wait_s,
             "dispatch_s": rec.dispatch_s, "resumed_s": result.resumed_s, "rung": rec.rung}
    if completed and result.objective_std is not None:  # only k-fold trials have one: other journals stay as they were
        event["objective_std"] = result.objective_std
    return clean(event)


def trial_of(event: dict[str, Any]) -> int | None:
    """The trial number a journal event is about, or None (the format header, a malformed event)."""
    try:
        return int(event["trial"])
    except (KeyError, TypeError, ValueError):
        return None


def apply_event(trials: dict[int, TrialRecord], event: dict[str, Any]) -> TrialRecord | None:
    """Bring `trials` up to date with one journal event; the record it changed, or None.

    A later event of a trial overrides an earlier one, except that a stray `start` never undoes a
    finished trial. Events of other kinds (the format header) and malformed ones change nothing.
    """
    n = trial_of(event)
    if n is None:
        return None
    kind = event.get("event")
    if kind == "start":
        old = trials.get(n)
        if old is not None and old.status.is_finished():
            return None
        # a promoted trial (or one run again) keeps what its last result said it reached, until its
        # next, and its first start: a stretch cut off by a kill has no result, only its hand-out
        first = None if old is None else old.first_start if old.first_start is not None else old.start
        rec = trials[n] = TrialRecord(trial=n, params=dict(event.get("params") or {}), start=event.get("time"),
                                      first_start=first,
                                      epochs=old.epochs if old else None, metrics=dict(old.metrics) if old else {},
                                      group=event.get("group"), ranks=event.get("ranks"),
                                      dispatch_s=event.get("dispatch_s"), rung=old.rung if old else None,
                                      reports=old.reports if old else [])
        return rec
    if kind == "report":
        rec = trials.get(n)
        if rec is None or rec.status != TrialStatus.RUNNING:
            return None
        # how far a trial got, until its result says: what a table of a killed search shows
        epoch = event.get("epoch")
        if isinstance(epoch, int) and not isinstance(epoch, bool):
            rec.epochs = max(rec.epochs or 0, epoch)
        rec.pause_decided = event.get("decision") == "pause"
        rec.stop_decided = event.get("decision") == "stop"
        rec.rung = event.get("rung", epoch if rec.pause_decided else rec.rung)
        if isinstance(event.get("metrics"), dict):
            rec.reports.append(dict(event["metrics"]))
        return rec
    if kind != "finish":
        return None
    rec = trials.get(n)
    if rec is None:
        rec = trials[n] = TrialRecord(trial=n, params=dict(event.get("params") or {}))
    rec.status = TrialStatus.parse(event.get("status"))
    rec.objective = event.get("objective")
    rec.objective_std = event.get("objective_std")
    rec.metrics = dict(event.get("metrics") or {})
    rec.reports = []
    if event.get("epochs") is not None:  # a result that does not say (a failure): as far as its reports got
        rec.epochs = event.get("epochs")
    rec.error = event.get("error")
    rec.start = event.get("start", rec.start)
    if rec.first_start is None:
        rec.first_start = rec.start
    rec.end = event.get("end")
    rec.wait_s = event.get("wait_s")
    rec.resumed_s = event.get("resumed_s")
    rec.dispatch_s = event.get("dispatch_s", rec.dispatch_s)
    rec.rung = event.get("rung", rec.rung)
    return rec


def reached_by_state(trials: dict[int, TrialRecord], reached: dict[int, int],
                     paused: set[int]) -> dict[str, list[int]]:
    """The highest epoch each trial reported (0: none yet), split into running, paused and
    finished trials: the arguments of `Scheduler.epochs_left`."""
    out: dict[str, list[int]] = {"running": [], "paused": [], "finished": []}
    for n, t in trials.items():
        state = "finished" if t.status.is_finished() else "paused" if n in paused else "running"
        out[state].append(reached.get(n, 0))
    return out


def clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become None, numpy scalars become Python numbers."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    try:  # numpy scalars
        item = value.item()
    except AttributeError:
        return str(value)
    return clean(item)

"""A group's side of a search: receive a candidate, run it on every rank, report the result."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import _env
from ._errors import GroupPeerFailed
from .objective import TrialRunner
from .trial import Report, Task, TrialResult, TrialStatus

# what a group reports without any rank having failed: the scheduler may stop or pause a trial
SUCCESSFUL = (TrialStatus.COMPLETED, TrialStatus.PAUSED, TrialStatus.PRUNED)

log = logging.getLogger(__name__)


def merge(results: list[TrialResult], ranks: list[int] | None = None) -> TrialResult:
    """The trial's result from every rank's: rank 0's, unless a rank failed.

    The first rank with a failure of its own (not a "peer failed" echo) names the error, by its
    number in `ranks` (default: its place in `results`). A result every rank reports alike is
    one the group agreed on (a k-fold trial's, merged from its folds on every rank): it stands as is.
    """
    lead = results[0]
    bad = [(r, o) for r, o in enumerate(results) if o.status not in SUCCESSFUL]
    name = ranks or list(range(len(results)))
    if not bad and lead.epochs is None and (r := next((r for r, o in enumerate(results) if o.epochs), None)):
        return TrialResult(status=TrialStatus.FAILED, misuse=True, error=(
            f"trial.report: group rank {name[r]} reported steps and group rank {name[0]} none; only the group's "
            f"first rank's reports reach the scheduler: report on it (or on every rank)"))
    if not bad or len(results) == 1 or all(o == lead for o in results):
        return lead
    own = [(r, o) for r, o in bad if not (o.error or "").startswith(GroupPeerFailed.__name__)]
    r, o = (own or bad)[0]
    details = "\n".join(f"== group rank {name[k]} ==\n{b.detail}" for k, b in (own or bad) if b.detail)
    return TrialResult(status=o.status, metrics=lead.metrics, epochs=lead.epochs,
                       error=f"{_ranks_that_said(o.error, results, name)}: {o.error}", detail=details or None,
                       misuse=o.misuse, misuse_field=o.misuse_field, resumed_s=lead.resumed_s)


def _ranks_that_said(error: str | None, results: list[TrialResult], name: list[int]) -> str:
    """The group ranks whose own error is `error`: all of them said so ("every group rank"),
    several named, or the one: a failure every rank met alike is not one rank's."""
    alike = [name[k] for k, o in enumerate(results) if o.status not in SUCCESSFUL and o.error == error]
    if len(alike) == len(results):
        return "every group rank"
    if len(alike) > 1:
        return f"group ranks {', '.join(map(str, alike))}"
    return f"group rank {alike[0]}"


class Progress:
    """A training trial's sign of life: an INFO line after an epoch, at most one every `every_s`
    seconds (MPIOPT_PROGRESS_S), so that a trial of an hour shows how it goes and trials of
    seconds stay quiet."""

    def __init__(self, trial: int, epochs: int, metric: str, direction: str, every_s: float,
                 clock=time.monotonic) -> None:
        self.trial, self.epochs, self.metric, self.every_s, self.clock = trial, epochs, metric, every_s, clock
        self.better = min if direction == "minimize" else max
        self.best: float | None = None
        self.last = clock()

    def __call__(self, epoch: int, row: dict[str, float]) -> None:
        value = row.get(self.metric)
        if value is not None and value == value:  # not NaN
            self.best = value if self.best is None else self.better(self.best, value)
        if self.clock() - self.last < self.every_s:
            return
        self.last = self.clock()
        now = f"{self.metric}={value:.6g}" if value is not None else "no " + self.metric
        best = f" (best {self.best:.6g})" if self.best is not None and self.best != value else ""
        log.info("trial %d, epoch %d of %d: %s%s", self.trial, epoch, self.epochs, now, best)


class Reporter:
    """A trial's epoch reports: logged now and then, sent to the coordinator (`send`, on the rank
    that talks to it), and at the task's decision epochs answered by the scheduler.

    Called after an epoch (or a function objective's step); returns why the trial stops there
    ("paused", "pruned") or None to go on."""

    STOPS = {"pause": "paused", "stop": "pruned"}

    def __init__(self, task: Task, progress: Progress, send: Callable[[Report], str | None] | None) -> None:
        self.task, self.progress, self.send = task, progress, send
        self.decide_at = frozenset(task.decide_at)
        self.reported = task.reported  # the trial's epochs the search holds reports of

    def __call__(self, epoch: int, row: dict[str, float]) -> str | None:
        self.progress(epoch, row)
        if self.send is None:
            return None
        metrics = {k: float(v) for k, v in row.items() if k != "epoch"}
        decision = self.send(Report(self.task.trial, epoch, metrics, decide=epoch in self.decide_at))
        return self.STOPS.get(decision or "")


def run_task(runner: TrialRunner, task: Task, comm=None,
             send: Callable[[Report], str | None] | None = None) -> tuple[TrialResult, float, float]:
    """Run one task on this rank; what this rank made of it, and its start and end times. `send`
    takes the trial's epoch reports to the coordinator (the group's leader only)."""
    start = time.time()
    trial_dir = Path(task.trial_dir) if task.trial_dir else None
    o = runner.cfg.objective
    epochs = int(runner.cfg.trial_training(task.params)["epochs"])
    progress = Progress(task.trial, epochs, o.metric, o.direction, _env.get("MPIOPT_PROGRESS_S"))
    reporter = Reporter(task, progress, send)
    result = runner.run(task.params, comm, trial=task.trial, trial_dir=trial_dir, reporter=reporter)
    return result, start, time.time()


def serve(channel, runner_factory) -> int:
    """The loop of every rank of a group, until the coordinator says stop; trials run."""
    from .transport import GroupComm

    runner: TrialRunner | None = None
    done = 0
    sent: float | None = None  # when this group's previous result went out
    while True:
        task = channel.next_task()
        wait = time.perf_counter() - sent if sent is not None else None
        if task is None:
            return done
        if runner is None:
            runner = runner_factory()
        comm = GroupComm(channel.comm)
        try:
            send = channel.report if channel.rank == 0 else None
            mine, start, _ = run_task(runner, task, comm, send)
            if mine.status not in SUCCESSFUL and comm.failed_peer is None:
                comm.notify_failure()
        except BaseException:  # a full disk, Ctrl-C: the other ranks must stop waiting for this one to close
            if comm.failed_peer is None:
                comm.notify_failure()
            comm.close()
            raise
        # closing the trial's communicator waits for every rank's part, as the gather does
        with _note_a_straggler(channel, task, runner.cfg.trial_training(task.params).get("time_limit")):
            comm.close()
            every_rank = channel.gather_results(mine)
        if every_rank is not None:
            channel.send_result(merge(every_rank).reported(task.trial, start, time.time(), wait))
        sent = time.perf_counter()
        done += 1


@contextmanager
def _note_a_straggler(channel, task: Task, time_limit: float | None) -> Iterator[None]:
    """On the group's first rank, without a time limit: a warning once another rank's part of
    the trial has run MPIOPT_STRAGGLER_S past this rank's, since a rank that never returns would
    hold the group (and the search's end) without a word."""
    if channel.rank != 0 or channel.comm.Get_size() == 1 or time_limit:
        yield
        return
    late_s = _env.get("MPIOPT_STRAGGLER_S")
    note = threading.Timer(late_s, log.warning, args=(
        "trial %d: this rank's part ended %.0f s ago, and another rank of the group is still running its part; "
        "a rank that never returns holds the group (training.time_limit bounds a trial)", task.trial, late_s))
    note.daemon = True
    note.start()
    try:
        yield
    finally:
        note.cancel()

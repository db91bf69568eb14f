"""Running one trial's objective on the ranks of a group, and judging what it returned.

A `function` objective runs on the group's first rank, or on every rank with the group's
communicator when it takes `comm`. A `model` objective is trained by `mpiopt.learn`.
"""
from __future__ import annotations

import dataclasses
import gc
import math
import numbers
import re
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._errors import DataError, GroupPeerFailed, GroupPeerReturned, TrialFailed, TrialTimeout, storage_failure
from .config import Config, import_callable
from .journal import column_clash
from .pareto import MEASURED
from .trial import TrialResult, TrialStatus

_HEADLINE_CHARS = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Keras colours its messages
# TensorFlow wraps an op's message in a graph traceback: these lines never name the problem
_WRAPPING = re.compile(r'^(File "|Traceback|Detected at node|Graph execution error:?$|in user code:|\[\[|\[Op:)')


def headline(exc: BaseException) -> str:
    """The line of an exception's message that names the problem, at most _HEADLINE_CHARS long.

    Python's errors put it first. TensorFlow's op errors ("Graph execution error:") put it last,
    after the stack that led to the op, followed by the node's name; an error raised while
    tracing a tf.function starts "in user code:" and ends with "Type: message"; Keras sets its
    own message in bold.
    """
    text = str(exc)
    bold = re.search(r"\x1b\[1m(.*?)\x1b\[0m", text, re.S)
    if bold:
        text = bold.group(1)
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", _ANSI.sub("", text))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and lines[0] == "in user code:":
        for ln in reversed(lines):
            m = re.match(r"[A-Za-z_][\w.]*(?:Error|Exception): (.+)", ln)
            if m:
                lines = [m.group(1)]
                break
    meaningful = [ln for ln in lines if not _WRAPPING.match(ln)]
    if not meaningful:
        return ""
    from_tensorflow = ("OpError" in {c.__name__ for c in type(exc).__mro__}
                       or type(exc).__module__.startswith("tensorflow"))
    line = meaningful[-1] if from_tensorflow else meaningful[0]
    line = re.sub(r"\s*(\[\[\{\{node .*|\[Op:.*|Label values:.*)$", "", line)
    return line if len(line) <= _HEADLINE_CHARS else line[:_HEADLINE_CHARS - 3] + "..."


def error_text(exc: BaseException) -> str:
    """`Type: the line that names the problem`, as the `error` column keeps it."""
    return f"{type(exc).__name__}: {headline(exc)}"


def error_detail(exc: BaseException) -> str:
    """The exception's whole text and traceback, for the trial's error.txt."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def exited(exc: SystemExit) -> str:
    """The error text of a `sys.exit` in user code."""
    return f"SystemExit: the objective called sys.exit({'' if exc.code is None else repr(exc.code)})"


def _late(result: TrialResult, clock: _Clock) -> TrialResult:
    """A function's result, or a timeout where it ran past its time limit (having caught the
    `TrialTimeout` raised in it)."""
    if not clock.fired or result.status != TrialStatus.COMPLETED:
        return result
    return TrialResult(status=TrialStatus.TIMEOUT, epochs=result.epochs, metrics=result.metrics,
                       error=f"past training.time_limit ({clock.seconds:g} s): the objective caught the "
                             "TrialTimeout raised in it and returned late")


class UnknownParameter(KeyError):
    """A function objective read a parameter its search space does not define, or one whose
    condition leaves it out of this trial."""

    def __init__(self, key: str, space, params: dict[str, Any]) -> None:
        super().__init__(_unknown_parameter_line(key, space, params))

    def line(self) -> str:
        return str(self.args[0])

    __str__ = line


def _unknown_parameter_line(key: str, space, params: dict[str, Any]) -> str:
    if key in space.names:
        return (f"it reads params[{key!r}], which is inactive in this trial ({key} is searched only when "
                f"{space.condition_text(key)}; here {_parents_text(space, key, params)}): read it under its "
                f"condition, or as params.get({key!r}, DEFAULT)")
    return (f"it reads params[{key!r}], which the search space does not define (its parameters: "
            f"{', '.join(space.names)})")


def _parents_text(space, name: str, params: dict) -> str:
    """The trial's values of the parents of `name`'s condition, e.g. 'optimizer is adam'."""
    return ", ".join(f"{parent} is {params[parent]!r}" if parent in params else f"{parent} is inactive"
                     for parent, _ in space[name].when)


def _diverged(context: TrialContext, rank: int) -> TrialResult:
    """A function trial whose reports went NaN or infinite: diverged on the rank that reported
    it (its error heads the group's); another rank's result is an echo the group's merge passes
    over, or nothing at all (only rank 0's counts)."""
    if context.diverged_on == rank:
        return TrialResult(status=TrialStatus.DIVERGED, epochs=context.steps, metrics=context.last,
                           error=context.diverged)
    if rank != 0:
        return TrialResult()
    return TrialResult(status=TrialStatus.DIVERGED, epochs=context.steps, metrics=context.last,
                       error=f"{GroupPeerFailed.__name__}: rank {context.diverged_on} of the group diverged")


class ReportMisuse(ValueError):
    """A function objective called `trial.report` against its contract."""

    def line(self) -> str:
        return str(self.args[0])


class Params(dict):
    """A trial's parameters as a function objective gets them: a read of one the space lacks, or
    of one inactive in the trial, stops the search at that trial instead of failing every trial
    the same way."""

    def __init__(self, params: dict[str, Any], space) -> None:
        super().__init__(params)
        self.space = space

    def __missing__(self, key):
        raise UnknownParameter(key, self.space, dict(self))


def judge(value: Any, direction: str, metric: str, goals: tuple[tuple[str, str], ...] = ()) -> TrialResult:
    """Turn what a function returned into an outcome: completed, diverged or failed. In a Pareto
    search (`goals`) it must return every goal but those mpiopt measures."""
    needed = [metric] + [g for g, _ in goals if g != metric and g not in MEASURED]
    left_out: tuple[str, ...] = ()
    number = _number(value)
    if number is not None and len(needed) == 1:
        metrics = {metric: number}
    elif isinstance(value, dict):
        read = {str(k): _number(v) for k, v in value.items()}
        metrics = {k: v for k, v in read.items() if v is not None}
        problem = _missing_goal(value, metrics, needed) or _clash(metrics)
        if problem:
            return TrialResult(status=TrialStatus.FAILED, metrics=metrics, misuse=True, error=problem)
        left_out = tuple(k for k, v in read.items() if v is None)
    else:
        expected = f"a dict of its goals ({', '.join(needed)})" if len(needed) > 1 else "a float or a dict of metrics"
        return TrialResult(status=TrialStatus.FAILED, misuse=True,
                           error=f"the objective returned {type(value).__name__} {value!r:.60}, expected {expected}")
    bad = next((g for g in needed if not math.isfinite(metrics[g])), None)
    if bad is not None:
        return TrialResult(status=TrialStatus.DIVERGED, metrics=metrics, error=f"{bad} is {metrics[bad]}")
    return TrialResult(objective=metrics[metric], metrics=metrics, not_numbers=left_out)


def _number(value: Any) -> float | None:
    """`value` as a float where it is one number: a Python or numpy number, or a 0-d array or
    tensor of numbers (`loss.numpy()` left out, a `np.mean` kept as an array); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (str, bytes, dict, list, tuple)) or value is None:
        return None
    import numpy as np

    try:
        a = np.asarray(value)
    except Exception:  # an object numpy cannot read is no number
        return None
    return float(a) if a.ndim == 0 and a.dtype.kind in "iuf" else None


def _missing_goal(value: dict, metrics: dict[str, float], needed: list[str]) -> str | None:
    for name in needed:
        if name not in value:
            return f"the objective returned a dict without {name!r} (it has: {', '.join(map(str, value))})"
        if name not in metrics:
            return f"the objective returned {name}={value[name]!r}, expected a number"
    return None


def _clash(metrics) -> str | None:
    name = column_clash(metrics)
    return None if name is None else \
        f"the objective returned a metric named {name!r}, a column of the results table: name it otherwise"


def judge_history(history: list[dict[str, float]], direction: str, metric: str, stopped: str | None) -> TrialResult:
    """The figure of merit of a training run: the best epoch's value of the chosen metric.

    The metrics reported are those of that epoch (the weights kept are the best ones too).
    """
    epochs = len(history)
    if stopped == "diverged":
        last = history[-1] if history else {}
        return TrialResult(status=TrialStatus.DIVERGED, epochs=epochs,
                           metrics={k: v for k, v in last.items() if k != "epoch"},
                           error="training diverged: a NaN or infinite loss, metric or weight (a NaN in the "
                                 "data?)")
    if not history and stopped == "timeout":
        return TrialResult(status=TrialStatus.TIMEOUT, epochs=0,
                           error="stopped by training.time_limit before its first epoch finished")
    if not history:
        return TrialResult(status=TrialStatus.FAILED, epochs=0, error="no epoch finished")
    if metric not in history[0]:
        have = ", ".join(k for k in history[0] if k != "epoch")
        return TrialResult(status=TrialStatus.FAILED, epochs=epochs,
                           error=f"the figure of merit {metric!r} is not among the metrics training reports ({have})")
    pick = min if direction == "minimize" else max
    best = pick(history, key=lambda row: row[metric])
    metrics = {k: v for k, v in best.items() if k != "epoch"}
    if stopped in ("paused", "pruned"):  # the scheduler's word: judged on the epochs so far
        return TrialResult(status=TrialStatus.PAUSED if stopped == "paused" else TrialStatus.PRUNED,
                           epochs=epochs, metrics=metrics)
    if stopped == "timeout":
        return TrialResult(status=TrialStatus.TIMEOUT, epochs=epochs, metrics=metrics,
                           error=f"stopped by training.time_limit after {epochs} epochs")
    return TrialResult(objective=best[metric], metrics=metrics, epochs=epochs)


class _Clock:
    """Whether a trial's time limit has passed (`time_limit` yields it)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.fired = False


@contextmanager
def time_limit(seconds: float | None):
    """Raise `TrialTimeout` in this (main) thread after `seconds`, even inside a stuck Python loop,
    and again every second after: an objective that catches every exception and goes on meets it
    at its next unguarded line, and what it returns late is a timeout all the same (`fired`)."""
    clock = _Clock(seconds)
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield clock
        return

    def _alarm(signum, frame):
        clock.fired = True
        raise TrialTimeout(f"past training.time_limit ({seconds:g} s)")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, float(seconds), 1.0)
    try:
        yield clock
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class TrialContext:
    """The `trial` a function objective may take: it reports its steps (epochs) and learns whether
    the scheduler stops it.

    With `comm` (the function runs on every rank of its group), rank 0's reports reach the
    scheduler (every rank may report: the others' are checked, not sent), and every rank calls
    `should_stop` at the same points: it is collective, so that the scheduler's word, which only
    rank 0 hears, and a value that is not finite on any rank stop them all together.
    """

    def __init__(self, number: int, reporter, comm=None, metric: str | None = None, top: int | None = None) -> None:
        self.number = number
        self._reporter = reporter
        self._top = top  # a scheduler's top rung (training.epochs); None without one
        self.stopped_at: int | None = None  # the step at which the scheduler stopped it (rank 0 hears it)
        self.after_stop: int | None = None  # the last step reported after that (not sent)
        self.past_top: int | None = None  # the last step reported past the top rung
        self._comm = comm
        self._rank = comm.Get_rank() if comm is not None else 0
        self._metric = metric  # the figure of merit, which every report must hold (None: a Pareto search's)
        self._stopped = False
        self._top_reached = False  # with `comm`: a rank of the group reported the top rung
        self.steps = 0  # the last step reported
        self.last: dict[str, float] = {}
        # the metrics of the last step the scheduler heard: a stopped trial's, whatever it reported on
        self.judged: dict[str, float] = {}
        self.misuse: str | None = None  # the first report against the contract (raised, and kept:
        # a function that catches every exception still stops the search)
        self.diverged: str | None = None  # the first metric reported not finite
        self.diverged_on: int | None = None  # the group rank that reported it

    def report(self, step: int | None = None, **metrics: float) -> None:
        """The metrics after `step` (1, 2, ...), with the figure of merit among them. A metric
        that is not finite (NaN, inf) ends the trial as diverged: `should_stop()` says so. (The
        step is required: its default only lets a call without one be told as a misuse.)"""
        self._check(step, metrics)
        self.steps, self.last = int(step), {k: _number(v) for k, v in metrics.items()}
        bad = next((k for k, v in self.last.items() if not math.isfinite(v)), None)
        if bad is not None and self.diverged is None:
            self.diverged, self.diverged_on = f"{bad} is {self.last[bad]} at step {step}", self._rank
        if self._reporter is None or self._rank != 0:
            return
        if self.stopped_at is not None:  # the scheduler's word is given: later steps are not judged
            self.after_stop = int(step)
            return
        if self._top is not None and step > self._top:
            self.past_top = int(step)
        self.judged = self.last
        if self._reporter(int(step), {"epoch": int(step), **self.last}) is not None:
            self._stopped, self.stopped_at = True, int(step)

    def should_stop(self) -> bool:
        """Whether to return now: the scheduler stopped this trial (what is returned is then
        ignored), it diverged, or it reached the scheduler's top rung, training.epochs (it is
        complete: what it returns is its result). With `comm`, every rank of the group calls it
        at the same points."""
        if self._comm is not None:
            stopped, diverged, top = zip(*self._comm.allgather((self._stopped, self.diverged, self.at_top)),
                                         strict=True)
            self._stopped = any(stopped)
            if self.diverged is None:
                self.diverged_on = next((r for r, d in enumerate(diverged) if d is not None), None)
                self.diverged = diverged[self.diverged_on] if self.diverged_on is not None else None
            self._top_reached = any(top)
        return self.stopped or self.at_top

    @property
    def at_top(self) -> bool:
        """Whether it reported the scheduler's top rung (a rank of its group did, with `comm`)."""
        return self._top_reached or (self._top is not None and self.steps >= self._top)

    @property
    def stopped(self) -> bool:
        """What `should_stop` last said, or would say alone: no collective."""
        return self._stopped or self.diverged is not None

    def _check(self, step: Any, metrics: dict[str, Any]) -> None:
        problem = self._problem(step, metrics)
        if problem is not None:
            call = "trial.report(...)" if step is None else f"trial.report({step!r}, ...)"
            self.misuse = self.misuse or f"{call}: {problem}"
            raise ReportMisuse(self.misuse)

    def _problem(self, step: Any, metrics: dict[str, Any]) -> str | None:
        if step is None:
            return "it gives no step: trial.report(step, name=value, ...), the step a whole number from 1 up"
        if not isinstance(step, numbers.Integral) or isinstance(step, bool) or step < 1:
            return "the step must be a whole number, from 1 up"
        if step <= self.steps:
            return f"step {step} comes after step {self.steps}: each step must be later than the last"
        for k, v in metrics.items():
            if _number(v) is None:
                return f"{k}={v!r:.40} is not a number"
        if self._metric is not None and self._metric not in metrics:
            return (f"it reports no {self._metric!r}, the figure of merit "
                    f"(it reports: {', '.join(metrics) or 'nothing'})")
        clash = column_clash(metrics)
        return None if clash is None else f"{clash!r} names a column of the results table: name it otherwise"


def data_loader(cfg: Config):
    """A model objective's `load_data`, imported; None where its data are HDF5 files."""
    o = cfg.objective
    return (import_callable(o.data, cfg.base_dir, source=str(cfg.path), field="objective.data")
            if isinstance(o.data, str) else None)


class TrialRunner:
    """Runs trials of one configuration on one rank; user callables are imported once.

    `cross_validate` False trains a model objective with `folds` once, on all its training data
    (`mpiopt train`)."""

    def __init__(self, cfg: Config, *, resume_checkpoints: bool = True, cross_validate: bool = True) -> None:
        self.cfg = cfg
        self.resume_checkpoints = resume_checkpoints  # a re-run trial continues from its checkpoint
        self.cross_validate = cross_validate
        self.last_training = None
        self.heap_frozen = False
        o = cfg.objective
        src = str(cfg.path)
        if o.kind == "function":
            self.fn = import_callable(o.function, cfg.base_dir, source=src, field="objective.function")
        else:
            self.build = import_callable(o.model, cfg.base_dir, source=src, field="objective.model")
            self.loader = data_loader(cfg)

    def run(self, params: dict[str, Any], comm, *, trial: int = 0, trial_dir: Path | None = None,
            reporter=None) -> TrialResult:
        """Run one trial on this rank of the group `comm` (None: alone). Exceptions become outcomes.
        `reporter` (a `group.Reporter`) takes each epoch's metrics and may stop the trial."""
        began = time.perf_counter()
        o = self.cfg.objective
        training = self.cfg.trial_training(params)
        try:
            with time_limit(training.get("time_limit") if o.kind == "function" else None) as clock:
                if o.kind == "function":
                    return _late(self._call(params, comm, trial, reporter), clock)
                return self._train(params, training, comm, trial, trial_dir, reporter, began)
        except TrialTimeout as exc:
            return TrialResult(status=TrialStatus.TIMEOUT, error=str(exc))
        except DataError as exc:
            return TrialResult(status=TrialStatus.FAILED, error=exc.line(), detail=error_detail(exc), misuse=True,
                               misuse_field="objective.data")
        except (UnknownParameter, ReportMisuse, GroupPeerReturned) as exc:
            return TrialResult(status=TrialStatus.FAILED, error=exc.line(), detail=error_detail(exc), misuse=True)
        except Exception as exc:  # user code: any exception fails the trial, never the search
            if storage_failure(exc, trial_dir):  # but a full disk is no trial's fault: --resume reruns it
                raise
            return TrialResult(status=TrialStatus.FAILED, error=error_text(exc), detail=error_detail(exc))
        except SystemExit as exc:  # sys.exit() in user code ends its trial, not the rank (and the search)
            return TrialResult(status=TrialStatus.FAILED, error=exited(exc), detail=error_detail(exc))

    def _call(self, params, comm, trial: int, reporter) -> TrialResult:
        """A function objective's trial on this rank (only rank 0's result counts)."""
        if comm is None and self.cfg.objective.takes_comm:
            from .transport import one_rank_group

            own = one_rank_group()
            try:
                return self._call(params, own, trial, reporter)
            finally:
                own.close()
        o = self.cfg.objective
        rank = comm.Get_rank() if comm is not None else 0
        if not o.takes_comm and rank != 0:
            return TrialResult()
        kwargs = {}
        context = None
        if o.takes_trial:
            top = int(self.cfg.training["epochs"]) if self.cfg.search.scheduler != "none" else None
            context = kwargs["trial"] = TrialContext(trial, reporter, comm if o.takes_comm else None,
                                                     None if o.pareto else o.metric, top)
        try:
            given = Params(params, self.cfg.space)
            value = self.fn(given, comm, **kwargs) if o.takes_comm else self.fn(given, **kwargs)
        except TrialTimeout as exc:
            if context is None or not context.steps:
                raise
            # cut off by training.time_limit after reporting: the steps and metrics it got to
            return TrialResult(status=TrialStatus.TIMEOUT, epochs=context.steps, metrics=context.last,
                               error=f"{exc} after step {context.steps}")
        if o.takes_comm and comm.Get_size() > 1:  # a peer still waiting for this rank in a collective gives up
            comm.notify_return()
        if context is not None and context.misuse:
            raise ReportMisuse(context.misuse)
        if context is not None and context.diverged:
            return _diverged(context, rank)
        if rank != 0:  # the steps it reported, which the group checks against rank 0's
            return TrialResult(epochs=(context.steps or None) if context is not None else None)
        if context is not None and context.stopped:  # judged at the step the scheduler stopped it, whatever ran on
            return TrialResult(status=TrialStatus.PRUNED, epochs=context.stopped_at or context.steps,
                               metrics=context.judged, reported_after_stop=context.after_stop,
                               reported_past_top=context.past_top)
        result = judge(value, o.direction, o.metric, o.pareto)
        if context is None:
            return result
        # a metric it reported but did not return keeps its last reported value, as a stopped trial's do
        return dataclasses.replace(result, epochs=context.steps or result.epochs,
                                   metrics={**context.last, **result.metrics}, reported_past_top=context.past_top)

    def _train(self, params, training, comm, trial, trial_dir, reporter, began: float) -> TrialResult:
        source = self.source()
        if self.cfg.objective.folds and self.cross_validate:
            from .crossval import cross_validate

            return cross_validate(self, source, params, training, comm, trial, trial_dir, reporter)
        decide_at = reporter.decide_at if reporter is not None else frozenset()
        reported = reporter.reported if reporter is not None else None
        return self.fit(source, params, training, comm, trial, trial_dir, reporter, decide_at, began, reported)

    def source(self):
        """The objective's data (`learn.DataSource`), loaded once per process."""
        from . import learn

        import_keras_quietly()  # first here, before the user's loader imports it
        source = learn.load_source(self.cfg.objective.data, self.cfg.base_dir, self.loader)
        if not self.heap_frozen:
            # each trial's build clears Keras' session, which collects garbage in full: what is
            # loaded by now (TensorFlow's modules, the data) stays out of those collections
            gc.collect()
            gc.freeze()
            self.heap_frozen = True
        return source

    def fit(self, source, params, training, comm, trial: int, out_dir: Path | None, on_epoch=None,
            decide_at: frozenset[int] = frozenset(), began: float | None = None,
            reported: int | None = None) -> TrialResult:
        """Train the model on `source` with the group `comm`; judged on group rank 0 (an empty
        result elsewhere). `self.last_training` keeps rank 0's `learn.TrainOutcome`. `began`
        (perf_counter): when the trial's stretch began, its data loading included (default: now);
        `reported`: the epochs the search holds reports of (None: a checkpoint reports none again)."""
        from . import learn

        o = self.cfg.objective
        self.last_training = None
        job = learn.Job(build=self.build, model_kwargs=self.cfg.model_kwargs(params), source=source,
                        training=training, loss=o.loss, metrics=o.metrics,
                        seed=self.cfg.search.seed * 100003 + trial, out_dir=out_dir, on_epoch=on_epoch,
                        decide_at=decide_at, reported=reported, resume=self.resume_checkpoints,
                        hparams=dict(params), merit=(o.metric, o.direction),
                        name=f"trial {trial}", began=began if began is not None else time.perf_counter())
        outcome = learn.train(comm, job)
        if outcome is None:
            return TrialResult()
        self.last_training = outcome
        judged = judge_history(outcome.history, o.direction, o.metric, outcome.stopped)
        # the parameter count is a metric of every model trial (a Pareto search may minimise it)
        return dataclasses.replace(judged, resumed_s=outcome.resumed_s,
                                   metrics={**judged.metrics, "params": float(outcome.params)})


def import_keras_quietly() -> None:
    """Import Keras and let TensorFlow probe for GPUs inside `quiet_tensorflow`: both write start-up
    lines straight to stderr (on a CPU node, a failed cuInit at the probe) that no log level hides."""
    from ._log import quiet_tensorflow

    with quiet_tensorflow():
        import keras  # noqa: F401
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")


def preflight(cfg: Config, params: dict[str, Any] | None = None, sets: tuple[str, ...] = ()) -> None:
    """Check before a search (or `mpiopt train`) that a `model` objective builds, fits its data and trains.

    The model is built the way a trial builds it, with `params` (default: the middle of every
    parameter's range);
    where the loss is one sparse or one-hot categorical crossentropy on one output, the labels'
    range over the whole data is compared with the model's output; then the model takes one
    real training step on a batch of up to `training.batch_size` samples and validates one
    batch, and the figure of merit must be among the metrics it reports. The model is thrown
    away afterwards. Any failure -- data that cannot be read, a `build_model` that raises,
    labels the model cannot take -- is one `ConfigError` line (exit 2) instead of a search whose
    every trial fails. `sets`: the names `mpiopt train --set` gave, refused as the file's are.
    """
    from ._errors import ConfigError

    o = cfg.objective
    if o.kind != "model":
        return
    from . import learn

    src = cfg.source or str(cfg.path)
    files = isinstance(o.data, dict)
    import_keras_quietly()  # first here, before the user's loader or the reading of HDF5 files imports it
    runner = TrialRunner(cfg)
    params = cfg.space.middle() if params is None else params
    training = cfg.trial_training(params)
    batch_size = max(1, int(training["batch_size"]))
    try:
        source = learn.load_source(o.data, cfg.base_dir, runner.loader)
        batch, val = _first_batches(source, batch_size)
    except TrialFailed as exc:  # a message that names its own field (objective.data.train: ...) keeps it
        line = str(exc).splitlines()[0]
        field = None if line.startswith("objective.data") else "objective.data"
        raise ConfigError(line, source=src, field=field) from None
    except (Exception, SystemExit) as exc:
        what = "reading the HDF5 files" if files else "load_data"
        raise ConfigError(f"{what} failed: {type(exc).__name__}: {headline(exc)}",
                          source=src, field="objective.data") from None
    import keras

    _preflight_folds(cfg, source, src)
    _refuse_validating_on_training_files(cfg, source, src)
    try:
        _preflight_model(cfg, runner, source, batch, val, params, training, sets)
        _preflight_mixed_precision(cfg, runner, batch, params, training)
    except _PreflightError as exc:  # a --set is not the file's: named as parse_sets names it
        raise ConfigError(exc.message, source=None if exc.field.startswith("--set") else src,
                          field=exc.field) from None
    finally:
        keras.backend.clear_session()


def _refuse_validating_on_training_files(cfg: Config, source, src: str) -> None:
    """A validation file among the training files (`train: data/*.h5` beside `val: data/val.h5`)
    would judge every trial on data it trained on (k-fold trials validate on their own folds)."""
    from ._errors import ConfigError

    if cfg.objective.folds or not source.val_files:
        return
    shared = {f.resolve() for f in source.train_files} & {f.resolve() for f in source.val_files}
    if shared:
        raise ConfigError(f"{cfg.objective.data['train']!r} also names {min(shared)}, a file of data.val: the trials "
                          "would be judged on data they trained on", source=src, field="objective.data.train")


def _preflight_folds(cfg: Config, source, src: str) -> None:
    """Every fold needs a sample to validate on."""
    from ._errors import ConfigError

    folds, n = cfg.objective.folds, source.n_train()
    if folds and n < folds:
        raise ConfigError(f"{folds} folds, but the training data have {n} sample{'s' if n != 1 else ''}: "
                          "every fold needs at least one", source=src, field="objective.folds")


class _PreflightError(Exception):
    def __init__(self, message: str, field: str = "objective") -> None:
        super().__init__(message)
        self.message, self.field = message, field


class _BuildFailed(Exception):
    """`build_model` itself raised (told apart from what mpiopt does with the model it returns)."""


def _check_loss_name(o) -> None:
    """objective.loss names a loss Keras knows: a misspelt one is Keras' error at compile time,
    which reads as a model that does not fit its data. (Metrics are left to compile, which also
    takes names of its own such as `acc`.)"""
    import keras

    from .config import did_you_mean

    if o.loss is None:
        return
    try:
        keras.losses.get(o.loss)
    except (ValueError, TypeError):
        known = [n for n in dir(keras.losses) if not n.startswith("_") and n.islower()]
        raise _PreflightError(f"Keras knows no loss {o.loss!r}{did_you_mean(o.loss, known)}",
                              "objective.loss") from None


# names Keras' compile resolves by the labels (any case), which keras.metrics.get does not all know
_COMPILE_METRIC_ALIASES = ("accuracy", "acc")


def _check_metric_identifiers(o) -> None:
    """objective.metrics names metrics Keras knows: a misspelt one is Keras' error on the first
    training step ('Could not interpret metric identifier'), which reads as a model that does not
    fit its data. (A dict of lists, for several outputs, is left to compile.)"""
    import keras

    from .config import did_you_mean

    for name in o.metrics if isinstance(o.metrics, (list, tuple)) else ():
        if not isinstance(name, str) or name.lower() in _COMPILE_METRIC_ALIASES:
            continue
        try:
            keras.metrics.get(name)
        except (ValueError, TypeError):
            known = [*_COMPILE_METRIC_ALIASES,
                     *(n for n in dir(keras.metrics) if not n.startswith("_") and n.islower())]
            raise _PreflightError(f"Keras knows no metric {name!r}{did_you_mean(name, known)}",
                                  "objective.metrics") from None


def _refuse_objective_keys_a_compiled_model_ignores(cfg: Config) -> None:
    """A model build_model compiled trains with its own loss and reports its own metrics:
    objective.loss or objective.metrics in the file would silently change nothing."""
    raw = cfg.raw.get("objective") if isinstance(cfg.raw.get("objective"), dict) else {}
    for key in ("loss", "metrics"):
        if key in raw:
            raise _PreflightError(f"{cfg.objective.model} compiles the model itself, so objective.{key} is not used: "
                                  "remove it from the file (or return the model uncompiled for it to apply)",
                                  f"objective.{key}")


def _refuse_optimizer_keys_a_compiled_model_ignores(cfg: Config, kwargs: dict, optimizer: str,
                                                    sets: tuple[str, ...] = ()) -> None:
    """A model build_model compiled with its own optimizer trains with it: a searched `optimizer`
    or `learning_rate` that build_model does not take (to compile with), or one given in the
    file's training section or by `mpiopt train --set`, would silently change nothing."""
    raw = cfg.raw.get("training") if isinstance(cfg.raw.get("training"), dict) else {}
    uncompiled = "or return the model uncompiled (objective.loss set)"
    searched = [(f"parameters.{k}", f"the searched {k}",
                 f"take {k} as an argument of build_model and compile with it, {uncompiled}")
                for k in ("learning_rate", "optimizer", "momentum") if k in cfg.space.names and k not in kwargs]
    leave_out = f"leave it out (the model's own optimizer trains), {uncompiled} for it to apply"
    given = [(f"training.{k}", f"training.{k}", leave_out) for k in ("learning_rate", "optimizer", "momentum")
             if k in raw]
    given += [(f"--set {k}", f"--set {k}", leave_out) for k in ("learning_rate", "optimizer", "momentum")
              if k in sets and k not in cfg.space.names]
    if searched or given:
        where, what, fix = (searched + given)[0]
        raise _PreflightError(f"{cfg.objective.model} compiles the model with its own optimizer ({optimizer}), which "
                              f"its trials train with, so {what} would change nothing: {fix}", where)


def _preflight_model(cfg: Config, runner: TrialRunner, source, batch, val, params, training,
                     sets: tuple[str, ...] = ()) -> None:
    """Build, compile and train the model for one step, as a trial does; `_PreflightError` if it fails."""
    o = cfg.objective
    kwargs = cfg.model_kwargs(params)
    _check_loss_name(o)
    _check_metric_identifiers(o)
    model, flat, spec, own_optimizer = _build_as_a_trial(cfg, runner, source, kwargs, training)
    if own_optimizer:
        _refuse_objective_keys_a_compiled_model_ignores(cfg)
        _refuse_optimizer_keys_a_compiled_model_ignores(cfg, kwargs, spec["name"], sets)
    reported = _train_one_step(o, model, flat, spec, source, batch, val, training)
    _check_metrics_reported(o, training, reported, val)


def _build_as_a_trial(cfg: Config, runner: TrialRunner, source, kwargs: dict, training: dict):
    """The training code's own set-up (build, compile, the optimizer's spec): (model, flat model,
    spec, whether build_model compiled the model with its own optimizer)."""
    from .learn._engine import Job, _build, compiled_with_an_optimizer

    o = cfg.objective
    call = f"{o.model.rsplit(':', 1)[-1]}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    own_optimizer = []

    def build(**kw):
        try:
            model = runner.build(**kw)
        except (Exception, SystemExit) as exc:
            raise _BuildFailed(exc) from exc
        own_optimizer.append(compiled_with_an_optimizer(model))
        return model

    job = Job(build=build, model_kwargs=kwargs, source=source, training=training, loss=o.loss,
              metrics=o.metrics, seed=cfg.search.seed * 100003)
    try:
        model, flat, spec = _build(job)
    except _BuildFailed as exc:
        cause = exc.args[0]
        raise _PreflightError(f"{call} failed: {type(cause).__name__}: {headline(cause)}", "objective.model") from None
    except TrialFailed as exc:
        raise _PreflightError(f"{call}: {headline(exc)}", "objective.model") from None
    except Exception as exc:
        raise _PreflightError(f"compiling the model from {call} failed: {type(exc).__name__}: {headline(exc)}",
                              "objective.model") from None
    return model, flat, spec, bool(own_optimizer and own_optimizer[-1])


def _train_one_step(o, model, flat, spec, source, batch, val, training) -> set[str]:
    """A forward pass, the labels' check, one optimizer step and a validation, as a trial makes
    them: the metric names the model reports (`val_` ones included)."""
    from .learn._data import n_samples
    from .learn._engine import _evaluate
    from .learn.optimizers import make_master_optimizer

    def misfit(stage: str, exc: Exception) -> _PreflightError:
        return _PreflightError(f"the model from {o.model} does not fit the data ({stage}): "
                               f"{type(exc).__name__}: {headline(exc)}")

    x, y = batch
    nb = n_samples(x)
    # the samples checked are the first file's (HDF5): a message names it
    of_train = f" of {source.train_files[0]}" if source.train_files else ""
    of_val = f" of {source.val_files[0]}" if source.val_files else ""
    try:
        y_pred = model(x, training=False)
    except Exception as exc:
        raise misfit(f"a forward pass on {nb} training samples{of_train}", exc) from None
    try:
        _check_labels(getattr(model, "loss", None), y_pred, source, y)
    except _PreflightError:
        raise
    except Exception:  # labels this check cannot read: the training step below judges them
        pass
    try:
        opt = make_master_optimizer(spec, flat.size)
    except Exception as exc:
        raise _PreflightError(f"the optimizer {spec.get('name')!r} cannot be used: {headline(exc)}") from None
    try:
        _, grad = flat.grad_step(x, y)
        weights = flat.get()
        opt.step(weights, grad)
        flat.set(weights)
        reported = set(flat.metrics())
    except Exception as exc:
        raise misfit(f"a training step on {nb} samples{of_train}", exc) from None
    try:
        return reported | {f"val_{k}" for k in _evaluate(flat, val[0], val[1], int(training["batch_size"]))}
    except Exception as exc:
        raise misfit(f"validating {n_samples(val[0])} samples{of_val}", exc) from None


def _check_metrics_reported(o, training: dict, reported: set[str], val) -> None:
    """Every metric the search or the training reads (the figure of merit, early stopping's and
    the target's monitors) is one the model reports."""
    from .config import did_you_mean, metric_names_read
    from .learn._data import n_samples

    no_validation = n_samples(val[0]) == 0
    for name, field in metric_names_read(o, training):
        if name in reported:
            continue
        if no_validation and name.startswith("val_"):
            raise _PreflightError(f"{name!r} is measured on the validation data, and they are empty (0 samples)", field)
        raise _PreflightError(f"{name!r} is not a metric this model reports (it has: "
                              f"{', '.join(sorted(reported))}){did_you_mean(name, reported)}", field)


def _preflight_mixed_precision(cfg: Config, runner: TrialRunner, batch, params, training) -> None:
    """Where a trial may train with `training.mixed_precision` (set, or a searched choice), the
    model built under Keras' `mixed_float16` policy must compute something in float16: one whose
    layers all fix their own dtype would only pay for the loss scaling."""
    searched = next((p for p in cfg.space.params if p.name == "mixed_precision"), None)
    if not (training.get("mixed_precision") or any(c is True for c in getattr(searched, "choices", ()))):
        return
    import keras

    from .learn._engine import set_precision
    from .learn._flat import compute_dtypes, computes_in_float16

    keras.backend.clear_session()
    set_precision({"mixed_precision": True})
    try:
        model = runner.build(**cfg.model_kwargs(params))
        if not model.weights:  # a model without an input shape makes its weights on its first call
            model(batch[0], training=False)
    except Exception:  # what fails here failed in _preflight_model too, which reported it
        return
    if isinstance(model, keras.Model) and model.weights and not computes_in_float16(model):
        raise _PreflightError(f"the model from {cfg.objective.model} computes nothing in float16 under Keras' "
                              f"mixed_float16 policy (its layers with weights fix their own dtype: "
                              f"{', '.join(compute_dtypes(model))}); set mixed_precision false, or leave the "
                              f"layers' dtype to the policy", "training.mixed_precision")


# -- the preflight's data: a first batch, every HDF5 file's shapes, the labels' range -----------
def _first_batches(source, n: int) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """Up to `n` training and `n` validation samples; HDF5 files are checked, not read whole.
    The validation data must hold the same inputs and labels, of the same shape per sample, as
    the training data: a mismatch would only show as the model failing to validate."""
    from .learn._data import n_samples, take

    if source.train is not None:
        (x, y), (xv, yv) = source.train, source.validation()
        _same_layout(_layout(xv, yv), "the validation data", _layout(x, y), "the training data", _TRAIN_AND_VALIDATE)
        batch = take(x, slice(0, n)), take(y, slice(0, n))
        val = take(xv, slice(0, n)), take(yv, slice(0, n))
    else:
        first: dict = {}
        batch = _h5_scan(source.train_files, source.features, source.labels, n, first)
        val = _h5_scan(source.val_files, source.features, source.labels, n, first, whole=True)
    if n_samples(batch[0]) == 0:
        raise TrialFailed("the training data are empty")
    return batch, val


_TRAIN_AND_VALIDATE = "a model cannot train on one and validate on the other"


def _layout(x, y) -> dict[str, tuple]:
    """Every array of the features `x` and labels `y` (e.g. "features['a']") with its shape per sample."""
    import numpy as np

    from .learn._data import leaves

    return {what + where: tuple(np.shape(leaf)[1:]) for what, struct in (("features", x), ("labels", y))
            for where, leaf in leaves(struct)}


def _same_layout(layout: dict, name: str, layout0: dict, name0: str, why: str) -> None:
    """TrialFailed naming `name` where its arrays or their shapes per sample differ from `name0`'s."""
    if layout.keys() != layout0.keys():
        raise TrialFailed(f"{name}: the arrays are {', '.join(layout)}, but in {name0} {', '.join(layout0)}: {why}")
    for key, shape in layout.items():
        if shape != layout0[key]:
            raise TrialFailed(f"{name}: {key} have shape {shape} per sample but those of {name0} have "
                              f"{layout0[key]}: {why}")


def _h5_scan(files: list[Path], features, labels, n: int, first: dict, whole: bool = False) -> tuple[Any, Any]:
    """Check every file's sample counts, value types and per-sample shapes (metadata only) against
    the first file scanned (`first` keeps it across calls), and with `whole` every value for NaN
    or inf (the validation files, which each trial reads whole anyway); read the first `n` samples."""
    import h5py

    from .learn._data import concat, h5_datasets, paired_datasets, refuse_non_numbers, refuse_not_finite, take

    parts = []
    need = n
    for f in files:
        try:
            with h5py.File(f, "r") as h:
                x, y, nx = paired_datasets(h, features, labels, f)
                for struct, what in ((x, "features"), (y, "labels")):
                    refuse_non_numbers(struct, f"{f}: {what}")
                    if whole:
                        refuse_not_finite(struct, f"{f}: {what}")
                f0, layout0 = first.setdefault("file", (f, _layout(x, y)))
                why = "the files cannot be read as one data set" if f0 in files else _TRAIN_AND_VALIDATE
                _same_layout(_layout(x, y), str(f), layout0, str(f0), why)
                if need > 0 and nx > 0:
                    parts.append((take(x, slice(0, need)), take(y, slice(0, need))))
                    need -= min(need, nx)
        except OSError as exc:
            raise TrialFailed(f"{f}: cannot read as HDF5: {exc}") from None
    if not parts:
        with h5py.File(files[0], "r") as h:
            x, y = h5_datasets(h, features, files[0]), h5_datasets(h, labels, files[0])
            return take(x, slice(0, 0)), take(y, slice(0, 0))
    return concat([p[0] for p in parts]), concat([p[1] for p in parts])


def _loss_kind(loss) -> tuple[str | None, str, Any]:
    """('sparse' | 'categorical' | None, the loss's name, its ignore_class) of one crossentropy loss.

    Only Keras's own losses are recognised (a name, the function, or the class itself): a loss of
    the user's own may take any labels, so it gets only the real training step.
    """
    import keras

    if isinstance(loss, (list, tuple)) and len(loss) == 1:
        loss = loss[0]
    elif isinstance(loss, dict) and len(loss) == 1:
        loss = next(iter(loss.values()))
    config: dict[str, Any] = {}
    if isinstance(loss, str):
        names = [loss]
    elif isinstance(loss, keras.losses.Loss):
        names = [type(loss).__name__]
        if type(loss).__name__ == "LossFunctionWrapper":  # a Keras function wrapped as a loss (not exported)
            names.append(getattr(getattr(loss, "fn", None), "__name__", ""))
        try:
            config = dict(loss.get_config() or {})
        except Exception:
            config = {}
    elif callable(loss):
        names = [getattr(loss, "__name__", "")]
    else:
        return None, "", None
    kinds = {"sparsecategoricalcrossentropy": "sparse", "categoricalcrossentropy": "categorical",
             "categoricalfocalcrossentropy": "categorical"}
    for name in names:
        kind = kinds.get(re.sub(r"[^a-z]", "", name.lower()))
        if kind and config.get("axis", -1) in (-1, None):
            return kind, re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower(), config.get("ignore_class")
    return None, "", None


def _single(struct):
    if isinstance(struct, (list, tuple)) and len(struct) == 1:
        return struct[0]
    if isinstance(struct, dict) and len(struct) == 1:
        return next(iter(struct.values()))
    return struct


def _check_labels(loss, y_pred, source, y_batch) -> None:
    """Labels against the model's output where that is unambiguous: one output, one crossentropy loss."""
    kind, name, ignore = _loss_kind(loss)
    y_pred = _single(y_pred)
    if kind is None or isinstance(y_batch, (dict, list, tuple)) or isinstance(y_pred, (dict, list, tuple)):
        return
    if len(getattr(y_pred, "shape", ())) < 2 or not hasattr(y_batch, "shape"):
        return
    units = int(y_pred.shape[-1])
    unit_s = f"{units} unit{'s' if units != 1 else ''}"
    if kind == "categorical":
        if y_batch.ndim == len(y_pred.shape) - 1 and units > 1:
            per = "one number" if y_batch.ndim == 1 else f"shape {tuple(y_batch.shape[1:])}"
            raise _PreflightError(f"labels have {per} per sample (class numbers?) but "
                                  f"{name} needs one-hot labels as wide as the model's output ({unit_s}); "
                                  "use sparse_categorical_crossentropy for class numbers")
        if y_batch.ndim == len(y_pred.shape) and int(y_batch.shape[-1]) != units:
            raise _PreflightError(f"one-hot labels are {int(y_batch.shape[-1])} wide but the model's output "
                                  f"has {unit_s} ({name})")
        return
    if y_batch.ndim == len(y_pred.shape) and int(y_batch.shape[-1]) == units > 1:
        raise _PreflightError(f"labels have {units} values per sample (one-hot?) but {name} needs one class number "
                              f"per sample; use categorical_crossentropy for one-hot labels")
    extremes = _label_range(source, ignore)
    if extremes is None:
        return
    (lo, lo_at), (hi, hi_at), odd = extremes
    if odd is not None:
        value, at = odd
        raise _PreflightError(f"labels hold {value:g} (in {at}), not a class number: {name} needs whole numbers in "
                              f"[0, {units}) (the model's output has {unit_s})")
    if lo >= 0 and hi < units:
        return
    span = f"{_num(lo)}..{_num(hi)}"
    if lo < 0:
        raise _PreflightError(f"labels range over {span} but {name} needs labels in [0, {units}) "
                              f"(the model's output has {unit_s}; label {_num(lo)} in {lo_at})")
    raise _PreflightError(f"labels range over {span} ({int(hi) + 1} classes) but the model's output has "
                          f"{unit_s} ({name} needs labels in [0, {units}); label {_num(hi)} in {hi_at})")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _label_range(source, ignore):
    """(lowest, where), (highest, where) over every label, training and validation, and the first
    label that is not a whole number (NaN included) with where, or None; None if not numbers."""
    import numpy as np

    lo = hi = odd = None
    if source.train is not None:
        arrays = [(source.train[1], "the training labels"), (source.val[1], "the validation labels")]
        for a, where in arrays:
            if isinstance(a, (dict, list, tuple)):
                return None
            ext = _extremes(np.asarray(a), ignore)
            if ext is False:
                return None
            lo, hi, odd = _widen(lo, hi, odd, ext, where)
        return (lo, hi, odd) if lo is not None or odd is not None else None
    import h5py

    for f in [*source.train_files, *source.val_files]:
        with h5py.File(f, "r") as h:
            ds = h[source.labels] if isinstance(source.labels, str) else None
            if ds is None or hasattr(ds, "keys"):
                return None
            ext = _extremes(ds, ignore)
            if ext is False:
                return None
            lo, hi, odd = _widen(lo, hi, odd, ext, str(f))
    return (lo, hi, odd) if lo is not None or odd is not None else None


def _widen(lo, hi, odd, ext, where: str):
    if ext is None:
        return lo, hi, odd
    if odd is None and ext[2] is not None:
        odd = (ext[2], where)
    if ext[0] is None:
        return lo, hi, odd
    if lo is None or ext[0] < lo[0]:
        lo = (ext[0], where)
    if hi is None or ext[1] > hi[0]:
        hi = (ext[1], where)
    return lo, hi, odd


def _extremes(a, ignore, block: int = 1 << 22):
    """Min and max of an array or HDF5 dataset, read a block of rows at a time (NaN and `ignore` left
    out), and the first value that is not a whole number (NaN included), or None.

    None where it holds no value; False where its values are not numbers.
    """
    import numpy as np

    from .learn._data import holds_numbers

    if not holds_numbers(a.dtype):
        return False
    if not a.shape:
        return None
    row = int(np.prod(a.shape[1:])) if len(a.shape) > 1 else 1
    step = max(1, block // max(row, 1))
    lo = hi = odd = None
    for i in range(0, int(a.shape[0]), step):
        b = np.asarray(a[i:i + step]).ravel()
        if ignore is not None:
            b = b[b != ignore]
        if np.issubdtype(b.dtype, np.floating):
            whole = np.isfinite(b) & (b == np.round(b))
            if odd is None and not whole.all():
                odd = b[~whole][0].item()
            b = b[~np.isnan(b)]
        if b.size:
            bl, bh = b.min().item(), b.max().item()
            lo = bl if lo is None else min(lo, bl)
            hi = bh if hi is None else max(hi, bh)
    return None if lo is None and odd is None else (lo, hi, odd)

"""Running one trial's objective on the ranks of a group, and judging what it returned.

A `function` objective runs on the group's first rank, or on every rank with the group's
communicator when it takes `comm`. A `model` objective is trained by `mpiopt.learn`.
"""
from __future__ import annotations

import math
import numbers
import re
import signal
import threading
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import TrialFailed, TrialTimeout
from .config import Config, import_callable
from .trial import TrialStatus

_TRACEBACK_LINES = 12


@dataclass
class Outcome:
    """What one rank makes of a trial (the group's rank 0 holds the figure of merit)."""

    status: str = TrialStatus.COMPLETED.value
    objective: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    epochs: int | None = None
    error: str | None = None
    misuse: bool = False  # the objective broke its contract (wrong return type): the search stops, exit 2


def error_text(exc: BaseException, *, where: str = "") -> str:
    """`Type: message` and the tail of the traceback, as the `error` column keeps it."""
    head = f"{where}{type(exc).__name__}: {exc}"
    if isinstance(exc, (TrialFailed, TrialTimeout)):
        return head
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    lines = "".join(tb).rstrip().splitlines()
    return head + "\n" + "\n".join(lines[-_TRACEBACK_LINES:])


def judge(value: Any, direction: str, metric: str) -> Outcome:
    """Turn what a function returned into an outcome: completed, diverged or failed."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        metrics = {metric: float(value)}
    elif isinstance(value, dict):
        metrics = {}
        for k, v in value.items():
            if isinstance(v, numbers.Real) and not isinstance(v, bool):
                metrics[str(k)] = float(v)
        if metric not in value:
            return Outcome(status=TrialStatus.FAILED.value, metrics=metrics, misuse=True,
                           error=f"the objective returned a dict without {metric!r} (it has: {', '.join(map(str, value))})")
        if metric not in metrics:
            return Outcome(status=TrialStatus.FAILED.value, metrics=metrics, misuse=True,
                           error=f"the objective returned {metric}={value[metric]!r}, expected a number")
    else:
        return Outcome(status=TrialStatus.FAILED.value, misuse=True,
                       error=f"the objective returned {type(value).__name__} {value!r:.60}, "
                             "expected a float or a dict of metrics")
    v = metrics[metric]
    if not math.isfinite(v):
        return Outcome(status=TrialStatus.DIVERGED.value, metrics=metrics, error=f"{metric} is {v}")
    return Outcome(objective=v, metrics=metrics)


def judge_history(history: list[dict[str, float]], direction: str, metric: str, stopped: str | None) -> Outcome:
    """The figure of merit of a training run: the best epoch's value of the chosen metric.

    The metrics reported are those of that epoch (the weights kept are the best ones too).
    """
    epochs = len(history)
    if stopped == "diverged":
        last = history[-1] if history else {}
        return Outcome(status=TrialStatus.DIVERGED.value, epochs=epochs,
                       metrics={k: v for k, v in last.items() if k != "epoch"},
                       error="training diverged: a NaN or infinite loss or metric")
    if not history:
        status = TrialStatus.TIMEOUT if stopped == "timeout" else TrialStatus.FAILED
        return Outcome(status=status.value, epochs=0, error="no epoch finished")
    if metric not in history[0]:
        have = ", ".join(k for k in history[0] if k != "epoch")
        return Outcome(status=TrialStatus.FAILED.value, epochs=epochs,
                       error=f"the figure of merit {metric!r} is not among the metrics training reports ({have})")
    pick = min if direction == "minimize" else max
    best = pick(history, key=lambda row: row[metric])
    metrics = {k: v for k, v in best.items() if k != "epoch"}
    if stopped == "timeout":
        return Outcome(status=TrialStatus.TIMEOUT.value, epochs=epochs, metrics=metrics,
                       error=f"stopped by training.time_limit after {epochs} epochs")
    return Outcome(objective=best[metric], metrics=metrics, epochs=epochs)


@contextmanager
def time_limit(seconds: float | None):
    """Raise `TrialTimeout` in this (main) thread after `seconds`, even inside a stuck Python loop."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _alarm(signum, frame):
        raise TrialTimeout(f"past training.time_limit ({seconds:g} s)")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class TrialRunner:
    """Runs trials of one configuration on one rank; user callables are imported once."""

    def __init__(self, cfg: Config, *, resume_checkpoints: bool = True) -> None:
        self.cfg = cfg
        self.resume_checkpoints = resume_checkpoints  # a re-run trial continues from its checkpoint
        self.last_training = None
        o = cfg.objective
        src = str(cfg.path)
        if o.kind == "function":
            self.fn = import_callable(o.function, cfg.base_dir, source=src, field="objective.function")
        else:
            self.build = import_callable(o.model, cfg.base_dir, source=src, field="objective.model")
            self.loader = (import_callable(o.data, cfg.base_dir, source=src, field="objective.data")
                           if isinstance(o.data, str) else None)

    def run(self, params: dict[str, Any], comm, *, trial: int = 0, trial_dir: Path | None = None,
            on_epoch=None) -> Outcome:
        """Run one trial on this rank of the group `comm` (None: alone). Exceptions become outcomes."""
        o = self.cfg.objective
        training = self.cfg.trial_training(params)
        rank = comm.Get_rank() if comm is not None else 0
        try:
            with time_limit(training.get("time_limit") if o.kind == "function" else None):
                if o.kind == "function":
                    if o.takes_comm:
                        value = self.fn(dict(params), comm)
                    elif rank == 0:
                        value = self.fn(dict(params))
                    else:
                        return Outcome()
                    return judge(value, o.direction, o.metric) if rank == 0 else Outcome()
                return self._train(params, training, comm, trial, trial_dir, on_epoch)
        except TrialTimeout as exc:
            return Outcome(status=TrialStatus.TIMEOUT.value, error=str(exc))
        except Exception as exc:  # user code: any exception fails the trial, never the search
            return Outcome(status=TrialStatus.FAILED.value, error=error_text(exc))

    def _train(self, params, training, comm, trial, trial_dir, on_epoch) -> Outcome:
        from . import learn
        from ._log import quiet_tensorflow

        with quiet_tensorflow():
            import keras  # noqa: F401  (first import here, before the user's loader imports it)
        o = self.cfg.objective
        source = learn.load_source(o.data, self.cfg.base_dir, self.loader)
        job = learn.Job(build=self.build, model_kwargs=self.cfg.model_kwargs(params), source=source,
                        training=training, loss=o.loss, metrics=o.metrics,
                        seed=self.cfg.search.seed * 100003 + trial, out_dir=trial_dir, on_epoch=on_epoch,
                        resume=self.resume_checkpoints)
        outcome = learn.train(comm, job)
        if outcome is None:
            return Outcome()
        self.last_training = outcome
        return judge_history(outcome.history, o.direction, o.metric, outcome.stopped)



def preflight(cfg: Config) -> None:
    """Check before a search that a `model` objective's data load and fit its model.

    Missing files or datasets, mismatched lengths, and data of the wrong shape for the model
    become one `ConfigError` line (exit 2) instead of a search whose every trial fails. The
    model is built with the middle of every parameter's range; if that build itself fails, the
    check is skipped (a trial may still fail for its own parameters).
    """
    from ._errors import ConfigError

    o = cfg.objective
    if o.kind != "model":
        return
    from . import learn
    from ._log import quiet_tensorflow
    from .learn._data import n_samples, take

    src = cfg.source or str(cfg.path)
    with quiet_tensorflow():
        import keras
    runner = TrialRunner(cfg)
    try:
        source = learn.load_source(o.data, cfg.base_dir, runner.loader)
        if source.train is not None:
            sample = take(source.train[0], slice(0, 2)), take(source.train[1], slice(0, 2))
            xv, yv = source.validation()
        else:  # one file of each: the coordinator does not read a whole data set
            from .learn._data import read_h5

            x, y = read_h5(source.train_files[0], source.features, source.labels)
            sample = take(x, slice(0, 2)), take(y, slice(0, 2))
            xv, yv = read_h5(source.val_files[0], source.features, source.labels)
        val = take(xv, slice(0, 2)), take(yv, slice(0, 2))
        if n_samples(sample[0]) == 0:
            raise TrialFailed("the training data are empty")
    except TrialFailed as exc:
        raise ConfigError(str(exc).splitlines()[0], source=src, field="objective.data") from None
    except Exception as exc:
        raise ConfigError(f"load_data failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                          source=src, field="objective.data") from None
    params = cfg.space.middle()
    try:
        keras.backend.clear_session()
        model = runner.build(**cfg.model_kwargs(params))
    except Exception:
        return
    try:
        if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
            if o.loss is None:
                raise ValueError("build_model returned an uncompiled model and objective.loss is not set")
            model.compile(loss=o.loss, metrics=list(o.metrics))
        for x, y in (sample, val):
            model.compute_loss(x=x, y=y, y_pred=model(x, training=False), training=False)
    except Exception as exc:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # Keras colours its messages
        lines = [ln.strip() for ln in plain.splitlines() if ln.strip()]
        text = next((ln for ln in lines if "expected" in ln or "shape" in ln or "Incompatible" in ln),
                    lines[0] if lines else "")
        raise ConfigError(f"the model from {o.model} does not fit the data: {type(exc).__name__}: {text[:300]}",
                          source=src, field="objective") from None
    finally:
        keras.backend.clear_session()

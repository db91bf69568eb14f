"""Training one Keras model with a group of ranks: master/worker (downpour, easgd, gem) or allreduce.

Group rank 0 is the master: it holds the central weights and the optimizer state, applies
updates in the order workers send them, and validates each epoch in a thread on a snapshot, so
the workers never wait for validation. The other ranks are workers: they compute on their shard.
In `allreduce` mode there is no master: every rank computes, gradients are summed with one
`Allreduce` on a flat buffer per step, and every rank applies the same update (the Horovod way).
A group of one rank runs the allreduce steps without communication: the baseline.

Every message is a flat float32 numpy buffer received into a preallocated array, except the few
small per-epoch reports (JSON bytes).
"""
from __future__ import annotations

import errno
import json
import logging
import math
import os
import queue
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np

from .._errors import DataError, GroupPeerFailed, TrialFailed
from .._files import naming
from ..journal import drop_checkpoint
from . import _checkpoint
from ._control import Deadline, EarlyStopping, Schedule, target_reached
from ._data import DataSource, n_samples, take
from ._flat import FlatModel
from ._trace import Tracer, write_trace
from .optimizers import OPTIMIZERS, keras_optimizer_problem, make_master_optimizer, momentum_of

log = logging.getLogger("mpiopt.learn")

TAG_UPDATE, TAG_WEIGHTS, TAG_REPORT, TAG_DECISION = 101, 102, 103, 104
HEADER = 2  # an update buffer ends with [loss, samples]
_KERAS_OPTIMIZERS = {"SGD": "sgd", "RMSprop": "rmsprop", "Adadelta": "adadelta", "Adam": "adam", "AdamW": "adamw",
                     "Adagrad": "adagrad", "Adamax": "adamax", "Nadam": "nadam"}


@dataclass
class TrainOutcome:
    """What training produced: per-epoch history and how it ended."""

    history: list[dict[str, float]] = field(default_factory=list)
    stopped: str | None = None  # None | "timeout" | "diverged" | "target" | "early_stopping"
    error: str | None = None
    timing: dict[str, dict[str, float]] = field(default_factory=dict)  # per rank: compute/send/wait/apply/validate
    samples: int = 0
    wall_s: float = 0.0
    resumed_s: float | None = None  # training time before the checkpoint this run resumed from
    params: int = 0  # the model's parameter count (trainable and not)


@dataclass
class Job:
    """One training job, as every rank of the group sees it."""

    build: Callable[..., Any]
    model_kwargs: dict[str, Any]
    source: DataSource
    training: dict[str, Any]
    loss: Any = None
    metrics: tuple = ()
    seed: int = 0
    out_dir: Path | None = None  # history.csv, best.weights.h5, checkpoints, trace.json
    # after an epoch is recorded and checkpointed, on the rank that writes: its report to the
    # search, which answers None to go on, or why training stops ("paused", "pruned")
    on_epoch: Callable[[int, dict], str | None] | None = None
    decide_at: frozenset[int] = frozenset()  # epochs after which `on_epoch` waits for the scheduler's word
    # epochs the search holds reports of; a checkpoint past them reports the rest again (None: none)
    reported: int | None = None
    resume: bool = True  # continue from a checkpoint in out_dir if there is one
    hparams: dict[str, Any] | None = None  # the trial's parameters, for TensorBoard's HParams (training.tensorboard)
    # (metric, "minimize" | "maximize"): the figure of merit, whose best epoch's weights are kept, as
    # the search judges the run by that epoch (None: early stopping's best epoch, else the last)
    merit: tuple[str, str] | None = None
    name: str = "train"  # the trial's name in TensorBoard
    # perf_counter when the job was made: the training time a checkpoint carries counts from here,
    # the model's build included, as the search counts a trial's last stretch from its hand-out
    began: float = field(default_factory=time.perf_counter)


# -- shared set-up ---------------------------------------------------------------------------------
def training_optimizer(training: dict[str, Any]) -> dict[str, Any]:
    """training.optimizer as `{"name": ..., option: value}`, at training.learning_rate unless it
    names its own, with training.momentum if set: what trains a model mpiopt compiles."""
    spec = training.get("optimizer", "adam")
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    spec.setdefault("learning_rate", training.get("learning_rate", 0.001))
    if training.get("momentum") is not None:  # sgd's or rmsprop's: the configuration refuses it for others
        spec["momentum"] = training["momentum"]
    return spec


def _optimizer_spec(model, training: dict[str, Any], compiled_by_us: bool) -> dict[str, Any]:
    spec = training_optimizer(training)
    if compiled_by_us or getattr(model, "optimizer", None) is None:
        return spec
    # the user compiled the model: train with its optimizer's kind and settings (under the
    # mixed_float16 policy Keras wraps it in a LossScaleOptimizer: mpiopt scales the loss itself)
    opt = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    name = _KERAS_OPTIMIZERS.get(type(opt).__name__)
    if name is None:
        raise TrialFailed(f"build_model compiled the model with {type(opt).__name__}, which mpiopt's master cannot "
                          f"apply; use one of {', '.join(_KERAS_OPTIMIZERS)} or leave the model uncompiled")
    problem = keras_optimizer_problem(opt)
    if problem:  # a schedule, clipping, EMA...: dropped, they would train another model without a word
        raise TrialFailed(problem)
    cfg = opt.get_config()
    keep = {"learning_rate", "momentum", "nesterov", "rho", "epsilon", "centered", "beta_1", "beta_2", "amsgrad",
            "weight_decay", "initial_accumulator_value"}
    return {"name": name, **{k: v for k, v in cfg.items() if k in keep and v is not None}}


def compiled_with_an_optimizer(model) -> bool:
    """Whether build_model compiled the model with an optimizer of its own, which then trains it
    (training.optimizer and learning_rate are not read); else mpiopt compiles it."""
    return bool(getattr(model, "compiled", False)) and getattr(model, "optimizer", None) is not None


def _build(job: Job):
    """The model on this rank, compiled, with a flat view; the master optimizer's spec."""
    import keras

    keras.backend.clear_session()
    set_precision(job.training)
    keras.utils.set_random_seed(job.seed)
    model = job.build(**job.model_kwargs)
    if not isinstance(model, keras.Model):
        raise TrialFailed(f"build_model returned {type(model).__name__}, expected a keras.Model")
    if not model.weights:  # built on first call (a Sequential without keras.Input): build it on one sample
        model(job.source.first(1), training=False)
    jit = bool(job.training.get("jit_compile"))
    compiled_by_us = not compiled_with_an_optimizer(model)
    if compiled_by_us:
        if job.loss is None:
            raise TrialFailed("build_model returned an uncompiled model and objective.loss is not set")
        model.compile(loss=job.loss, metrics=list(job.metrics), jit_compile=jit)  # jit: the validation
    spec = _optimizer_spec(model, job.training, compiled_by_us)
    problem = gem_optimizer_problem(spec) if job.training.get("mode") == "gem" else None
    if problem:  # on every rank alike, before any message
        raise TrialFailed(problem)
    return model, FlatModel(model, jit_compile=jit), spec


def set_precision(training: dict[str, Any]) -> None:
    """Keras' global dtype policy for the model a trial builds next: `mixed_float16` with
    `training.mixed_precision`, else the float type (float32). The policy is process-wide and one
    process runs many trials, so every build sets it, either way."""
    import keras

    keras.config.set_dtype_policy("mixed_float16" if training.get("mixed_precision") else keras.config.floatx())


def _evaluate(flat: FlatModel, x, y, batch_size: int) -> dict[str, float]:
    if n_samples(x):
        return flat.evaluate(x, y, batch_size)
    # a rank of a group with fewer validation samples than ranks: it adds nothing to the group's
    # sums (its metric variables still hold its training's)
    flat.model.reset_metrics()
    return {}


def _finite(row: dict[str, float]) -> bool:
    return all(math.isfinite(v) for k, v in row.items() if k != "epoch")


def history_columns(row: dict[str, float]) -> list[str]:
    """history.csv's columns in one order whatever the mode reports them in: the epoch, the
    training metrics, then the validation ones, each with the loss first and the rest by name."""
    def rank(name: str) -> tuple:
        base = name.removeprefix("val_")
        return name != "epoch", name.startswith("val_"), base != "loss", base

    return sorted(row, key=rank)


def checkpoint_due(job: Job, epoch: int) -> bool:
    """Whether a checkpoint is written after `epoch` (1-based): every `checkpoint_every`, and at
    every rung, for a paused trial goes on from there."""
    every = int(job.training.get("checkpoint_every", 1) or 0)
    return epoch in job.decide_at or (every > 0 and epoch % every == 0)


class _Epochs:
    """The per-epoch bookkeeping of the rank that decides (master, or every allreduce rank alike)."""

    def __init__(self, job: Job, writer: bool) -> None:
        self.job = job
        t = job.training
        self.writer = writer
        self.history: list[dict[str, float]] = []
        es = t.get("early_stopping")
        self.es = EarlyStopping(**es) if es else None
        self.stopped: str | None = None
        self.best_weights: np.ndarray | None = None
        self.merit_best: dict[str, float] | None = None  # the best epoch by job.merit, as of the last add
        self.best_state: np.ndarray | None = None
        self._csv = None
        self._board = None
        self.began = job.began
        self.resumed_s: float | None = None  # training time of the attempts before the checkpoint restored

    def add(self, row: dict[str, float], weights: np.ndarray, state: np.ndarray) -> None:
        """Record an epoch's row, decide whether to stop, keep the best weights.

        A reason to stop already given (a timeout, a worker's) stands: it is what ended training."""
        self.history.append(row)
        epoch = int(row["epoch"])
        # a NaN in the data can leave the loss finite (relu) while the weights fill with NaN
        if not self.stopped and (not _finite(row) or not np.isfinite(weights).all()):
            self.stopped = "diverged"
        improved, stop = (self.es.update(epoch, row) if self.es else (True, False))
        if self.job.merit is not None:
            self.merit_best = self._best_epoch()
            improved = self.merit_best is row
        if improved or self.best_weights is None:
            self.best_weights = weights.copy()
            self.best_state = state.copy()
        if stop and not self.stopped:
            self.stopped = "early_stopping"
        if not self.stopped and target_reached(self.job.training.get("target"), row):
            self.stopped = "target"
        if self.writer:
            self._write(row)
            self._to_board(row)

    def _best_epoch(self) -> dict[str, float] | None:
        """The first epoch with the best finite figure of merit so far (None: none yet), as
        `objective.judge_history` picks the epoch whose metrics the search records."""
        metric, direction = self.job.merit
        rows = [r for r in self.history if isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric])]
        pick = min if direction == "minimize" else max
        return pick(rows, key=lambda r: r[metric]) if rows else None

    def _to_board(self, row: dict[str, float]) -> None:
        if not self.job.training.get("tensorboard") or self.job.out_dir is None:
            return
        if self._board is None:
            from ._board import Board

            self._board = Board(self.job.out_dir, self.job.hparams or {}, self.job.name, first_step=int(row["epoch"]))
        self._board.write({**row, **self._best_so_far()})

    def _best_so_far(self) -> dict[str, float]:
        """`best_<metric>`: the figure of merit's best epoch so far, the value the search records. The
        HParams dashboard shows each tag's last value, which for the metric itself is the last epoch's."""
        best = self.merit_best
        return {} if best is None else {f"best_{self.job.merit[0]}": best[self.job.merit[0]]}

    def report(self, epoch: int, comm=None, row: dict[str, float] | None = None) -> None:
        """Report the epoch just recorded and checkpointed (or `row`, an earlier one); at a decision
        epoch the scheduler's word may stop training, and with `comm` (allreduce) every rank of the
        group learns it."""
        reason = None
        if self.writer and self.job.on_epoch is not None:
            reason = self.job.on_epoch(epoch, row if row is not None else self.history[-1])
        if epoch in self.job.decide_at and comm is not None and comm.Get_size() > 1:
            reason = comm.bcast(reason, root=0)
        if reason and not self.stopped:
            self.stopped = reason

    def _write(self, row: dict[str, float]) -> None:
        if self.job.out_dir is None:
            return
        path = self.job.out_dir / "history.csv"
        with naming(path):
            if self._csv is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._columns = history_columns(row)
                self._csv = open(path, "w")
                self._csv.write(",".join(self._columns) + "\n")
                for old in self.history[:-1]:  # rows restored from a checkpoint
                    self._csv.write(",".join(repr(old.get(c, "")) for c in self._columns) + "\n")
            self._csv.write(",".join(repr(row.get(c, "")) if c != "epoch" else str(int(row[c]))
                                     for c in self._columns) + "\n")
            self._csv.flush()

    def close(self) -> None:
        if self._csv is not None:
            csv, self._csv = self._csv, None
            with naming(self.job.out_dir / "history.csv"):
                csv.close()
        if self._board is not None:
            self._board.close()
            self._board = None

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint(self, epoch: int, weights: np.ndarray, state: np.ndarray, opt, extra: dict | None = None) -> None:
        if not self.writer or self.job.out_dir is None or not checkpoint_due(self.job, epoch):
            return
        arrays = {"weights": weights, "state": state}
        meta: dict[str, Any] = {"epoch": epoch, "history": self.history, "stopped": self.stopped,
                                "early_stopping": self.es.state() if self.es else None,
                                "trained_s": (self.resumed_s or 0.0) + time.perf_counter() - self.began,
                                **(extra or {})}
        if self.best_weights is not None:
            arrays["best_weights"], arrays["best_state"] = self.best_weights, self.best_state
        if opt is not None:
            opt_arrays, meta["optimizer"] = _checkpoint.optimizer_parts(opt)
            arrays.update(opt_arrays)
        _checkpoint.save(self.job.out_dir, arrays, meta)

    def report_unrecorded(self, start_epoch: int, comm=None) -> None:
        """Report again the restored epochs past those the search holds reports of: a kill that
        came between the checkpoint's save and the coordinator's record of its report lost them,
        and a rung among them would go unjudged. Every rank of an allreduce group calls it."""
        if self.job.reported is None:
            return
        for row in self.history[self.job.reported:start_epoch]:
            if self.stopped:
                break
            self.report(int(row["epoch"]), comm, row)

    def resume(self, opt, weights: np.ndarray, fresh_state: np.ndarray) -> tuple[int, np.ndarray | None]:
        """Load the checkpoint, if any, into `weights` and `opt`: (epochs done, its state or None).
        A state of another size than the model's (`fresh_state`: an older mpiopt's, which kept a
        frozen layer's weights in it) gives way to the model's own."""
        restored = self.restore(opt)
        if restored is None:
            return 0, None
        start_epoch, weights[:], state = restored
        if state.size != fresh_state.size:
            log.debug("%s: the checkpoint's non-trainable state (%d values) is not this model's (%d): not restored",
                      self.job.name, state.size, fresh_state.size)
            state = fresh_state
        if self.writer:
            log.info("%s: resuming training from its checkpoint at epoch %d", self.job.name, start_epoch)
        return start_epoch, state

    def restore(self, opt) -> tuple[int, np.ndarray, np.ndarray] | None:
        """(epochs done, weights, state) from the out dir's checkpoint, or None."""
        if not self.job.resume:
            return None
        found = _checkpoint.load(self.job.out_dir)
        if found is None:
            self._warn_of_a_lost_checkpoint()
            return None
        arrays, meta = found
        self.history = list(meta.get("history", []))
        self.stopped = meta.get("stopped") if meta.get("stopped") != "paused" else None  # promoted: it goes on
        self.resumed_s = float(meta.get("trained_s") or 0.0)
        if self.es and meta.get("early_stopping"):
            self.es.load(meta["early_stopping"])
        self.best_weights = arrays.get("best_weights")
        self.best_state = arrays.get("best_state")
        if opt is not None:
            _checkpoint.load_optimizer(opt, arrays, meta.get("optimizer"))
        # epochs done = next epoch index; the state as get_state gives it (an older checkpoint's is float32)
        return int(meta["epoch"]), arrays["weights"], np.asarray(arrays["state"], dtype=np.float64)

    def _warn_of_a_lost_checkpoint(self) -> None:
        """A checkpoint is saved before an epoch that is due one is reported, so a trial the
        search holds such a report of must have one: without it (deleted, unreadable) the trial's
        epochs are trained again, which the user should hear of."""
        reported = self.job.reported or 0
        if self.writer and any(checkpoint_due(self.job, e) for e in range(1, reported + 1)):
            log.warning("%s: no readable %s in %s, though the search holds %d of its epochs: it trains again "
                        "from epoch 0", self.job.name, _checkpoint.NPZ, self.job.out_dir, reported)

    def outcome(self, timing: dict[str, dict[str, float]], samples: int, t0: float, flat: FlatModel) -> TrainOutcome:
        """What training of `flat` produced, `t0` its start (perf_counter)."""
        return TrainOutcome(history=self.history, stopped=self.stopped, timing=timing, samples=samples,
                            wall_s=time.perf_counter() - t0, resumed_s=self.resumed_s,
                            params=int(flat.model.count_params()))

    def finish(self, flat: FlatModel) -> None:
        """Leave the best weights in the model and save them (the master or rank 0)."""
        if self._board is not None:
            self._board.end(self.stopped)
        self.close()
        if self.best_weights is not None and self.stopped != "diverged":
            flat.set_kept(self.best_weights, self.best_state)
        if self.writer and self.job.out_dir is not None and self.stopped != "diverged":
            self.job.out_dir.mkdir(parents=True, exist_ok=True)
            save_weights(flat.model, self.job.out_dir / "best.weights.h5")
        # A search's trial keeps its checkpoint until the journal holds its result (the search
        # drops it then): a kill before that continues the trial from it, where it ended. A run no
        # search resumes (mpiopt train) is done with it here.
        if self.writer and self.job.out_dir is not None and not self.job.resume and self.stopped != "diverged":
            drop_checkpoint(self.job.out_dir)


def save_weights(model, path: Path) -> None:
    """`model.save_weights(path)`, refused with ENOSPC beforehand where the disk cannot hold the
    weights: HDF5 running out of space in the middle of a file can crash the process (a
    segmentation fault) where it should raise."""
    data = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.weights)
    need = 1.1 * data + 4096 * len(model.weights) + (1 << 20)  # HDF5's structures: ~1.4 kB a variable
    room = shutil.disk_usage(path.parent).free + (path.stat().st_size if path.exists() else 0)
    if room < need:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    model.save_weights(str(path))


def _schedule(training: dict[str, Any], spec: dict[str, Any], workers: int) -> Schedule:
    return Schedule(base=float(spec.get("learning_rate", 0.001)), workers=workers,
                    scaling=training.get("lr_scaling", "none") or "none",
                    warmup_epochs=float(training.get("warmup_epochs", 0) or 0))


# -- allreduce (and a group of one) ----------------------------------------------------------------
class _AllreduceRank:
    """One rank of an allreduce group, or a group of one (`comm` None): each step every rank
    computes its part, one `Allreduce` sums the parts, and every rank applies the same update."""

    def __init__(self, comm, job: Job) -> None:
        t = job.training
        self.comm, self.job = comm, job
        self.rank = comm.Get_rank() if comm is not None else 0
        self.size = comm.Get_size() if comm is not None else 1
        self.tracer = Tracer(self.rank, bool(t.get("trace")))
        self.model, self.flat, spec = _build(job)
        self.n = self.flat.size
        self.weights = self.flat.get()
        if comm is not None:
            comm.Bcast(self.weights, root=0)
            self.flat.set(self.weights)
        self.opt = make_master_optimizer(spec, self.n)
        self.sched = _schedule(t, spec, self.size)
        self.epochs = _Epochs(job, writer=self.rank == 0)
        self.start_epoch, state = self.epochs.resume(self.opt, self.weights, self.flat.get_state())
        if state is not None:
            self.flat.set(self.weights)
            if state.size:
                self.flat.set_state(state)
        self.bs = int(t["batch_size"])
        self.steps = math.ceil(job.source.largest_shard(self.size) / self.bs)
        self.buf = np.zeros(self.n + 4, dtype=np.float32)  # grads*nb, loss*nb, nb, "my time is up", "I failed"
        self.deadline = Deadline(t.get("time_limit"))
        self.xv, self.yv = job.source.validation_part(self.rank, self.size)
        self.samples = 0

    def run(self) -> TrainOutcome | None:
        """Train every epoch left; the outcome on rank 0, None elsewhere."""
        t0 = time.perf_counter()
        self.epochs.report_unrecorded(self.start_epoch, self.comm)
        for epoch in range(self.start_epoch, int(self.job.training["epochs"])):
            if self.epochs.stopped:
                break
            mine = self._train_epoch(epoch)
            if self.epochs.stopped:  # diverged or out of time: no validation of a broken-off epoch
                break
            self._end_epoch(epoch, mine)
            if self.epochs.stopped:
                break
        self.epochs.finish(self.flat)
        timing = _gather_timing(self.comm, self.tracer, self.job, [f"rank {r}" for r in range(self.size)])
        if self.rank != 0:
            return None
        return self.epochs.outcome(timing, self.samples, t0, self.flat)

    def _train_epoch(self, epoch: int) -> int:
        """The epoch's steps on this rank's shard, in step with the group; the shard's size."""
        x, y = self.job.source.shard(self.rank, self.size, epoch, self.job.seed)
        self.model.reset_metrics()
        mine = n_samples(x)
        for step in range(self.steps):
            self.opt.learning_rate = self.sched.rate(epoch + step / max(self.steps, 1))
            lo, hi = step * self.bs, min((step + 1) * self.bs, mine)
            failure = self._compute(x, y, lo, hi)
            self._sum_over_group(failure)
            if not self._apply():
                break
        return mine

    def _compute(self, x, y, lo: int, hi: int) -> Exception | None:
        """Write this rank's part of a step into the buffer. An error is flagged in the buffer and
        returned, not raised, so that the whole group leaves the step together (alone: raised)."""
        buf, n = self.buf, self.n
        buf[:] = 0.0
        failure = None
        if lo < hi:
            try:
                with self.tracer.span("compute"):
                    loss, grad = self.flat.grad_step(take(x, slice(lo, hi)), take(y, slice(lo, hi)))
                nb = hi - lo
                np.multiply(grad, nb, out=buf[:n])
                buf[n], buf[n + 1] = loss * nb, nb
            except Exception as exc:
                if self.comm is None:
                    raise
                failure, buf[:] = exc, 0.0
                buf[n + 3] = 1.0
        buf[n + 2] = 1.0 if self.deadline.passed() else 0.0
        return failure

    def _sum_over_group(self, failure: Exception | None) -> None:
        """Sum the buffers of the group (alone: nothing to do); a failure anywhere raises everywhere."""
        if self.comm is not None:
            with self.tracer.span("allreduce"):
                self.comm.Allreduce_inplace(self.buf)
            _raise_if_failed(self.buf[self.n + 3], failure)

    def _apply(self) -> bool:
        """Take the group's step from the summed buffer; False when training stops instead."""
        buf, n = self.buf, self.n
        total = buf[n + 1]
        self.samples += int(total)
        if not math.isfinite(float(buf[n])):
            self.epochs.stopped = "diverged"
            return False
        if buf[n + 2] > 0:
            self.epochs.stopped = "timeout"
            return False
        if total > 0:
            with self.tracer.span("apply"):
                np.divide(buf[:n], total, out=buf[:n])
                self.opt.step(self.weights, buf[:n])
                self.flat.set(self.weights)
        return True

    def _end_epoch(self, epoch: int, mine: int) -> None:
        """Validate, average the batch-norm statistics, record the epoch's row and checkpoint."""
        comm, flat = self.comm, self.flat
        with self.tracer.span("validate"):
            row = _group_metrics(comm, flat, flat.metrics())
            val = _group_metrics(comm, flat, _attempt(_evaluate, self.flat, self.xv, self.yv, self.bs))
        row = {"epoch": epoch + 1, **row, **{f"val_{k}": v for k, v in val.items()}}
        if comm is not None and self.size > 1:  # batch-norm statistics: the group's average
            state = flat.get_state()
            if state.size:
                comm.Allreduce_inplace(state)
                flat.set_state(state / self.size)
        self.epochs.add(row, self.weights, flat.get_state())
        self.epochs.checkpoint(epoch + 1, self.weights, flat.get_state(), self.opt)
        self.epochs.report(epoch + 1, comm)


def _raise_if_failed(flag: float, failure: Exception | None) -> None:
    """After a step's allreduce: a rank that failed its part raises its error, the others stop too.

    The failure travels inside the step's own collective, so every rank leaves the same step
    together and no collective is left waiting for a rank that gave up."""
    if failure is not None:
        raise failure
    if flag > 0:
        raise GroupPeerFailed("another rank of the group failed this trial")


def _attempt(fn, *args) -> dict[str, float] | Exception:
    """`fn(*args)`, or the exception it raised, to be shared through the next collective."""
    try:
        return fn(*args)
    except Exception as exc:
        return exc


def _group_metrics(comm, flat: FlatModel, metrics: dict[str, float] | Exception) -> dict[str, float]:
    """The metrics of the group's batches together, as one rank that took them all would report
    them: every rank's metric variables that add up (totals, counts, AUC's confusion counts) are
    summed over the group, then each metric's result is taken. (AUC, precision and recall of the
    whole are no sample-weighted mean of the parts' results.)

    `metrics` (this rank's own) may be the exception its part raised: every rank then stops with it."""
    if comm is None or comm.Get_size() == 1:
        if isinstance(metrics, Exception):
            raise metrics
        return dict(metrics)
    failed = comm.allgather(isinstance(metrics, Exception))
    if any(failed):
        _raise_if_failed(1.0, metrics if isinstance(metrics, Exception) else None)
    state = flat.summed_metric_state()
    if state.size:
        comm.Allreduce_inplace(state)
        flat.set_summed_metric_state(state)
    return flat.metrics()


def _gather_timing(comm, tracer: Tracer, job: Job, labels: list[str]) -> dict[str, dict[str, float]]:
    if comm is None or comm.Get_size() == 1:
        per_rank_events, per_rank_totals = [tracer.events], [tracer.totals]
    else:
        gathered = comm.allgather((tracer.events, tracer.totals))
        per_rank_events = [g[0] for g in gathered]
        per_rank_totals = [g[1] for g in gathered]
    if tracer.enabled and tracer.rank == 0 and job.out_dir is not None:
        write_trace(job.out_dir / "trace.json", per_rank_events, labels)
    return dict(zip(labels, per_rank_totals, strict=True))


# -- master and workers ------------------------------------------------------------------------------
def _broadcast_start(comm, weights: np.ndarray, state: np.ndarray, start_epoch: int = 0,
                     restored: bool = False) -> tuple[int, bool]:
    """Rank 0's weights, the epoch to start at (past a checkpoint's) and whether it restored a
    checkpoint to every rank, and then its restored non-trainable state into `state`: a worker
    that went on with its fresh batch-norm statistics would have the master validate their
    average. (The epoch to start at, whether restored.)"""
    start = np.array([start_epoch, restored], dtype=np.float32)
    comm.Bcast(weights, root=0)
    comm.Bcast(start, root=0)
    if start[1] and state.size:
        comm.Bcast(state, root=0)
    return int(start[0]), bool(start[1])


def _elastic_force(training: dict[str, Any], workers: int) -> float:
    """EASGD's alpha: `elastic_force`, by default beta / workers with beta = 0.9 (Zhang et al. 2015)."""
    return training.get("elastic_force") or 0.9 / workers


def _master_worker_labels(size: int) -> list[str]:
    return ["master"] + [f"worker {w}" for w in range(1, size)]


class _Validator(threading.Thread):
    """Validates snapshots of the master's weights one after another, beside the serving loop."""

    def __init__(self, model, flat: FlatModel, data, batch_size: int, tracer: Tracer) -> None:
        super().__init__(daemon=True, name="mpiopt-validation")
        self.model, self.flat, self.data, self.bs, self.tracer = model, flat, data, batch_size, tracer
        self.todo: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()

    def run(self) -> None:
        while True:
            item = self.todo.get()
            if item is None:
                return
            epoch, weights, state, train_sums = item
            t0 = time.perf_counter()
            try:
                self.flat.set(weights)
                if state.size:
                    self.flat.set_state(state)
                result = _evaluate(self.flat, self.data[0], self.data[1], self.bs)
                train = self._train_metrics(train_sums)
            except Exception as exc:  # reported to the serving loop, which fails the trial
                result, train = exc, None
            self.tracer.add("validate", t0, time.perf_counter() - t0)
            self.done.put((epoch, weights, state, result, train))

    def _train_metrics(self, sums: np.ndarray) -> dict[str, float] | None:
        """The epoch's training metrics from the workers' summed metric variables, as one process
        that trained on every batch would give them; None where these cannot tell (a metric with
        variables that do not add up, or none built): the serving loop then averages the results.
        Here, after the validation, because this thread alone touches this model's metrics."""
        if not self.flat.metrics_add_up() or sums.size != self.flat.summed_metric_state().size:
            return None
        self.flat.set_summed_metric_state(sums)
        return self.flat.metrics()


class _Master:
    """Group rank 0 of master/worker training: applies the workers' updates to the central
    weights in the order they come in, answers them, and has each epoch validated once every
    worker reported it. The serving loop tests in turn for an update, a report and a finished
    validation, and backs off while none comes."""

    def __init__(self, comm, job: Job) -> None:
        t = job.training
        self.comm, self.job = comm, job
        self.mode = t["mode"]
        self.size = comm.Get_size()
        self.workers = self.size - 1
        self.tracer = Tracer(0, bool(t.get("trace")))
        self.val_tracer = Tracer(self.size, bool(t.get("trace")))
        model, self.flat, spec = _build(job)
        self.n = n = self.flat.size
        self.center = self.flat.get()
        self.opt = make_master_optimizer(spec, n) if self.mode == "downpour" else None
        self.epochs = _Epochs(job, writer=True)
        fresh = self.flat.get_state()
        start_epoch, state = self.epochs.resume(self.opt, self.center, fresh)
        self.epochs.report_unrecorded(start_epoch)
        # a trial the scheduler stops there: the workers start past the last epoch, and train none
        _broadcast_start(comm, self.center, fresh if state is None else state,
                         int(t["epochs"]) if self.epochs.stopped else start_epoch, restored=state is not None)
        self.sched = _schedule(t, spec, self.workers)
        self.alpha = _elastic_force(t, self.workers)
        self.n_train = job.source.n_train()
        self.deadline = Deadline(t.get("time_limit"))
        self.bufs = [np.empty(n + HEADER, dtype=np.float32) for _ in range(self.workers)]
        self.reqs = [comm.Irecv(self.bufs[w], source=w + 1, tag=TAG_UPDATE) for w in range(self.workers)]
        self.reply = np.empty(n + 1, dtype=np.float32)  # weights + "stop" flag
        self.diff = np.empty(n, dtype=np.float32)
        self.validator = _Validator(model, self.flat, job.source.validation(), int(t["batch_size"]), self.val_tracer)
        self.validator.start()
        self.reports: dict[int, list[dict]] = {}  # per epoch, the workers' reports so far
        self.pending_validation = 0
        self.held: list[int] = []  # workers waiting at a decision epoch for the scheduler's word
        self.finished = 0  # workers done
        self.applied_samples = 0

    def run(self) -> TrainOutcome:
        t0 = time.perf_counter()
        try:
            self._serve()
        finally:  # on a failure too: no thread left validating, no receive left posted
            self.validator.todo.put(None)
            self.validator.join()
            self.comm.cancel(self.reqs)
        self.epochs.finish(self.flat)
        timing = _gather_timing(self.comm, _merge_tracers(self.tracer, self.val_tracer), self.job,
                                _master_worker_labels(self.size))
        return self.epochs.outcome(timing, self.applied_samples, t0, self.flat)

    def _serve(self) -> None:
        from ..transport import Backoff

        backoff = Backoff()
        while True:
            if not self.epochs.stopped and self.deadline.passed():
                self.epochs.stopped = "timeout"
            if self.epochs.stopped and self.held:
                self._release_held()  # stopping anyway: the held workers need not wait for their epoch's row
            # a report before an update: a worker's report of an epoch comes before its first update
            # of the next, which the epoch's validated snapshot must not take in
            busy = self._take_report()
            busy |= self._take_update()
            busy |= self._take_validation()
            if busy:
                backoff = Backoff()
            elif self.finished == self.workers and not self.pending_validation:
                break  # every worker is done, their last updates applied, every epoch validated
            else:
                with self.tracer.span("wait"):
                    backoff.sleep()

    def _stop(self, reason: str) -> None:
        """Stop training for `reason`, unless it already stops for another."""
        if not self.epochs.stopped:
            self.epochs.stopped = reason

    def _send_center(self, dest: int) -> None:
        self.reply[:self.n] = self.center
        self.reply[self.n] = 1.0 if self.epochs.stopped else 0.0
        with self.tracer.span("send"):
            self.comm.Send(self.reply, dest, TAG_WEIGHTS)

    def _take_update(self) -> bool:
        """Apply a worker's update if one came in, answer it, and listen for its next one."""
        w = self.comm.test_any(self.reqs)
        if w is None:
            return False
        n, buf = self.n, self.bufs[w]
        loss, nb = float(buf[n]), float(buf[n + 1])
        self.applied_samples += int(nb)
        if not math.isfinite(loss):
            self._stop("diverged")
        with self.tracer.span("apply"):
            if self.mode == "downpour":
                self.opt.learning_rate = self.sched.rate(self.applied_samples / max(self.n_train, 1))
                if not self.epochs.stopped:
                    self.opt.step(self.center, buf[:n])
            elif self.mode == "gem":
                if not self.epochs.stopped:
                    self.center += buf[:n]
        if self.mode == "downpour":
            self._send_center(w + 1)
        elif self.mode == "easgd":
            self._send_center(w + 1)  # the worker moves toward the centre it had
            if not self.epochs.stopped:
                np.subtract(buf[:n], self.center, out=self.diff)
                self.diff *= self.alpha
                self.center += self.diff
        self.reqs[w] = self.comm.Irecv(buf, source=w + 1, tag=TAG_UPDATE)
        return True

    def _take_report(self) -> bool:
        """Answer a worker's small message if one came in: a GEM pull, an epoch's report, done."""
        msg = self.comm.probe_bytes(TAG_REPORT)
        if msg is None:
            return False
        source, data = msg
        report = json.loads(data)
        if report["kind"] == "pull":  # GEM: the worker wants the centre before committing
            self._send_center(source)
        elif report["kind"] == "done":
            self.finished += 1
            if report.get("reason"):
                self._stop(report["reason"])
        elif report["kind"] == "epoch":
            self._collect_epoch_report(report)
            if report["held"]:
                self._hold(source)
        return True

    def _hold(self, worker: int) -> None:
        """A worker waits at a decision epoch; a stopping master answers it at once."""
        self.held.append(worker)
        if self.epochs.stopped:
            self._release_held()

    def _release_held(self) -> None:
        """Tell the held workers whether training goes on past their decision epoch."""
        word = b"stop" if self.epochs.stopped else b"go"
        for worker in self.held:
            self.comm.send_bytes(word, worker, TAG_DECISION)
        self.held.clear()

    def _collect_epoch_report(self, report: dict) -> None:
        """Once every worker reported an epoch, have the centre validated as it is now."""
        e = int(report["epoch"])
        reports = self.reports.setdefault(e, [])
        reports.append(report)
        if len(reports) == self.workers:
            st = np.asarray(report.get("state") or [], dtype=np.float64)
            if st.size:  # batch-norm statistics: the workers' average
                st = np.mean([np.asarray(r["state"], dtype=np.float64) for r in reports], axis=0)
            sums = np.sum([np.asarray(r["summed"], dtype=np.float64) for r in reports], axis=0)
            self.validator.todo.put((e, self.center.copy(), st, sums))
            self.pending_validation += 1

    def _take_validation(self) -> bool:
        """Record an epoch's row if its validation is done, and checkpoint it."""
        try:
            e, snap, st, result, train = self.validator.done.get_nowait()
        except queue.Empty:
            return False
        self.pending_validation -= 1
        if isinstance(result, Exception):
            raise result
        reports = self.reports.pop(e)
        if train is None:
            train = _weighted([(r["metrics"], r["n"]) for r in reports])
        row = {"epoch": e + 1, **train, **{f"val_{k}": v for k, v in result.items()}}
        self.epochs.add(row, snap, st)
        self.epochs.checkpoint(e + 1, snap, st, self.opt)
        self.epochs.report(e + 1)
        if e + 1 in self.job.decide_at:
            self._release_held()
        return True


def _merge_tracers(main: Tracer, side: Tracer) -> Tracer:
    main.events.extend(side.events)
    for k, v in side.totals.items():
        main.totals[k] = main.totals.get(k, 0.0) + v
    return main


def _weighted(parts: list[tuple[dict[str, float], int]]) -> dict[str, float]:
    total = sum(n for _, n in parts)
    names = sorted({k for m, _ in parts for k in m})
    if total <= 0:
        return {}
    return {k: sum(m.get(k, 0.0) * n for m, n in parts) / total for k in names}


# -- GEM (Hermans & Louppe 2018) ----------------------------------------------------------------------
def gem_optimizer_problem(spec: str | dict[str, Any]) -> str | None:
    """Why `gem` cannot train with the optimizer `spec` (one line), or None if it can."""
    try:
        if momentum_of(spec) > 0:
            return None
    except ValueError:
        return None  # not GEM's business: make_master_optimizer reports a bad spec
    name = (spec if isinstance(spec, str) else spec["name"]).lower()
    option = OPTIMIZERS[name].momentum_option
    has = f" with {option} 0" if option else ", which has none"
    fix = f"{{name: {name}, {option}: 0.9}}" if option else "{name: sgd, momentum: 0.9} or adam"
    return (f"mode gem needs an optimizer with momentum (sgd or rmsprop with momentum > 0, adam, adamw, adamax, "
            f"nadam), got {name}{has}: GEM paces the group by the optimizer's accumulated motion, which steps "
            f"without momentum are too noisy to give; use e.g. {fix}")


class GemWorker:
    """One GEM worker's update, with the user's optimizer as the proxy that the group must match.

    GEM (Hermans & Louppe 2018) holds the group's centre to the motion of one process: its proxy.
    Here the proxy is the user's optimizer itself, run by the worker on its own gradients, so its
    step `d` is what one process with that optimizer would do (for the optimizers GEM accepts, `d`
    carries the optimizer's momentum: sgd's `m`, Adam's `m_hat / sqrt(v_hat)`, ...). The centre
    has meanwhile moved by what the other workers sent since this worker's last pull, `others`;
    the worker sends, coordinate by coordinate, the rest of the proxy's motion:

        update = d * clip((kappa * |d| - |others|) / |d|, 0, 5)

    `others` leaves out this worker's own last update, which the paper's code counts as the
    group's motion too: that update was already matched against its proxy, and counting it again
    would slow a lone worker to half its optimizer's pace (docs/training.md). A group of one
    worker thus trains exactly as one process with `kappa` 1.
    """

    def __init__(self, spec: str | dict[str, Any], kappa: float, centre: np.ndarray) -> None:
        problem = gem_optimizer_problem(spec)
        if problem:
            raise TrialFailed(problem)
        n = centre.size
        self.proxy = make_master_optimizer(spec, n)
        self.kappa = float(kappa)
        self.step = np.empty(n, dtype=np.float32)  # the proxy's step
        self.others = np.empty(n, dtype=np.float32)  # the others' motion of the centre, then scratch
        self.stale = centre.copy()  # the centre at this worker's last pull
        self.last = np.zeros(n, dtype=np.float32)  # this worker's last update

    def update(self, weights: np.ndarray, grad: np.ndarray, centre: np.ndarray, lr: float, out: np.ndarray) -> None:
        """Write into `out` the update for `grad`, taken at `weights`, given the freshly pulled `centre`."""
        d, others = self.step, self.others
        self.proxy.learning_rate = lr
        np.copyto(d, weights)
        self.proxy.step(d, grad)  # on a copy: weight decay, if any, is part of the step
        d -= weights
        np.subtract(centre, self.stale, out=others)
        others -= self.last
        np.abs(others, out=others)
        self.stale[:] = centre
        np.abs(d, out=out)
        out *= self.kappa
        out -= others
        np.abs(d, out=others)
        others += 1e-12
        np.divide(out, others, out=out)
        np.clip(out, 0.0, 5.0, out=out)
        out *= d
        self.last[:] = out


class _Worker:
    """A group rank other than 0 in master/worker training: computes on its shard and, every
    `sync_every` batches, exchanges its contribution for the master's central weights."""

    def __init__(self, comm, job: Job) -> None:
        t = job.training
        self.comm, self.job = comm, job
        self.mode = t["mode"]
        rank, self.size = comm.Get_rank(), comm.Get_size()
        self.workers, self.me = self.size - 1, rank - 1
        self.tracer = Tracer(rank, bool(t.get("trace")))
        self.model, self.flat, spec = _build(job)
        self.n = n = self.flat.size
        self.weights = np.empty(n, dtype=np.float32)
        state = self.flat.get_state()
        self.start_epoch, restored = _broadcast_start(comm, self.weights, state)
        self.flat.set(self.weights)
        if restored and state.size:
            self.flat.set_state(state)
        self.bs = int(t["batch_size"])
        self.sync = int(t.get("sync_every", 1))
        self.sched = _schedule(t, spec, self.workers)
        self.local_opt = make_master_optimizer(spec, n) if self.mode == "easgd" else None
        self.alpha = _elastic_force(t, self.workers)
        self.gem = GemWorker(spec, float(t.get("kappa", 1.0)), self.weights) if self.mode == "gem" else None
        if restored:
            self._restore_own_part()
        self.out = np.empty(n + HEADER, dtype=np.float32)
        self.reply = np.empty(n + 1, dtype=np.float32)
        self.acc = np.zeros(n, dtype=np.float32)
        self.deadline = Deadline(t.get("time_limit"))
        self.n_train = job.source.n_train()
        self.stop = False
        self.reason = ""
        self.progress = float(self.start_epoch)  # in epochs, for the learning-rate schedule

    def run(self) -> None:
        for epoch in range(self.start_epoch, int(self.job.training["epochs"])):
            if self.stop:
                break
            mine, whole = self._train_epoch(epoch)
            if not whole:  # broken off by a stop: no row for an epoch half trained
                break
            self._report_epoch(epoch, mine)
        self.comm.send_bytes(json.dumps({"kind": "done", "reason": self.reason}).encode(), 0, TAG_REPORT)
        _gather_timing(self.comm, self.tracer, self.job, _master_worker_labels(self.size))

    def _report_epoch(self, epoch: int, mine: int) -> None:
        """This worker's metrics and batch-norm state of the epoch, for the master's row of it.

        After a decision epoch (a rung) the worker waits for the scheduler's word, relayed by the
        master once the epoch is validated: a trial paused there must not train past it."""
        held = epoch + 1 in self.job.decide_at and not self.stop
        self._save_own_part(epoch + 1)
        report = {"kind": "epoch", "epoch": epoch, "n": mine, "metrics": self.flat.metrics(),
                  "summed": self.flat.summed_metric_state().tolist(),
                  "state": self.flat.get_state().tolist(), "held": held}
        self.comm.send_bytes(json.dumps(report, allow_nan=True).encode(), 0, TAG_REPORT)
        if held:
            with self.tracer.span("wait"):
                self.stop = self.comm.recv_bytes(0, TAG_DECISION) == b"stop"

    def _own_optimizer(self):
        """The optimizer this worker keeps itself: EASGD's local one, GEM's proxy (downpour: none)."""
        return self.local_opt if self.mode == "easgd" else self.gem.proxy if self.mode == "gem" else None

    def _save_own_part(self, epochs_done: int) -> None:
        """Where the master checkpoints, this worker's own optimizer and weights beside it (written
        before its report, so before the master's checkpoint of that epoch): a trial continued from
        the checkpoint then goes on as it would have, not with the workers' optimizers afresh."""
        opt = self._own_optimizer()
        if opt is None or self.job.out_dir is None or not checkpoint_due(self.job, epochs_done):
            return
        arrays, scalars = _checkpoint.optimizer_parts(opt)
        arrays["weights"] = self.weights
        if self.gem is not None:
            arrays["gem_stale"], arrays["gem_last"] = self.gem.stale, self.gem.last
        _checkpoint.save(self.job.out_dir, arrays, {"epoch": epochs_done, "optimizer": scalars},
                         _checkpoint.worker_file(self.me))

    def _restore_own_part(self) -> None:
        """This worker's own part of the checkpoint, if it is of the epoch the master's is (a kill
        between the two, or a group of another size, leaves it behind: the optimizer starts afresh)."""
        opt = self._own_optimizer()
        found = _checkpoint.load(self.job.out_dir, _checkpoint.worker_file(self.me)) if opt is not None else None
        if found is None or found[1].get("epoch") != self.start_epoch or found[0]["weights"].size != self.n:
            return
        arrays, meta = found
        _checkpoint.load_optimizer(opt, arrays, meta.get("optimizer"))
        self.weights[:] = arrays["weights"]
        self.flat.set(self.weights)
        if self.gem is not None:
            self.gem.stale[:], self.gem.last[:] = arrays["gem_stale"], arrays["gem_last"]

    def _train_epoch(self, epoch: int) -> tuple[int, bool]:
        """The epoch's batches on this worker's shard, exchanging every `sync` of them: the shard's
        size, and whether every batch was trained (a stop, or the time limit, breaks it off)."""
        x, y = self.job.source.shard(self.me, self.workers, epoch, self.job.seed)
        mine = n_samples(x)
        self.model.reset_metrics()
        k, loss_sum, nb = 0, 0.0, 0  # batches, their summed loss and samples since the last exchange
        for lo in range(0, mine, self.bs):
            if self.deadline.passed():
                self.stop, self.reason = True, "timeout"
                return mine, False
            hi = min(lo + self.bs, mine)
            loss = self._local_step(x, y, lo, hi, epoch)
            k, loss_sum, nb = k + 1, loss_sum + loss, nb + hi - lo
            if k == self.sync or hi == mine or not math.isfinite(loss):
                self._exchange(loss_sum, k, nb)
                k, loss_sum, nb = 0, 0.0, 0
                if self.stop:
                    return mine, hi == mine
        return mine, True

    def _local_step(self, x, y, lo: int, hi: int, epoch: int) -> float:
        """The batch [lo, hi): a local step (easgd) or its gradient added to the next contribution; its loss."""
        with self.tracer.span("compute"):
            loss, grad = self.flat.grad_step(take(x, slice(lo, hi)), take(y, slice(lo, hi)))
        self.progress = epoch + lo / max(self.n_train / self.workers, 1)
        if self.mode == "easgd":
            # The elastic exchange shares every local step among the p workers' and the centre's p + 1
            # copies, so the centre moves at 1/(p + 1) of the workers' steps: local steps at (p + 1)
            # times the rate move it as one process would per sample, for any elastic_force and sync_every.
            self.local_opt.learning_rate = self.sched.rate(self.progress) * (self.workers + 1)
            with self.tracer.span("apply"):
                self.local_opt.step(self.weights, grad)
                self.flat.set(self.weights)
        else:
            self.acc += grad
        return loss

    def _exchange(self, loss_sum: float, k: int, nb: int) -> None:
        """Send this worker's contribution of `k` batches; take the master's answer."""
        n, out = self.n, self.out
        out[n], out[n + 1] = loss_sum / max(k, 1), nb
        if self.mode == "downpour":
            np.divide(self.acc, max(k, 1), out=out[:n])
        elif self.mode == "easgd":
            out[:n] = self.weights
        with self.tracer.span("send"):
            if self.mode == "gem":
                self.comm.send_bytes(b'{"kind":"pull"}', 0, TAG_REPORT)
            else:
                self.comm.Send(out, 0, TAG_UPDATE)
        with self.tracer.span("wait"):
            self.comm.Recv(self.reply, 0, TAG_WEIGHTS)
        self.stop = self.stop or self.reply[n] != 0
        with self.tracer.span("apply"):
            self._follow_centre(self.reply[:n], k)
            self.flat.set(self.weights)
        if self.mode == "gem":  # GEM's update, made against the centre just pulled
            with self.tracer.span("send"):
                self.comm.Send(out, 0, TAG_UPDATE)
        self.acc[:] = 0.0

    def _follow_centre(self, centre: np.ndarray, k: int) -> None:
        """The worker's weights after the master's answer `centre` (GEM: the update goes into `out`)."""
        if self.mode == "downpour":
            self.weights[:] = centre
        elif self.mode == "easgd":
            np.subtract(self.weights, centre, out=self.acc)  # acc as scratch: x_i -= alpha (x_i - centre)
            self.acc *= self.alpha
            self.weights[:] -= self.acc
        else:  # gem
            update = self.out[:self.n]
            np.divide(self.acc, max(k, 1), out=self.acc)
            self.gem.update(self.weights, self.acc, centre, self.sched.rate(self.progress), update)
            np.add(centre, update, out=self.weights)


def train(comm, job: Job) -> TrainOutcome | None:
    """Train with the group `comm` (None: alone); the outcome on group rank 0, None elsewhere."""
    size = comm.Get_size() if comm is not None else 1
    _refuse_fewer_samples_than_workers(job, size if size == 1 or job.training["mode"] == "allreduce" else size - 1)
    if size == 1:
        return _AllreduceRank(None, job).run()
    if job.training["mode"] == "allreduce":
        return _AllreduceRank(comm, job).run()
    if comm.Get_rank() == 0:
        return _Master(comm, job).run()
    _Worker(comm, job).run()
    return None


def _refuse_fewer_samples_than_workers(job: Job, workers: int) -> None:
    """A worker without a training sample would have no batch to step on (on every rank alike)."""
    n = job.source.n_train()
    if n < workers:
        raise DataError(f"{n} training sample{'s' * (n != 1)} for {workers} ranks that train: each needs one at "
                        "least (a smaller training.group_size, or more data)")

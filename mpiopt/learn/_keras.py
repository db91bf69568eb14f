"""Training one Keras model: the single-process path (a group of one rank)."""
from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .._errors import TrialFailed

OPTIMIZER_CLASSES = {
    "sgd": "SGD", "rmsprop": "RMSprop", "adadelta": "Adadelta", "adam": "Adam", "adamw": "AdamW",
    "adagrad": "Adagrad", "adamax": "Adamax", "nadam": "Nadam",
}


@dataclass
class TrainOutcome:
    """What training produced: per-epoch history and how it ended."""

    history: list[dict[str, float]] = field(default_factory=list)
    stopped: str | None = None  # None | "timeout" | "diverged" | "target" | "early_stopping"
    error: str | None = None


def make_optimizer(training: dict[str, Any]):
    import keras

    spec = training.get("optimizer", "adam")
    if isinstance(spec, str):
        spec = {"name": spec}
    kwargs = {k: v for k, v in spec.items() if k != "name"}
    kwargs.setdefault("learning_rate", training.get("learning_rate", 0.001))
    cls = getattr(keras.optimizers, OPTIMIZER_CLASSES[spec["name"]])
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise TrialFailed(f"training.optimizer: {spec['name']} rejects {kwargs}: {exc}") from None


def _callbacks(training: dict[str, Any], outcome: TrainOutcome, history_path: Path | None, deadline: float | None,
               on_epoch: Callable[[int, dict], None] | None):
    import keras

    class Watch(keras.callbacks.Callback):
        """Per-epoch history (written as it grows), NaN detection and the time limit, between batches."""

        def __init__(self) -> None:
            super().__init__()
            self._writer = None
            self._file = None

        def on_train_batch_end(self, batch, logs=None):
            loss = (logs or {}).get("loss")
            if loss is not None and not math.isfinite(float(loss)):
                outcome.stopped = "diverged"
                self.model.stop_training = True
            elif deadline is not None and time.monotonic() > deadline:
                outcome.stopped = "timeout"
                self.model.stop_training = True

        def on_epoch_end(self, epoch, logs=None):
            row = {"epoch": epoch + 1, **{k: float(v) for k, v in (logs or {}).items()}}
            outcome.history.append(row)
            if any(not math.isfinite(v) for k, v in row.items() if k != "epoch"):
                outcome.stopped = "diverged"
                self.model.stop_training = True
            if history_path is not None:
                if self._writer is None:
                    history_path.parent.mkdir(parents=True, exist_ok=True)
                    self._file = open(history_path, "w", newline="")
                    self._writer = csv.DictWriter(self._file, fieldnames=list(row), extrasaction="ignore")
                    self._writer.writeheader()
                self._writer.writerow(row)
                self._file.flush()
            if on_epoch is not None:
                on_epoch(epoch + 1, row)

        def on_train_end(self, logs=None):
            if self._file is not None:
                self._file.close()

    cbs = [Watch()]
    es = training.get("early_stopping")
    if es:
        cbs.append(keras.callbacks.EarlyStopping(monitor=es["monitor"], patience=es["patience"],
                                                 min_delta=es["min_delta"], mode=es["mode"],
                                                 restore_best_weights=True))
    return cbs


def fit_single(build: Callable[..., Any], model_kwargs: dict[str, Any], arrays, training: dict[str, Any], *,
               loss: Any = None, metrics: tuple = (), seed: int = 0, trial_dir: Path | None = None,
               on_epoch: Callable[[int, dict], None] | None = None) -> TrainOutcome:
    """Build and train one model in this process; the history is also written to trial_dir."""
    import keras

    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)
    (xt, yt), (xv, yv) = arrays
    model = build(**model_kwargs)
    if not isinstance(model, keras.Model):
        raise TrialFailed(f"build_model returned {type(model).__name__}, expected a keras.Model")
    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        if loss is None:
            raise TrialFailed("build_model returned an uncompiled model and objective.loss is not set")
        model.compile(optimizer=make_optimizer(training), loss=loss, metrics=list(metrics))
    outcome = TrainOutcome()
    limit = training.get("time_limit")
    deadline = time.monotonic() + float(limit) if limit else None
    history_path = trial_dir / "history.csv" if trial_dir is not None else None
    model.fit(xt, yt, validation_data=(xv, yv), epochs=int(training["epochs"]),
              batch_size=int(training["batch_size"]), verbose=int(training.get("verbose", 0)),
              callbacks=_callbacks(training, outcome, history_path, deadline, on_epoch))
    if trial_dir is not None and outcome.stopped != "diverged":
        trial_dir.mkdir(parents=True, exist_ok=True)
        model.save_weights(str(trial_dir / "best.weights.h5"))
    return outcome

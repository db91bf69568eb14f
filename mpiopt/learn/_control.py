"""Pure-Python training control: early stopping, target metric, time limit, learning-rate schedule."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any


def better_is_higher(metric: str, mode: str = "auto") -> bool:
    if mode == "max":
        return True
    if mode == "min":
        return False
    return any(k in metric for k in ("acc", "auc", "precision", "recall", "f1", "iou")) and "loss" not in metric


@dataclass
class EarlyStopping:
    """Early stopping on the master's per-epoch history, as Keras': stop after `patience` epochs in
    a row without an improvement by more than `min_delta` (0 and 1 both stop at the first)."""

    monitor: str = "val_loss"
    patience: int = 3
    min_delta: float = 0.0
    mode: str = "auto"
    best: float | None = None
    best_epoch: int = 0
    wait: int = 0

    def update(self, epoch: int, row: dict[str, float]) -> tuple[bool, bool]:
        """(improved, stop) after `epoch`'s row."""
        value = row.get(self.monitor)
        if value is None or not math.isfinite(value):
            return False, False
        higher = better_is_higher(self.monitor, self.mode)
        delta = abs(self.min_delta)
        improved = self.best is None or (value > self.best + delta if higher else value < self.best - delta)
        if improved:
            self.best, self.best_epoch, self.wait = value, epoch, 0
            return True, False
        self.wait += 1
        return False, self.wait >= self.patience

    def state(self) -> dict[str, Any]:
        return {"best": self.best, "best_epoch": self.best_epoch, "wait": self.wait}

    def load(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch, self.wait = state.get("best"), state.get("best_epoch", 0), state.get("wait", 0)


def target_reached(target: dict[str, Any] | None, row: dict[str, float]) -> bool:
    """`training.target: {monitor: val_accuracy, value: 0.9}`: stop once the metric gets there."""
    if not target:
        return False
    value = row.get(target["monitor"])
    if value is None:
        return False
    if better_is_higher(target["monitor"], target.get("mode", "auto")):
        return value >= target["value"]
    return value <= target["value"]


@dataclass
class Schedule:
    """Learning rate with the Goyal et al. (2017) scaling rule and linear warm-up.

    `scaling` multiplies the base rate by the number of workers (`linear`) or its square root
    (`sqrt`); `warmup_epochs` ramps from the base rate to the scaled one.
    """

    base: float
    workers: int = 1
    scaling: str = "none"
    warmup_epochs: float = 0.0

    @property
    def peak(self) -> float:
        if self.scaling == "linear":
            return self.base * self.workers
        if self.scaling == "sqrt":
            return self.base * math.sqrt(self.workers)
        return self.base

    def rate(self, epoch_progress: float) -> float:
        """The rate at a point of training measured in epochs (0.5 = half way through the first)."""
        if self.warmup_epochs <= 0 or epoch_progress >= self.warmup_epochs:
            return self.peak
        return self.base + (self.peak - self.base) * (epoch_progress / self.warmup_epochs)


@dataclass
class Deadline:
    seconds: float | None
    start: float = field(default_factory=time.monotonic)

    def passed(self) -> bool:
        return self.seconds is not None and time.monotonic() - self.start > self.seconds

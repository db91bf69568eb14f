"""The ask/tell interface every search algorithm implements."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

from ..space import Space, encode


class Searcher(ABC):
    """Suggests parameters; knows which suggestions are still running (pending).

    The searcher always minimises a *loss*: the coordinator passes `-objective` for a
    `maximize` figure of merit. A trial that did not complete is told with `loss=None`; the
    searcher must never treat it as a good value (see `penalty`).
    """

    def __init__(self, space: Space, *, seed: int = 0) -> None:
        self.space = space
        self.seed = seed
        self.observed: dict[int, tuple[dict[str, Any], float | None]] = {}
        self.pending: dict[int, dict[str, Any]] = {}

    # -- the interface -------------------------------------------------------------------
    def ask(self, trial: int) -> dict[str, Any]:
        """Suggest the parameters of `trial`, which becomes pending until told."""
        params = self._suggest()
        self.pending[trial] = params
        return params

    def tell(self, trial: int, params: dict[str, Any], loss: float | None) -> None:
        """Record a finished trial; `loss=None` (or NaN/inf) for one that did not complete."""
        self.pending.pop(trial, None)
        if loss is not None and not math.isfinite(loss):
            loss = None
        self.observed[trial] = (dict(params), loss)

    def add_pending(self, trial: int, params: dict[str, Any]) -> None:
        """Mark a trial as running without asking for it (a resumed search re-runs it)."""
        self.pending[trial] = dict(params)

    def pause(self, busy: bool) -> None:
        """The coordinator is (`busy=True`) or is no longer handing out trials: background work,
        if any, should keep out of its way meanwhile."""

    @abstractmethod
    def _suggest(self) -> dict[str, Any]:
        """A new point, aware of `observed` and `pending`."""

    # -- helpers for algorithms ----------------------------------------------------------
    @property
    def completed(self) -> list[tuple[dict[str, Any], float]]:
        return [(p, y) for p, y in self.observed.values() if y is not None]

    def penalty(self) -> float | None:
        """The value a non-completed trial is fitted with: the worst completed loss so far.

        Failed, diverged and timed-out trials say "this region is bad", never "good".
        """
        ys = [y for _, y in self.completed]
        return max(ys) if ys else None

    def known_points(self) -> set[tuple]:
        pts = {tuple(encode(self.space, p)) for p, _ in self.observed.values()}
        pts |= {tuple(encode(self.space, p)) for p in self.pending.values()}
        return pts

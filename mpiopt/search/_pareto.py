"""Pareto searches: ParEGO's random scalarisations (Knowles, IEEE TEC 2006) over any searcher.

Each hand-out draws weights uniformly from the simplex, scales each loss to [0, 1] over the
completed trials, and asks the inner searcher (the GP, evolution or random search) to minimise
the augmented Chebyshev scalarisation of the losses under those weights. Every weight pulls
towards another part of the front, and the Chebyshev maximum (unlike a weighted sum) reaches the
concave parts of a front too. Running trials stay pending in the inner searcher, so parallel
groups spread as they do in a single-objective search.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..pareto import scalarise
from ._base import Searcher


class ParetoSearch(Searcher):
    """Told a tuple of losses a trial (each minimised; None: the trial did not complete)."""

    def __init__(self, inner: Searcher, goals: int, *, seed: int = 0) -> None:
        super().__init__(inner.space, seed=seed)
        self.inner = inner
        self.goals = goals
        self.rng = np.random.RandomState([seed, 0x9A7E70])
        self.vectors: dict[int, tuple[float, ...]] = {}  # completed trials' losses

    def ask(self, trial: int) -> dict[str, Any]:
        self._scalarise_for_next()
        params = self.inner.ask(trial)
        self.pending[trial] = params
        return params

    def tell(self, trial: int, params: dict[str, Any], loss: tuple[float, ...] | None) -> None:  # type: ignore[override]
        self.pending.pop(trial, None)
        self.observed[trial] = (dict(params), None)
        if loss is not None and len(loss) == self.goals and all(np.isfinite(loss)):
            self.vectors[trial] = tuple(float(v) for v in loss)
        self.inner.tell(trial, params, None)  # its value is set at the next hand-out's scalarisation

    def add_pending(self, trial: int, params: dict[str, Any]) -> None:
        super().add_pending(trial, params)
        self.inner.add_pending(trial, params)

    def drop_pending(self, trial: int) -> None:
        super().drop_pending(trial)
        self.inner.drop_pending(trial)

    def set_aside(self, trial: int, params: dict[str, Any]) -> None:
        super().set_aside(trial, params)
        self.inner.set_aside(trial, params)

    def report(self) -> str | None:
        return self.inner.report()

    def close(self) -> None:
        self.inner.close()

    def _suggest(self) -> dict[str, Any]:  # required by Searcher; ask() is overridden and never calls it
        raise NotImplementedError

    def _scalarise_for_next(self) -> None:
        """Give every completed trial of the inner searcher its loss under fresh random weights."""
        if not self.vectors:
            return
        trials = list(self.vectors)
        values = scalarise(np.array([self.vectors[t] for t in trials]), self.rng.dirichlet(np.ones(self.goals)))
        for t, v in zip(trials, values, strict=True):
            self.inner.observed[t] = (self.inner.observed[t][0], float(v))

"""Random search: independent draws from the priors, never repeating a known point."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..space import Space, encode, to_skopt
from ._base import Searcher

_MAX_REDRAWS = 100


class RandomSearch(Searcher):
    def __init__(self, space: Space, *, seed: int = 0) -> None:
        super().__init__(space, seed=seed)
        from skopt.space import Space as SkSpace

        self._sk = SkSpace(to_skopt(space))
        self._rng = np.random.RandomState(seed)
        self._known: set[tuple] = set()  # every point asked, re-run or told (kept as it grows: O(1) an ask)

    def ask(self, trial: int) -> dict[str, Any]:
        params = super().ask(trial)
        self._known.add(tuple(encode(self.space, params)))
        return params

    def tell(self, trial: int, params: dict[str, Any], loss: float | None) -> None:
        super().tell(trial, params, loss)
        self._known.add(tuple(encode(self.space, params)))

    def add_pending(self, trial: int, params: dict[str, Any]) -> None:
        super().add_pending(trial, params)
        self._known.add(tuple(encode(self.space, params)))

    def _known_keys(self) -> set[tuple]:
        return self._known

    def draw(self) -> dict[str, Any]:
        """A random point that is neither observed nor pending (if the space has one left)."""
        known = self._known_keys()
        for _ in range(_MAX_REDRAWS):
            x = self._sk.rvs(n_samples=1, random_state=self._rng)[0]
            params = self.space.from_list(x)
            if tuple(encode(self.space, params)) not in known:
                return params
        return params  # a small discrete space is exhausted: repeating is the only choice

    def _suggest(self) -> dict[str, Any]:
        return self.draw()

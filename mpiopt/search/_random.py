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

    def draw(self) -> dict[str, Any]:
        """A random point that is neither observed nor pending (if the space has one left)."""
        known = self.known_points()
        for _ in range(_MAX_REDRAWS):
            x = self._sk.rvs(n_samples=1, random_state=self._rng)[0]
            params = self.space.from_list(x)
            if tuple(encode(self.space, params)) not in known:
                return params
        return params  # a small discrete space is exhausted: repeating is the only choice

    def _suggest(self) -> dict[str, Any]:
        return self.draw()

"""Random search: independent draws from the priors, never repeating a known point."""
from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ..space import Space, encode, every_point, native_value, to_skopt
from ._base import Searcher

_MAX_REDRAWS = 100


class RandomDraw:
    """Draws points from the priors, skipping known ones; one random stream, `rng`.

    Shared by `RandomSearch` (every suggestion) and `BayesianSearch` (its fallback, and the
    seeds of its tree surrogates): whoever owns it owns the stream.
    """

    def __init__(self, space: Space, rng: np.random.RandomState) -> None:
        from skopt.space import Space as SkSpace

        self.space = space
        self.rng = rng
        self._sk = SkSpace(to_skopt(space))

    def with_rng(self, rng: np.random.RandomState) -> RandomDraw:
        """The same draws on another stream (a copy of a searcher must not advance the original's)."""
        twin = copy.copy(self)
        twin.rng = rng
        return twin

    def values(self) -> dict[str, Any]:
        """A random value for every parameter, active or not (a mutation fills new branches from it)."""
        x = self._sk.rvs(n_samples=1, random_state=self.rng)[0]
        return {p.name: native_value(p, v) for p, v in zip(self.space.params, x, strict=True)}

    def draw(self, known: set[tuple]) -> dict[str, Any]:
        """A random point whose encoding is not in `known` (if the space has one left)."""
        for _ in range(_MAX_REDRAWS):
            x = self._sk.rvs(n_samples=1, random_state=self.rng)[0]
            params = self.space.from_list(x)
            if tuple(encode(self.space, params)) not in known:
                return params
        left = self._unknown_points(known)  # a nearly exhausted discrete space: draw among those left
        return left[int(self.rng.randint(len(left)))] if left else params  # exhausted: a repeat it must be

    def _unknown_points(self, known: set[tuple]) -> list[dict[str, Any]]:
        """Every point of a discrete space of at most MAX_LISTED_POINTS points that is not known ([]
        for a space with a real parameter, or a larger one)."""
        every = every_point(self.space) or []
        return [q for q in every if tuple(encode(self.space, q)) not in known]


class RandomSearch(Searcher):
    def __init__(self, space: Space, *, seed: int = 0) -> None:
        super().__init__(space, seed=seed)
        self._random = RandomDraw(space, np.random.RandomState(seed))
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

    def set_aside(self, trial: int, params: dict[str, Any]) -> None:
        super().set_aside(trial, params)
        self._known.add(tuple(encode(self.space, params)))

    def _suggest(self) -> dict[str, Any]:
        return self._random.draw(self._known)

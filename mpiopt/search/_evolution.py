"""Asynchronous regularized evolution (Real, Aggarwal, Huang and Le, AAAI 2019).

The population is the `population` most recent results, in the order they arrived: an old
result leaves it however good it was (the "regularization": a lucky trial cannot dominate for
ever). Each hand-out draws `sample` members at random, takes the best as the parent and mutates
one of its active parameters. There are no generations: a free group gets a child of whatever
population the results so far make, so no group waits for another (the asynchronous variant,
as in DeepHyper). Until the population is full, points are drawn at random.

Mutation, one active parameter: a real or an integer moves by a Gaussian step in the unit scale
of its prior (log-uniform ones in log space), a categorical takes another choice. Parameters a
mutation makes active take a random value. A child equal to a known point (completed, failed or
running) is drawn again, so parallel groups do not get copies.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any


from ..space import Categorical, Integer, Space, encode
from ._gp import UnitCoder
from ._random import RandomSearch

POPULATION = 20
SAMPLE = 5
STEP = 0.1  # the Gaussian step of a numeric mutation, in the unit scale of the parameter's prior
_MAX_TRIES = 50


class EvolutionSearch(RandomSearch):
    """Random search's draws and known points (`RandomSearch`), with children of tournaments once
    the population is full."""

    def __init__(self, space: Space, *, seed: int = 0, population: int = POPULATION, sample: int = SAMPLE) -> None:
        super().__init__(space, seed=seed)
        self.population = population
        self.sample = min(sample, population)
        self.rng = self._random.rng  # one stream for the draws, the tournaments and the mutations
        self._members: deque[int] = deque(maxlen=population)  # trials, oldest first; their losses in `observed`

    def tell(self, trial: int, params: dict[str, Any], loss: float | None) -> None:
        super().tell(trial, params, loss)
        self._members.append(trial)

    def _suggest(self) -> dict[str, Any]:
        if len(self._members) < self.population or all(self.observed[t][1] is None for t in self._members):
            return self._random.draw(self._known)
        for _ in range(_MAX_TRIES):
            child = self._mutate(self._tournament())
            if tuple(encode(self.space, child)) not in self._known:
                return child
        return self._random.draw(self._known)  # the parents' neighbourhoods are used up

    def _tournament(self) -> dict[str, Any]:
        """The best of `sample` members drawn without replacement (a failed trial is never a parent
        while a drawn one completed)."""
        picks = self.rng.choice(len(self._members), size=self.sample, replace=False)
        params, loss = min((self.observed[self._members[int(i)]] for i in picks),
                           key=lambda m: math.inf if m[1] is None else m[1])
        return params

    def _mutate(self, parent: dict[str, Any]) -> dict[str, Any]:
        """The parent with one of its parameters changed; newly active parameters drawn at random."""
        movable = [name for name in parent if _can_move(self.space[name])]
        if not movable:
            return self._random.draw(self._known)
        name = movable[int(self.rng.randint(len(movable)))]
        child = dict(parent)
        child[name] = self._moved(self.space[name], parent[name])
        return self.space.active({**self._random.values(), **child})

    def _moved(self, p, value: Any) -> Any:
        if isinstance(p, Categorical):
            others = [c for c in p.choices if not (c == value and type(c) is type(value))]
            return others[int(self.rng.randint(len(others)))]
        u = UnitCoder._scale(p, float(value)) + self.rng.normal(0.0, STEP)
        u = abs(u) if u < 0 else (2.0 - u if u > 1 else u)  # reflected at the bounds
        moved = UnitCoder._unscale(p, u)
        if isinstance(p, Integer):
            moved = int(min(p.high, max(p.low, round(moved))))
            if moved == value:  # a step too small for the grid: the nearest other integer
                moved = value + 1 if value < p.high and (value == p.low or self.rng.rand() < 0.5) else value - 1
            return moved
        return float(min(p.high, max(p.low, moved)))


def _can_move(p) -> bool:
    return not isinstance(p, Categorical) or len(p.choices) > 1


"""Search algorithms behind one ask/tell interface (`Searcher`).

A new algorithm subclasses `Searcher`, implements `_suggest`, and joins `make_searcher`.
"""
from __future__ import annotations

from ..space import Space
from ._base import Searcher
from ._bayesian import BayesianSearch
from ._random import RandomSearch

__all__ = ["Searcher", "RandomSearch", "BayesianSearch", "make_searcher"]


def make_searcher(space: Space, settings) -> Searcher:
    """The searcher of a `SearchSettings`."""
    if settings.algorithm == "random":
        return RandomSearch(space, seed=settings.seed)
    return BayesianSearch(space, seed=settings.seed, surrogate=settings.surrogate,
                          acquisition=settings.acquisition, initial_points=settings.initial_points)

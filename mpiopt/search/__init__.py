"""Search algorithms behind one ask/tell interface (`Searcher`).

A new algorithm subclasses `Searcher`, implements `_suggest`, and joins `make_searcher`.
"""
from __future__ import annotations

from dataclasses import replace

from ..space import Space
from ._base import Searcher
from ._bayesian import BayesianSearch
from ._evolution import EvolutionSearch
from ._multifidelity import BudgetModel, LadderModel, RungModel, ladder_scores, rung_offsets
from ._pareto import ParetoSearch
from ._prefetch import Prefetching, RoundPolicy
from ._random import RandomSearch

__all__ = ["Searcher", "RandomSearch", "BayesianSearch", "EvolutionSearch", "ParetoSearch", "Prefetching",
           "RoundPolicy", "RungModel", "LadderModel", "BudgetModel", "ladder_scores", "rung_offsets", "make_searcher"]


def make_searcher(space: Space, settings, *, prefetch: int = 0, goals: int = 1, own_core: bool = True) -> Searcher:
    """The searcher of a `SearchSettings`; with `prefetch` (the number of groups), suggestions are
    computed ahead in a background thread (`Prefetching`, tuned by the environment and by
    `own_core`: whether the coordinator has a core to itself). With two `goals` or more it is a
    Pareto search, asked on demand (each hand-out scalarises anew)."""
    if goals > 1:
        # gp_hedge credits each acquisition by the model's view of its past picks, which means
        # nothing once every hand-out scalarises the goals anew: ParEGO's EI instead
        inner = replace(settings, acquisition="EI") if settings.acquisition == "gp_hedge" else settings
        return ParetoSearch(make_searcher(space, inner), goals, seed=settings.seed)
    if settings.algorithm == "random":
        return RandomSearch(space, seed=settings.seed)
    if settings.algorithm == "evolution":
        return EvolutionSearch(space, seed=settings.seed, population=settings.population, sample=settings.sample)
    searcher = BayesianSearch(space, seed=settings.seed, surrogate=settings.surrogate,
                              acquisition=settings.acquisition, initial_points=settings.initial_points)
    # rounds are GP posteriors; a tree surrogate is asked on demand
    ahead = prefetch and settings.surrogate == "GP"
    return Prefetching(searcher, groups=prefetch, policy=RoundPolicy.from_env(own_core=own_core)) if ahead else searcher

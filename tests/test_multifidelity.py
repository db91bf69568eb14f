"""Models that learn from partial training: RungModel (the inner searcher fitted on one rung, the highest
with enough results: BOHB's rule) and LadderModel (one model on every trial, ordered by the highest rungs)."""
from __future__ import annotations

import math
import random
import time

import pytest

from mpiopt.config import SearchSettings
from mpiopt.search import (BayesianSearch, BudgetModel, LadderModel, Prefetching, RandomSearch, RungModel,
                           ladder_scores, make_searcher, rung_offsets)
from mpiopt.space import Real, Space, encode

SPACE = Space((Real("x", -5.0, 10.0), Real("y", 0.0, 15.0)))
TOP = 27


def branin(p, epochs: int = TOP) -> float:
    """Branin, a little worse after fewer epochs: the rungs agree on the shape, not on the values."""
    x, y = p["x"], p["y"]
    b, c, t = 5.1 / (4 * math.pi**2), 5.0 / math.pi, 1.0 / (8 * math.pi)
    value = (y - b * x**2 + c * x - 6.0) ** 2 + 10.0 * (1 - t) * math.cos(x) + 10.0
    return value + 10.0 / epochs


class Spy(RandomSearch):
    """A random searcher that records the hooks it was called with."""

    def __init__(self, space: Space, *, seed: int = 0) -> None:
        super().__init__(space, seed=seed)
        self.closed = False
        self.paused: list[bool] = []
        self.backlog = None
        self.ask_wait_s = 0.25
        self.warm = True  # what `ready` says

    def ready(self) -> bool:
        return self.warm

    def prefers_fresh(self) -> bool:
        return True

    def watch_backlog(self, results_waiting) -> None:
        self.backlog = results_waiting

    def pause(self, busy: bool) -> None:
        self.paused.append(busy)

    def report(self) -> str:
        return "spy report"

    def close(self) -> None:
        self.closed = True


def spies(enough: int = 4) -> tuple[RungModel, list[Spy]]:
    """A RungModel on Spy inner searchers, and every inner searcher it built, in order."""
    built: list[Spy] = []

    def make() -> Spy:
        built.append(Spy(SPACE, seed=len(built)))
        return built[-1]

    return RungModel(make, SPACE, top=TOP, enough=enough), built


def asked(s: RungModel, n: int) -> list[dict]:
    return [s.ask(i) for i in range(n)]


def test_the_model_starts_on_the_lowest_rung():
    s, built = spies()
    ps = asked(s, 6)
    assert s.model_rung is None and "no rung yet" in s.report()
    s.tell_rung(0, ps[0], 1, 5.0)
    assert s.model_rung == 1
    assert built[0].observed == {0: (ps[0], 5.0)}
    s.tell_rung(0, ps[0], 3, 4.0)  # one result at a higher rung is not enough
    assert s.model_rung == 1 and len(built) == 1
    assert set(built[0].pending) == set(range(1, 6))


def test_enough_results_at_a_higher_rung_switch_the_model_there():
    s, built = spies(enough=4)
    ps = asked(s, 8)
    for i, p in enumerate(ps):
        s.tell_rung(i, p, 1, 10.0 + i)
    for i in range(3):
        s.tell_rung(i, ps[i], 3, 5.0 + i)
    assert s.model_rung == 1 and len(built) == 1
    s.tell_rung(3, ps[3], 3, 8.0)
    assert s.model_rung == 3 and s.switches == 1
    assert len(built) == 2 and s.inner is built[1] and built[0].closed
    assert built[1].observed == {i: (ps[i], 5.0 + i) for i in range(3)} | {3: (ps[3], 8.0)}
    assert set(built[1].pending) == set(range(4, 8))
    # the wrapper's own view: nothing was finally told yet
    assert s.observed == {} and set(s.pending) == set(range(8))
    # a rung-3 result after the switch reaches the new model at once; a repeat does not
    s.tell_rung(4, ps[4], 3, 7.0)
    s.tell_rung(4, ps[4], 3, 1.0)
    assert built[1].observed[4] == (ps[4], 7.0) and s.results[3][4] == (ps[4], 7.0)
    assert 4 not in built[1].pending


def test_a_completed_trial_adds_a_top_rung_result_unless_it_has_one():
    s, built = spies()
    ps = asked(s, 3)
    s.tell(0, ps[0], 0.5)
    assert s.results[TOP] == {0: (ps[0], 0.5)}
    assert s.observed == {0: (ps[0], 0.5)} and set(s.pending) == {1, 2}
    s.tell_rung(1, ps[1], TOP, 0.7)
    s.tell(1, ps[1], 0.6)  # the rung's report came first and wins
    assert s.results[TOP][1] == (ps[1], 0.7)


def test_a_completed_trial_that_stopped_before_the_model_rung_leaves_the_model_pending():
    """Early stopping ended it before rung 3: its final loss stands there (more epochs would not change it)."""
    s, built = spies(enough=2)
    ps = asked(s, 4)
    for i, p in enumerate(ps):
        s.tell_rung(i, p, 1, 10.0 + i)
    s.tell_rung(0, ps[0], 3, 5.0)
    s.tell_rung(1, ps[1], 3, 6.0)
    assert s.model_rung == 3
    s.tell(2, ps[2], 9.0)  # stopped by itself after rung 1
    assert built[-1].observed[2] == (ps[2], 9.0) and 2 not in built[-1].pending


def test_a_failure_without_a_result_at_the_model_rung_reaches_the_model_as_none():
    s, built = spies(enough=2)
    ps = asked(s, 5)
    s.tell(0, ps[0], None)  # before any result: no rung has it
    assert built[0].observed == {0: (ps[0], None)}
    s.tell_rung(1, ps[1], 1, 3.0)
    s.tell(1, ps[1], math.nan)  # it has its rung-1 result: the model saw it already
    assert built[0].observed[1] == (ps[1], 3.0)
    s.tell(2, ps[2], None)
    assert built[0].observed[2] == (ps[2], None)
    # on a switch, the failures are told again: their points stay excluded
    for i in (3, 4):
        s.tell_rung(i, ps[i], 3, float(i))
    assert s.model_rung == 3
    assert built[1].observed == {0: (ps[0], None), 1: (ps[1], None), 2: (ps[2], None),
                                 3: (ps[3], 3.0), 4: (ps[4], 4.0)}
    assert built[1].pending == {}


def test_the_model_never_switches_down():
    s, built = spies(enough=2)
    ps = asked(s, 8)
    s.tell_rung(0, ps[0], 1, 9.0)
    s.tell_rung(0, ps[0], 9, 1.0)
    s.tell_rung(1, ps[1], 9, 2.0)
    assert s.model_rung == 9 and len(built) == 2
    for i in range(2, 8):  # rungs 1 and 3 fill up: the model stays on 9
        s.tell_rung(i, ps[i], 1, 9.0)
        s.tell_rung(i, ps[i], 3, 5.0)
    assert s.model_rung == 9 and len(built) == 2
    assert set(built[1].observed) == {0, 1}
    s.tell(2, ps[2], 0.5)  # completed: it stands at rung 9 too, and the top rung has no `enough` yet
    assert s.model_rung == 9 and built[1].observed[2] == (ps[2], 0.5)
    s.tell(3, ps[3], 0.4)
    assert s.model_rung == TOP and len(built) == 3
    assert set(built[2].observed) == {2, 3} and set(built[2].pending) == {0, 1, 4, 5, 6, 7}


def test_close_closes_the_inner_searcher_and_starts_no_new_one():
    s, built = spies(enough=1)
    ps = asked(s, 2)
    s.tell_rung(0, ps[0], 1, 1.0)
    s.close()
    assert built[0].closed
    s.tell_rung(0, ps[0], 3, 1.0)
    assert len(built) == 1 and s.results[3]


def test_the_hooks_forward_to_the_current_inner_searcher():
    s, built = spies(enough=1)
    backlog = lambda: False  # noqa: E731
    s.watch_backlog(backlog)
    s.pause(True)
    ps = asked(s, 2)
    assert s.ask_wait_s == 0.25 and s.prefers_fresh()
    s.tell_rung(0, ps[0], 1, 1.0)
    assert s.report() == "model on rung 1 (1 results, 0 switches); spy report"
    s.tell_rung(0, ps[0], 3, 1.0)  # a switch: the new model gets the hooks again
    assert built[1].backlog is backlog and built[1].paused == [True]
    s.pause(False)
    assert built[1].paused == [True, False] and built[0].paused == [True]
    assert s.report() == ("model on rung 3 (1 results, 1 switch); since it serves, spy report; 2 handed out "
                          "before, by the models on lower rungs")


def test_a_bayesian_model_keeps_suggesting_valid_points_after_a_switch():
    s = RungModel(lambda: BayesianSearch(SPACE, seed=0, initial_points=3, acquisition="EI"), SPACE,
                  top=TOP, enough=4)
    trial = 0
    for _ in range(3):  # rounds of four parallel groups: every trial reports rungs 1 and 3
        ps = [s.ask(trial + k) for k in range(4)]
        for k, p in enumerate(ps):
            s.tell_rung(trial + k, p, 1, branin(p, 1))
        for k, p in enumerate(ps):
            s.tell_rung(trial + k, p, 3, branin(p, 3))
            s.tell(trial + k, p, None)  # stopped by the scheduler at rung 3
        trial += 4
    assert s.model_rung == 3 and isinstance(s.inner, BayesianSearch)
    assert len(s.inner.completed) == 12 and len(s.observed) == 12
    running = [s.ask(trial + k) for k in range(4)]
    keys = {(p["x"], p["y"]) for p in running}
    assert len(keys) == 4 and not keys & {(p["x"], p["y"]) for p, _ in s.observed.values()}
    for p in running:
        assert -5.0 <= p["x"] <= 10.0 and 0.0 <= p["y"] <= 15.0


def test_a_switch_stops_the_prefetching_thread_of_the_old_model():
    settings = SearchSettings(algorithm="bayesian", surrogate="GP", acquisition="EI", initial_points=2, trials=20,
                              seed=0, target=None)
    s = RungModel(lambda: make_searcher(SPACE, settings, prefetch=2), SPACE, top=TOP, enough=2)
    old = s.inner
    assert isinstance(old, Prefetching)
    try:
        ps = asked(s, 4)
        for i, p in enumerate(ps):
            s.tell_rung(i, p, 1, branin(p, 1))
        assert old._thread is not None and old._thread.is_alive()
        s.tell_rung(0, ps[0], 3, branin(ps[0], 3))
        s.tell_rung(1, ps[1], 3, branin(ps[1], 3))
        new = s.staged
        assert isinstance(new, Prefetching) and s.staged_rung == 3
        assert set(new.observed) == {0, 1} and set(new.pending) == {2, 3}
        deadline = time.monotonic() + 20
        while not new.ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        p = s.ask(4)  # the new model, ready now, serves; the old one's thread is stopped
        assert s.model_rung == 3 and s.inner is new and s.staged is None and s.switches == 1
        assert not old._thread.is_alive()
        assert -5.0 <= p["x"] <= 10.0 and 0.0 <= p["y"] <= 15.0
    finally:
        s.close()
    new = s.inner
    assert new._thread is None or not new._thread.is_alive()


def test_the_old_model_serves_until_the_one_on_the_higher_rung_is_ready():
    s, built = spies(enough=2)
    ps = asked(s, 4)
    for i, p in enumerate(ps):
        s.tell_rung(i, p, 1, 10.0 + i)
    s.make_inner = lambda: _cold(built)
    s.tell_rung(0, ps[0], 3, 5.0)
    s.tell_rung(1, ps[1], 3, 6.0)
    old, new = built
    assert s.inner is old and s.staged is new and s.model_rung == 1 and s.staged_rung == 3 and s.switches == 0
    s.tell_rung(2, ps[2], 3, 7.0)  # both are told, each at its own rung
    assert new.observed[2] == (ps[2], 7.0) and old.observed[2] == (ps[2], 12.0)
    p4 = s.ask(4)  # the old model answers, the new one holds the trial as pending
    assert old.pending[4] == p4 and new.pending[4] == p4
    s.pause(True)
    s.drop_pending(3)
    assert old.paused[-1] is new.paused[-1] is True and 3 not in old.pending and 3 not in new.pending
    new.warm = True
    s.ask(5)
    assert s.inner is new and s.staged is None and s.model_rung == 3 and s.switches == 1 and old.closed
    assert 5 in new.pending and 5 not in old.pending


def _cold(built: list[Spy]) -> Spy:
    """A Spy whose model is not ready yet, kept in `built`."""
    built.append(Spy(SPACE, seed=len(built)))
    built[-1].warm = False
    return built[-1]


@pytest.mark.parametrize("seed", range(8))
def test_the_model_told_one_result_at_a_time_equals_one_built_from_all_of_them(seed):
    """Random ASHA-like histories (failures, early completions, pruned trials): after every
    result the model sits on the highest rung with `enough` finite results, and its inner
    searcher holds what one built on that rung from everything so far would hold."""
    rng = random.Random(seed)
    s, _ = spies(enough=3)
    rungs, reached, ended, first = (1, 3, 9, TOP), {}, set(), None
    for step in range(120):
        going = [t for t, k in reached.items() if k < len(rungs) and t not in ended]
        if not going or rng.random() < 0.4:
            trial = len(reached)
            reached[trial] = 0
            params = s.ask(trial)
        else:
            trial = rng.choice(going)
            params = s.pending[trial]
        rung, draw = rungs[reached[trial]], rng.random()
        loss = rng.choice([None, math.nan]) if draw < 0.1 else float(rng.randint(0, 30))
        if rung == TOP or draw > 0.9:  # it completes (early, below the top), or it is pruned
            s.tell(trial, params, loss if rung == TOP or draw > 0.94 else None)
            ended.add(trial)
        else:
            s.tell_rung(trial, params, rung, loss)
            reached[trial] += 1
        first = first or min(s.results, default=None)  # the first result's rung: the model starts there
        finite = {r: sum(v is not None for _, v in s.rung_results(r).values()) for r in s.results}
        due = [r for r in finite if finite[r] >= 3] + ([first] if first is not None else [])
        assert s.model_rung == max(due, default=None), f"step {step}"  # never below its first rung
        if s.model_rung is not None:
            fresh = s._build(s.model_rung)[0]
            assert s.inner.observed == fresh.observed and set(s.inner.pending) == set(fresh.pending), f"step {step}"


@pytest.mark.parametrize("top, enough", [(0, 1), (9, 0)])
def test_nonsense_settings_are_refused(top, enough):
    with pytest.raises(ValueError):
        RungModel(lambda: RandomSearch(SPACE), SPACE, top=top, enough=enough)


def test_a_paused_trial_is_no_fantasy_of_any_model_until_it_runs_again():
    model, built = spies(enough=2)
    for n in range(4):  # two results at rung 3 move the model there
        params = model.ask(n)
        model.tell_rung(n, params, 1, branin(params, 1))
        if n < 2:
            model.tell_rung(n, params, 3, branin(params, 3))
    params = model.ask(4)
    model.tell_rung(4, params, 1, branin(params, 1))
    assert model.model_rung == 3 and {2, 3, 4} <= set(built[-1].pending)
    for n in (2, 3, 4):  # paused at rung 1
        model.drop_pending(n)
    assert not {2, 3, 4} & set(built[-1].pending) and not {2, 3, 4} & set(model.pending)
    model.add_pending(4, params)  # promoted: it trains towards rung 3 again
    assert 4 in built[-1].pending
    for n in range(5, 7):  # a switch to rung 9 builds a model without the paused ones
        p = model.ask(n)
        for epochs in (1, 3, 9):
            model.tell_rung(n, p, epochs, branin(p, epochs))
    assert model.model_rung == 9 and set(built[-1].pending) == {0, 1, 4}  # 0 and 1 still train


@pytest.mark.parametrize("inner, prefetch", [("random", 0), ("bayesian", 0), ("bayesian", 2)])
def test_no_model_proposes_the_point_of_a_paused_trial_again(inner, prefetch):
    # a model built on a switch, from the same seed, replayed its stream (a random draw, the
    # Sobol design) past points it did not know: the paused trials', handed out again
    settings = SearchSettings(algorithm=inner, surrogate="GP", acquisition="gp_hedge", initial_points=8,
                              trials=40, seed=0, target=None)
    model = RungModel(lambda: make_searcher(SPACE, settings, prefetch=prefetch), SPACE, top=TOP, enough=2)
    handed = {n: model.ask(n) for n in range(6)}
    for n, params in handed.items():
        model.tell_rung(n, params, 1, branin(params, 1))
    for n in (2, 3, 4, 5):  # paused at rung 1; 0 and 1 go on and move the model to rung 3
        model.drop_pending(n)
    for n in (0, 1):
        model.tell_rung(n, handed[n], 3, branin(handed[n], 3))
    assert model.model_rung == 3 and model.switches == 1
    later = [model.ask(n) for n in range(6, 12)]
    keys = [tuple(encode(SPACE, p)) for p in [*handed.values(), *later]]
    assert len(set(keys)) == len(keys)
    model.close()


def test_a_point_set_aside_is_known_to_a_searcher_but_neither_fitted_nor_pending():
    searcher = BayesianSearch(SPACE, initial_points=3, seed=0)
    params = searcher.ask(0)
    searcher.drop_pending(0)  # paused
    assert searcher.aside == {0: params} and not searcher.pending and not searcher.observed
    assert tuple(encode(SPACE, params)) in searcher.known_points() and searcher.handed_out() == 1
    other = BayesianSearch(SPACE, initial_points=3, seed=0)  # a resumed search's, told of it
    other.set_aside(0, params)
    assert other.ask(1) != params  # the design goes on past it
    searcher.add_pending(0, params)  # promoted
    assert searcher.pending == {0: params} and not searcher.aside
    searcher.drop_pending(0)
    searcher.tell(0, params, 1.0)
    assert not searcher.aside and searcher.observed[0] == (params, 1.0)


def test_prefetching_drops_a_paused_trial_from_its_pending_points():
    settings = SearchSettings(algorithm="bayesian", surrogate="GP", acquisition="gp_hedge", initial_points=2,
                              trials=10, seed=0, target=None)
    searcher = make_searcher(SPACE, settings, prefetch=2)
    try:
        params = searcher.ask(0)
        assert 0 in searcher.pending
        searcher.drop_pending(0)
        assert 0 not in searcher.pending and 0 not in searcher.inner.pending
        searcher.add_pending(0, params)
        assert 0 in searcher.inner.pending
    finally:
        searcher.close()


# -- LadderModel: one model on every trial, ordered by the highest rungs ------------------------
def test_promoted_trials_swap_their_scores_in_the_order_of_the_higher_rung():
    # 0 and 1 were promoted from rung 1; at rung 3 trial 0 is the better: it takes 1's score
    scores = ladder_scores({1: {0: 5.0, 1: 3.0, 2: 6.0, 3: 9.0}, 3: {0: 1.0, 1: 2.0}})
    assert scores == {0: 3.0, 1: 5.0, 2: 6.0, 3: 9.0}
    # a third rung orders within its own members only
    scores = ladder_scores({1: {0: 5.0, 1: 3.0, 2: 6.0, 3: 9.0}, 3: {0: 1.0, 1: 2.0, 2: 1.5}, 9: {1: 0.1, 2: 0.2}})
    assert scores == {0: 3.0, 1: 5.0, 2: 6.0, 3: 9.0}
    scores = ladder_scores({1: {0: 5.0, 1: 3.0, 2: 6.0}, 3: {0: 1.0, 1: 2.0, 2: 1.5}, 9: {2: 0.1, 1: 0.2}})
    assert scores == {0: 3.0, 2: 5.0, 1: 6.0}


def test_a_trial_without_a_lowest_rung_result_joins_at_its_first_result():
    assert ladder_scores({1: {0: 5.0}, TOP: {0: 1.0, 1: 0.5}}) == {0: 5.0, 1: 0.5}
    assert ladder_scores({}) == {}


def ladder() -> tuple[LadderModel, Spy]:
    inner = Spy(SPACE, seed=0)
    return LadderModel(inner, SPACE, top=TOP), inner


def test_the_model_is_told_every_trial_and_told_again_when_its_score_changes():
    model, inner = ladder()
    ps = asked(model, 3)
    assert set(inner.pending) == {0, 1, 2}
    for n, loss in enumerate((5.0, 3.0, 6.0)):
        model.tell_rung(n, ps[n], 1, loss)
    assert {n: loss for n, (_, loss) in inner.observed.items()} == {0: 5.0, 1: 3.0, 2: 6.0}
    assert not inner.pending
    model.tell_rung(1, ps[1], 3, 2.0)
    model.tell_rung(0, ps[0], 3, 1.0)  # better than 1 at rung 3: the two swap
    assert {n: loss for n, (_, loss) in inner.observed.items()} == {0: 3.0, 1: 5.0, 2: 6.0}
    assert inner.observed[0][0] == ps[0] and inner.observed[1][0] == ps[1]
    model.tell_rung(0, ps[0], 3, 9.0)  # a repeat is no news
    assert inner.observed[0][1] == 3.0


def test_paused_and_promoted_trials_are_observations_not_fantasies():
    model, inner = ladder()
    ps = asked(model, 2)
    model.tell_rung(0, ps[0], 1, 5.0)
    model.drop_pending(0)  # paused at rung 1
    model.add_pending(0, ps[0])  # promoted
    assert 0 in model.pending and 0 not in inner.pending and inner.observed[0][1] == 5.0
    model.drop_pending(1)  # a trial without a result is a fantasy until it pauses
    assert 1 not in inner.pending
    model.add_pending(1, ps[1])
    assert 1 in inner.pending


def test_a_trial_ends_as_a_failure_only_without_any_result():
    model, inner = ladder()
    ps = asked(model, 3)
    model.tell_rung(0, ps[0], 1, 5.0)
    model.tell(0, ps[0], None)  # crashed after rung 1: keeps its score
    model.tell(1, ps[1], None)  # crashed before any rung
    assert TOP not in model.results  # a failure is no result at the top rung
    model.tell(2, ps[2], 4.0)  # completed (stopped early, before rung 1): joins at its final loss
    assert {n: loss for n, (_, loss) in inner.observed.items()} == {0: 5.0, 1: None, 2: 4.0}
    assert model.results[TOP] == {2: (ps[2], 4.0)}


def test_the_ladder_hooks_forward_to_the_inner_searcher():
    model, inner = ladder()
    backlog = lambda: False  # noqa: E731
    model.watch_backlog(backlog)
    model.pause(True)
    ps = asked(model, 1)
    assert model.ask_wait_s == 0.25 and model.prefers_fresh() and model.ready()
    assert inner.backlog is backlog and inner.paused == [True]
    model.tell_rung(0, ps[0], 1, 1.0)
    assert model.report() == "model on all rungs (1 at rung 1); spy report"
    model.close()
    assert inner.closed


def test_a_prefetching_model_on_the_ladder_suggests_valid_new_points():
    settings = SearchSettings(algorithm="bayesian", surrogate="GP", acquisition="gp_hedge", initial_points=3,
                              trials=40, seed=0, target=None)
    model = LadderModel(make_searcher(SPACE, settings, prefetch=4), SPACE, top=TOP)
    try:
        seen = set()
        for n in range(30):  # every trial reports rung 1; every third goes on to rung 3
            p = model.ask(n)
            assert -5.0 <= p["x"] <= 10.0 and 0.0 <= p["y"] <= 15.0 and (p["x"], p["y"]) not in seen
            seen.add((p["x"], p["y"]))
            model.tell_rung(n, p, 1, branin(p, 1))
            if n % 3 == 0:
                model.tell_rung(n, p, 3, branin(p, 3))
        assert len(model.inner.inner.observed) == 30 and model.inner.error is None
    finally:
        model.close()


@pytest.mark.parametrize("seed", range(20))
def test_the_ladder_kept_one_result_at_a_time_equals_the_ladder_scored_at_once(seed):
    """Random ASHA-like histories (ties included, some trials completing early): after every
    result the model's scores are `ladder_scores` of everything so far."""
    rng = random.Random(seed)
    model, inner = ladder()
    rungs = (1, 3, 9, TOP)
    reached = {}  # trial -> the index of its next rung
    results: dict[int, dict[int, float]] = {}
    for step in range(150):
        going = [t for t, k in reached.items() if k < len(rungs)]
        if not going or rng.random() < 0.4:
            trial = len(reached)
            reached[trial] = 0
            model.ask(trial)
        else:
            trial = rng.choice(going)
        rung = rungs[reached[trial]]
        loss = float(rng.randint(0, 30))  # few distinct values: ties
        if rung != TOP and rng.random() < 0.05:  # it completes now, early
            model.tell(trial, {"x": 0.0, "y": 0.0}, loss)
            results.setdefault(TOP, {})[trial] = loss
            reached[trial] = len(rungs)
        else:
            model.tell_rung(trial, {"x": 0.0, "y": 0.0}, rung, loss)
            results.setdefault(rung, {})[trial] = loss
            reached[trial] += 1
        expected = ladder_scores(results)
        assert model.scores == expected, f"step {step}"
        assert {t: v for t, (_, v) in inner.observed.items()} == expected


# -- BudgetModel: one GP on (configuration, log epochs) ----------------------------------------------
def test_rung_offsets_chain_the_mean_change_of_the_trials_at_both_rungs():
    results = {1: {0: 10.0, 1: 12.0, 2: 20.0}, 3: {0: 6.0, 1: 10.0}, 9: {1: 9.0}, 27: {5: 1.0}}
    # rung 3: trials 0 and 1 fell by 4 and 2; rung 9: trial 1 by 1 more; rung 27: no trial at both
    assert rung_offsets(results) == {1: 0.0, 3: -3.0, 9: -4.0, 27: -4.0}


def budget_model(**kw) -> BudgetModel:
    return BudgetModel(SPACE, top=TOP, seed=0, initial_points=4, **kw)


def test_the_budget_model_suggests_design_points_until_enough_trials_have_results():
    model = budget_model()
    points = [model.ask(n) for n in range(6)]  # no results: all from the design, all different
    assert len({(p["x"], p["y"]) for p in points}) == 6
    for n, p in enumerate(points[:3]):
        model.tell_rung(n, p, 1, branin(p, 1))
    assert model.report() == "one GP on configuration and epochs (3 at rung 1)"
    assert model._hyper is None  # three trials with results: still no fit
    model.tell_rung(3, points[3], 1, branin(points[3], 1))
    model.ask(6)
    assert model._hyper is not None


def test_the_budget_model_finds_branin_s_minima_from_rung_results():
    """Every trial reports rung 1; one in three goes on to rung 9 and completes: the suggestions
    close in on Branin's minima (0.398) far better than the design points did."""
    model = budget_model()
    values = []
    for n in range(40):
        p = model.ask(n)
        model.tell_rung(n, p, 1, branin(p, 1))
        if n % 3 == 0:
            model.tell_rung(n, p, 9, branin(p, 9))
            model.tell(n, p, branin(p))
        else:
            model.drop_pending(n)  # paused at rung 1
        values.append(branin(p))
    assert min(values[:4]) > 5.0 and min(values[20:]) < 1.0  # 20 random points: 9 searches in 100


def test_the_budget_model_gives_pending_trials_different_points_and_never_repeats_one():
    model = budget_model()
    for n in range(8):
        p = model.ask(n)
        model.tell_rung(n, p, 1, branin(p, 1))
        model.drop_pending(n)
    running = [model.ask(n) for n in range(8, 16)]  # eight groups asking before any news
    keys = {(p["x"], p["y"]) for p in running} | {(p["x"], p["y"]) for p, _ in model.completed}
    assert len({(p["x"], p["y"]) for p in running}) == 8
    seen = {tuple(encode(SPACE, p)) for p in running}
    assert len(seen) == 8 and len(keys) == 8


def test_a_trial_that_ends_without_a_result_stands_at_the_lowest_rung_as_the_worst():
    model = budget_model()
    points = [model.ask(n) for n in range(5)]
    for n, p in enumerate(points[:4]):
        model.tell_rung(n, p, 3, float(n))
    model.tell(4, points[4], None)
    model.tell_rung(0, points[0], 9, -2.0)
    X, y = model._training_data()
    # rung 3's four results, trial 0 at rung 9 (2 lower than at rung 3: the offset), the failure
    assert X.shape == (6, 3) and list(y) == [0.0, 1.0, 2.0, 3.0, 0.0, 3.0]
    assert list(X[:, 2]) == pytest.approx([1 / 3] * 4 + [2 / 3, 1 / 3])
    assert model.results == {3: {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0}, 9: {0: -2.0}}


@pytest.mark.parametrize(("top", "initial_points", "refit_every"), [(1, 5, 4), (27, 0, 4), (27, 5, 0)])
def test_a_budget_model_with_nonsense_settings_is_refused(top, initial_points, refit_every):
    with pytest.raises(ValueError, match="BudgetModel needs"):
        BudgetModel(SPACE, top=top, initial_points=initial_points, refit_every=refit_every)

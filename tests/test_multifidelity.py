"""RungModel: the inner searcher is fitted on one rung, the highest with enough results (BOHB's rule)."""
from __future__ import annotations

import math
import time

import pytest

from mpiopt.config import SearchSettings
from mpiopt.search import BayesianSearch, Prefetching, RandomSearch, RungModel, make_searcher
from mpiopt.space import Real, Space

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
    assert s.report().startswith("model on rung 3 (1 results, 1 switch); ")


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

"""The ask/tell core: pending-aware, never repeating a point, never treating a failure as good."""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
import time

import numpy as np
import pytest

from mpiopt.search import BayesianSearch, Prefetching, RandomSearch, RoundPolicy
from mpiopt.space import Categorical, Integer, Real, Space

SPACE = Space((Real("x", -5.0, 10.0), Real("y", 0.0, 15.0)))
MIXED = Space((Real("lr", 1e-4, 1e-1, "log-uniform"), Integer("units", 16, 512, "log-uniform"),
               Categorical("act", ("relu", "tanh")), Categorical("flag", (True, False)),
               Categorical("bs", (32, 64))))


def branin(p):
    x, y = p["x"], p["y"]
    b, c, t = 5.1 / (4 * math.pi**2), 5.0 / math.pi, 1.0 / (8 * math.pi)
    return (y - b * x**2 + c * x - 6.0) ** 2 + 10.0 * (1 - t) * math.cos(x) + 10.0


def test_random_values_are_native_and_in_range():
    s = RandomSearch(MIXED, seed=3)
    for i in range(30):
        p = s.ask(i)
        assert type(p["lr"]) is float and 1e-4 <= p["lr"] <= 1e-1
        assert type(p["units"]) is int and 16 <= p["units"] <= 512
        assert p["act"] in ("relu", "tanh") and type(p["flag"]) is bool and type(p["bs"]) is int
        s.tell(i, p, float(i))


def test_same_seed_same_points():
    a, b = RandomSearch(SPACE, seed=7), RandomSearch(SPACE, seed=7)
    assert [a.ask(i) for i in range(5)] == [b.ask(i) for i in range(5)]


@pytest.mark.parametrize("surrogate", ["GP", "RF", "ET", "GBRT"])
def test_parallel_asks_never_repeat_a_point(surrogate):
    """Many groups busy at once: each gets a different point, before and after the initial design."""
    s = BayesianSearch(SPACE, seed=0, surrogate=surrogate, acquisition="EI", initial_points=4)
    for i in range(4):
        p = s.ask(i)
        s.tell(i, p, branin(p))
    pending = [s.ask(i) for i in range(4, 10)]  # six groups busy at once
    keys = {(p["x"], p["y"]) for p in pending}
    assert len(keys) == 6
    told = {(p["x"], p["y"]) for p, _ in s.observed.values()}
    assert not keys & told
    assert set(s.pending) == set(range(4, 10))


def test_small_discrete_space_has_no_duplicates_until_exhausted():
    space = Space((Integer("a", 0, 2), Categorical("b", ("u", "v"))))
    s = BayesianSearch(space, seed=1, initial_points=2, surrogate="RF", acquisition="EI")
    seen = []
    for i in range(6):  # exactly 6 distinct points exist
        p = s.ask(i)
        seen.append((p["a"], p["b"]))
    assert len(set(seen)) == 6


@pytest.mark.parametrize("seed", range(3))
def test_the_gp_asked_one_at_a_time_never_repeats_a_point_of_a_small_discrete_space(seed):
    # the best of the space on its edge: every candidate the acquisition ranks high rounds to it
    space = Space((Integer("units", 16, 128), Categorical("activation", ("relu", "tanh"))))
    s = BayesianSearch(space, initial_points=4, seed=seed)
    seen = []
    for n in range(30):
        p = s.ask(n)
        seen.append((p["units"], p["activation"]))
        s.tell(n, p, -p["units"] / 128 - 0.1 * (p["activation"] == "relu"))
    assert len(set(seen)) == len(seen)


@pytest.mark.parametrize("surrogate", ["RF", "ET", "GBRT"])
def test_the_tree_surrogates_never_repeat_a_point_of_a_conditional_space(surrogate):
    # an inactive parameter is left out of a known point: the check filled it in, and never matched
    from mpiopt.space import encode, parse_space

    space = parse_space({"opt": {"type": "categorical", "choices": ["sgd", "adam"]},
                         "mom": {"type": "real", "low": 0.0, "high": 0.99, "when": {"opt": "sgd"}},
                         "layers": {"type": "integer", "low": 1, "high": 3}}, source="x", did_you_mean=lambda *a: "")
    s = BayesianSearch(space, seed=0, surrogate=surrogate, acquisition="EI", initial_points=5)
    seen = []
    for n in range(20):
        p = s.ask(n)
        seen.append(tuple(encode(space, p)))
        s.tell(n, p, (0.5 if p["opt"] == "adam" else abs(p["mom"] - 0.9)) + 0.1 * p["layers"])
    assert len(set(seen)) == len(seen)


def test_in_a_discrete_space_the_gp_hands_out_its_best_unknown_candidate_not_a_fallback():
    # most candidates snap onto points already tried: the 64 the acquisition ranks first can all be
    from mpiopt.search import _gp
    from mpiopt.space import encode

    space = Space((Integer("units", 1, 64), Categorical("act", ("relu", "tanh", "elu"))))
    s = BayesianSearch(space, seed=0, initial_points=5, acquisition="LCB")
    for n in range(25):
        p = s.ask(n)
        s.tell(n, p, (p["units"] - 40) ** 2 / 100 + ("relu", "tanh", "elu").index(p["act"]))
    known = s.known_points()
    post, (_, _, best, _, _), _, unit_known, _ = s._posterior(1)
    picks = _gp.select(post, 4, ["LCB"] * 4, best, rule=s.batch_rule, coder=s.coder, polish_picks=0,
                       exclude=unit_known)
    assert all(tuple(encode(space, s.coder.decode(x))) not in known for x in picks)
    round_ = s.prepare_round(polish=0)
    handed = [round_.hand_out(known, polish_s=0.0) for _ in range(4)]
    assert all(p is not None and tuple(encode(space, p)) not in known for p in handed), handed


def test_the_gp_tells_true_from_1_among_a_categoricals_choices():
    from mpiopt.search._gp import UnitCoder

    coder = UnitCoder(Space((Categorical("c", (1, True, 0, False)),)))
    assert [int(np.argmax(coder.encode({"c": v}))) for v in (1, True, 0, False)] == [0, 1, 2, 3]


@pytest.mark.parametrize("seed", range(3))
def test_random_search_tries_every_point_of_a_discrete_space_before_repeating_one(seed):
    # a hundred redraws rarely find the last few points left: they are listed instead
    space = Space((Integer("a", 1, 100),))
    s = RandomSearch(space, seed=seed)
    seen = [s.ask(n)["a"] for n in range(100)]
    assert sorted(seen) == list(range(1, 101))


def test_bayesian_beats_random_on_branin():
    def best_of(searcher, n=30):
        best = math.inf
        for i in range(n):
            p = searcher.ask(i)
            v = branin(p)
            best = min(best, v)
            searcher.tell(i, p, v)
        return best

    bo = best_of(BayesianSearch(SPACE, seed=0, initial_points=10, surrogate="GP", acquisition="EI"))
    rnd = best_of(RandomSearch(SPACE, seed=0))
    assert bo < 1.0  # the minimum is 0.397887
    assert bo < rnd


def test_failures_are_penalised_never_good():
    s = BayesianSearch(SPACE, seed=0, initial_points=3, acquisition="EI")
    for i in range(3):
        p = s.ask(i)
        s.tell(i, p, float(i + 1))
    bad = s.ask(3)
    s.tell(3, bad, float("nan"))  # diverged
    s.tell(4, {"x": 1.0, "y": 1.0}, None)  # failed
    assert s.observed[3][1] is None and s.observed[4][1] is None
    _, y, n_done, _ = s._data()
    assert n_done == 3 and y.tolist() == [1.0, 2.0, 3.0, 3.0, 3.0]  # fitted at the worst completed value, never better
    assert len(s.completed) == 3
    nxt = s.ask(5)
    assert (nxt["x"], nxt["y"]) not in {(bad["x"], bad["y"]), (1.0, 1.0)}


def test_resumed_pending_points_are_avoided():
    s = RandomSearch(Space((Integer("a", 0, 3),)), seed=0)
    for i in range(3):
        s.add_pending(i, {"a": i})
    assert s.ask(3) == {"a": 3}


def test_prefetching_serves_ready_points_that_stay_apart():
    import time as _time

    inner = BayesianSearch(SPACE, seed=0, initial_points=3, acquisition="EI")
    s = Prefetching(inner, groups=6)
    try:
        for i in range(3):
            p = s.ask(i)
            s.tell(i, p, branin(p))
        assert s.counts["design"] == 3
        deadline = _time.monotonic() + 30
        while s.round is None and _time.monotonic() < deadline:  # the thread prepares a round
            _time.sleep(0.01)
        assert s.round is not None and s.error is None
        served = [s.ask(i) for i in range(3, 9)]  # six groups asking at once
        assert s.counts["model"] >= 1 and s.counts["model"] + s.counts["fallback"] == 6
        keys = {(p["x"], p["y"]) for p in served}
        assert len(keys) == 6  # pending points are never handed out twice
        assert set(inner.pending) == set(range(3, 9))
        for i, p in zip(range(3, 9), served, strict=True):
            s.tell(i, p, branin(p))
        assert len(inner.completed) == 9 and not inner.pending
        assert "from the surrogate" in s.report()
    finally:
        s.close()


@pytest.mark.parametrize("short", [True, False])
def test_groups_wait_for_the_first_round_only_when_trials_are_short(short):
    """Trials shorter than a round: the switch to the model waits for the first round. Longer
    trials: the groups never wait; the design goes on until the round is ready."""
    import threading

    inner = BayesianSearch(SPACE, seed=0, initial_points=3, acquisition="EI")
    s = Prefetching(inner, groups=4, policy=RoundPolicy(first_round_guess_s=1e9 if short else 0.0))
    hold = threading.Event()  # keeps the first round from finishing until the hand-out is done
    prepare = inner.prepare_round
    inner.prepare_round = lambda *a, **k: (hold.wait(0 if short else 30), prepare(*a, **k))[1]
    try:
        for i in range(3):
            p = s.ask(i)
            s.tell(i, p, branin(p))
        p = s.ask(3)  # the model is ready: the first round starts now
        if short:
            assert s.counts["model"] == 1 and s.first_wait_s > 0  # it waited for the round
        else:
            assert s.round is None and s.counts == {"model": 0, "design": 4, "fallback": 0}
            assert s.first_wait_s == 0.0
        assert (p["x"], p["y"]) not in {(q["x"], q["y"]) for q, _ in inner.observed.values()}
    finally:
        hold.set()
        s.close()


@contextlib.contextmanager
def gated_first_round(trial_s):
    """A Prefetching searcher with its 3 design results in, trials of `trial_s` against a round
    guessed at 0.1 s, whose first round is prepared only once the yielded gate is set."""
    inner = BayesianSearch(SPACE, seed=0, initial_points=3, acquisition="EI")
    s = Prefetching(inner, groups=4, policy=RoundPolicy(first_round_guess_s=0.1))
    gate = threading.Event()
    prepare = inner.prepare_round
    inner.prepare_round = lambda *a, **k: (gate.wait(30), prepare(*a, **k))[1]
    try:
        for i in range(3):
            p = s.ask(i)
            s.tell(i, p, branin(p))
        s._turnaround[:] = [trial_s]
        yield s, gate
    finally:
        gate.set()
        s.close()


def open_gate_and_await_the_round(s, gate, may_hold):
    gate.set()
    deadline = time.monotonic() + 30
    while s.holds_hand_outs(may_hold) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_hand_out_that_would_wait_is_held_by_the_coordinator_instead():
    """`holds_hand_outs`: the coordinator keeps the group idle while the round is prepared, and
    a hand-out it may not hold goes ahead without waiting."""
    with gated_first_round(0.05) as (s, gate):  # trials shorter than a round, not very short
        assert s.holds_hand_outs(True) and s.holds_hand_outs(True)  # the first round is not ready
        assert not s.holds_hand_outs(False)
        s.ask(3)  # not held: no wait, a design point
        assert s.round is None and s.counts["design"] == 4 and s.ask_wait_s == 0.0
        open_gate_and_await_the_round(s, gate, True)
        s.ask(4)
        assert s.counts["model"] == 1 and s.ask_wait_s == 0.0 and s.first_wait_s > 0  # the hold counted


def test_a_held_group_goes_ahead_after_the_bound_though_others_go_ahead_meanwhile():
    """The hold's bound (`round_wait_s`) runs from the first look that held the group: the other
    groups let through meanwhile do not restart it (nu61: one of 32 groups held for a whole
    search). Past the bound no group is held until a round is fresh enough."""
    with gated_first_round(0.05) as (s, gate):
        now = [s._clock()]
        s._clock = lambda: now[0]
        assert s.holds_hand_outs(True)  # the held group, first of the free ones
        for trial in (3, 4):  # a group let through beside it, on each pass
            assert not s.holds_hand_outs(False)
            s.ask(trial)
            now[0] += s.policy.round_wait_s / 2 - 0.01
            assert s.holds_hand_outs(True)
        now[0] += 0.03
        assert not s.holds_hand_outs(True)  # past its bound: it goes ahead
        s.ask(5)
        assert not s.holds_hand_outs(True) and s.waits + (s.first_wait_s > 0) == 1
        gate.set()
        deadline = time.monotonic() + 30
        while s.round is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not s.holds_hand_outs(True)  # the round is fresh: the spent hold is forgotten
        s._round_tells -= 100  # and now far behind: a group may be held again
        assert s.holds_hand_outs(True)


def test_with_very_short_trials_every_group_waits_for_the_first_round():
    """Trials of a millisecond against a round of 100 ms: a group the coordinator would not hold
    is held all the same until the first round, or the groups would spend the budget on the
    design. Later rounds are waited for only by the groups the coordinator holds."""
    with gated_first_round(0.001) as (s, gate):
        assert s.holds_hand_outs(False)
        open_gate_and_await_the_round(s, gate, False)
        s.ask(3)
        assert s.counts["model"] == 1 and s.counts["design"] == 3
        s._round_tells -= 100  # the round is now far behind: a fresher one is due
        assert s._round_wait_due(False, s.stale_limit()) and not s.holds_hand_outs(False)


def test_a_closed_searcher_abandons_its_round_at_the_next_checkpoint():
    """`close` (a model replaced on a switch of rung) does not wait for a round to finish."""
    import time as _time

    inner = BayesianSearch(SPACE, seed=0, initial_points=3, acquisition="EI")
    s = Prefetching(inner, groups=4)

    seen_closed = []  # checkpoints the round reached with the searcher closed

    def endless(*a, checkpoint, **k):
        while True:
            if s._stop:
                seen_closed.append(True)
            checkpoint()
            _time.sleep(0.001)

    inner.prepare_round = endless
    for i in range(3):
        p = s.ask(i)
        s.tell(i, p, branin(p))
    s._turnaround[:] = [0.05]  # trials shorter than a round, not very short
    assert not s.holds_hand_outs(False)  # starts the thread on its endless round
    s.ask(3)  # without waiting for it
    assert s._thread is not None and s._thread.is_alive()
    s.close()
    # the endless round ended (close waits for it at most 30 s), at the first checkpoint after close
    assert not s._thread.is_alive() and len(seen_closed) <= 1 and s.error is None


def test_how_stale_a_round_may_be_follows_the_trial_length_and_the_data_size():
    s = Prefetching(BayesianSearch(SPACE, seed=0), groups=16)

    def results(n):
        s.inner.observed.clear()
        s.inner.observed.update({i: ({"x": 0.0, "y": i / n}, float(i)) for i in range(n)})

    try:
        results(200)
        assert s.stale_limit() == 16  # nothing timed yet; 200 results: one per group
        s.round_s = 0.04
        s._turnaround = [0.5] * 5  # trials longer than a round: one result per group
        assert s.stale_limit() == 16 and not s._trials_are_short(first=False)
        s._turnaround = [0.03] * 5  # a little shorter: wait for fresher rounds, still per group
        assert s.stale_limit() == 16 and s._trials_are_short(first=False)
        results(59)
        assert s.stale_limit() == 5  # but never more than a tenth of the results
        results(9)
        assert s.stale_limit() == 1  # and at least one
        results(200)
        s._turnaround = [0.002] * 5  # trials of milliseconds: the model is the bottleneck
        assert s.stale_limit() == 1
    finally:
        s.close()


@pytest.mark.parametrize("trial_s, share", [(1000.0, 0.01), (0.001, 0.01), (1000.0, 0.0), (1000.0, None)])
def test_with_long_trials_a_hand_out_waits_for_a_round_with_the_latest_result_on_request(trial_s, share):
    """Trials of minutes and MPIOPT_FRESH_SHARE set: the next trial is chosen by a round that
    includes the result just in (the group's own), not by the round before it brought up to
    date. Short trials, MPIOPT_FRESH_SHARE=0, or the default (None: the setting left alone): no
    group waits for a fit."""
    import dataclasses
    import threading
    import time as _time

    if share is not None:
        policy = RoundPolicy(fresh_share=share)
    elif "MPIOPT_FRESH_SHARE" in os.environ:
        pytest.skip("MPIOPT_FRESH_SHARE is set: the default cannot be seen")
    else:
        policy = RoundPolicy.from_env()
    wait = trial_s > 1 and bool(share)
    policy = dataclasses.replace(policy, fresh_timeout_rounds=1e6)  # no time-out on a loaded test machine
    inner = BayesianSearch(SPACE, seed=0, initial_points=3, acquisition="EI")
    s = Prefetching(inner, groups=2, policy=policy)
    armed, hold = threading.Event(), threading.Event()
    prepare = inner.prepare_round
    inner.prepare_round = lambda *a, **k: ((hold.wait(30) if armed.is_set() else None), prepare(*a, **k))[1]
    try:
        for i in range(3):
            p = s.ask(i)
            s.tell(i, p, branin(p))
        deadline = _time.monotonic() + 30
        while (s.round is None or s._round_tells < 3) and _time.monotonic() < deadline:
            _time.sleep(0.01)
        a, b = s.ask(3), s.ask(4)
        s._turnaround = [trial_s] * 5
        assert s.prefers_fresh() == wait  # the coordinator asks before a burst
        armed.set()  # the next round is held back until after the hand-out has begun
        s.tell(3, a, branin(a))
        threading.Timer(0.2, hold.set).start()
        s.ask(5)
        if wait:
            assert s.fresh_waits == 1 and s.fresh_missed == 0 and s.fresh_wait_s > 0.1
            assert s.behind[-1] == 0  # chosen knowing trial 3's result
            assert "1 waits for a round with the latest result" in s.report()
        else:
            assert s.fresh_waits == 0 and s.behind[-1] == 1
        s.tell(4, b, branin(b))
    finally:
        hold.set()
        s.close()


def test_a_new_round_takes_in_what_happened_meanwhile_mostly_outside_the_lock(monkeypatch):
    """Trials handed out and results told while a round was prepared join it as fantasies and
    corrections. Each costs O(n^2 + n C), and under the lock it holds up the dispatch loop: only
    the last few may be applied under the lock, and the round must still know every one of them."""
    import threading
    import time as _time

    from mpiopt.search._bayesian import Round
    from mpiopt.space import encode

    inner = BayesianSearch(SPACE, seed=0, initial_points=3, acquisition="EI")
    # long trials: nobody waits for the round
    s = Prefetching(inner, groups=32, policy=RoundPolicy(first_round_guess_s=0.0))
    hold, later = threading.Event(), threading.Event()  # the first round, then any other, held back
    prepare, calls = BayesianSearch.prepare_round, []

    def slow(self, *a, **k):  # `self`: the background thread's snapshot of the searcher
        calls.append(1)
        (hold if len(calls) == 1 else later).wait(30)
        return prepare(self, *a, **k)
    monkeypatch.setattr(BayesianSearch, "prepare_round", slow)
    in_lock = []

    def spying_on(orig):
        def spy(self, *a, **k):
            if threading.current_thread() is s._thread:
                in_lock.append(s._lock.locked())
            return orig(self, *a, **k)
        return spy
    for name in ("add_pending", "learn"):
        monkeypatch.setattr(Round, name, spying_on(getattr(Round, name)))
    try:
        for i in range(3):
            p = s.ask(i)
            s.tell(i, p, branin(p))
        deadline = _time.monotonic() + 30
        while not calls and _time.monotonic() < deadline:  # the first round has begun
            _time.sleep(0.01)
        handed = {i: s.ask(i) for i in range(3, 23)}  # handed out while it is prepared
        assert s.round is None and s.counts["design"] == 23
        for i in range(3, 8):
            s.tell(i, handed[i], branin(handed[i]))
        hold.set()
        deadline = _time.monotonic() + 30
        while s.round is None and _time.monotonic() < deadline:
            _time.sleep(0.01)
        assert s.round is not None and s.error is None
        rows = s.round.rows
        for p in handed.values():
            assert tuple(encode(SPACE, p)) in rows  # every hand-out is a fantasy of the round
        for i in range(3, 8):  # and every result told meanwhile replaced its fantasy
            row, value = rows[tuple(encode(SPACE, handed[i]))]
            assert value == pytest.approx((branin(handed[i]) - s.round.mean) / s.round.sd)
        assert len(in_lock) >= 20 and sum(in_lock) <= s.policy.catch_up_in_lock
    finally:
        hold.set()
        later.set()
        s.close()


def test_the_background_thread_lets_the_dispatch_loop_in_every_millisecond():
    """numpy gives up and retakes the interpreter lock inside its calls, which resets another
    thread's claim to it: a thread polishing a round could starve the dispatch loop.
    The background thread sleeps briefly (the lock free for the loop) every `yield_every_s` of work."""
    clock, sleeps = [0.0], []
    s = Prefetching(BayesianSearch(SPACE, seed=0), groups=4, policy=RoundPolicy(), clock=lambda: clock[0],
                    sleep=sleeps.append)
    try:
        for _ in range(40):  # 10 ms of work, checkpoints every 0.25 ms
            clock[0] += 0.00025
            s._checkpoint()
        assert len(sleeps) in (9, 10) and all(0 < d <= 0.0001 for d in sleeps)
    finally:
        s.close()


class _BusyFlag:
    """`Prefetching._go` on a fake clock: a wait while the coordinator is busy passes fake time."""

    def __init__(self, clock: list[float]) -> None:
        self.clock, self.idle, self.waits = clock, True, []

    def set(self) -> None:
        self.idle = True

    def clear(self) -> None:
        self.idle = False

    def is_set(self) -> bool:
        return self.idle

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        self.clock[0] += timeout  # nobody sets it meanwhile: the coordinator stays busy
        return self.idle


@pytest.mark.parametrize("busy, own_core, standing_by", [(True, True, True), (False, True, True),
                                                          (True, False, True), (True, True, False)])
def test_a_busy_coordinator_parks_the_thread_for_at_most_half_of_every_window(busy, own_core, standing_by):
    """While the dispatch loop works (a result in, trials out) the thread parks at every
    checkpoint; a loop that is never idle still leaves it half of every `park_window_s`, and an
    idle one never parks it. A coordinator that shares its cores with other ranks never parks
    it, and the first round parks only for a model standing by (the design hands out meanwhile
    otherwise)."""
    clock = [0.0]
    policy = dataclasses.replace(RoundPolicy.from_env(own_core=own_core), park_window_s=0.2)
    s = Prefetching(BayesianSearch(SPACE, seed=0), groups=4, policy=policy, clock=lambda: clock[0],
                    sleep=lambda d: None)
    flag = s._go = _BusyFlag(clock)
    if standing_by:
        s.stand_by()
    try:
        s.pause(busy)
        worked = 0.0
        while clock[0] < 2.0:  # checkpoints 1 ms of work apart
            s._checkpoint()
            clock[0] += 0.001
            worked += 0.001
        assert s.round is None  # all of it before the first round
        if not busy or not own_core or not standing_by:
            assert flag.waits == [] and s.parked_s == 0
        else:
            assert len(flag.waits) == 10 and all(w == pytest.approx(0.1) for w in flag.waits)
            assert worked / clock[0] == pytest.approx(0.5, abs=0.01) and s.parked_s == pytest.approx(1.0, abs=0.01)
    finally:
        s.close()


def test_the_coordinator_has_a_core_unless_another_rank_of_its_node_may_run_there():
    from mpiopt.transport import _has_a_core

    assert _has_a_core({0: [0], 1: [1], 2: [1]})  # bound apart (mpiexec -bind-to)
    assert not _has_a_core({0: [0, 1], 1: [0, 1], 2: [0, 1]})  # 3 ranks free on 2 cores
    assert _has_a_core({0: [0, 1, 2, 3], 1: [0, 1, 2, 3]})  # unbound, a core each
    assert not _has_a_core({0: [0], 1: [0], 2: [1]})  # bound, but with another rank
    assert _has_a_core({4: [0], 5: [0]})  # another node's ranks: not the coordinator's


def test_the_waits_for_rounds_do_not_count_in_the_trial_length():
    """A hand-out that waits for a round holds up the dispatch loop, and every other group's
    result comes in that much later; counted in the turnaround, the waits would make trials look
    longer than a round, and the hand-outs would stop waiting."""
    clock = [100.0]
    s = Prefetching(BayesianSearch(SPACE, seed=0, initial_points=10), groups=4, policy=RoundPolicy(),
                    clock=lambda: clock[0])
    try:
        p, q = s.ask(0), s.ask(1)  # two trials running
        clock[0] += 5.0  # a hand-out waits 5 s for a round meanwhile
        s._waited += 5.0
        clock[0] += 0.001
        s.tell(0, p, branin(p))
        r = s.ask(2)
        clock[0] += 0.002
        s.tell(1, q, branin(q))
        s.tell(2, r, branin(r))
        assert s._turnaround == pytest.approx([0.001, 0.003, 0.002])
    finally:
        s.close()


def test_random_search_never_repeats_a_point_it_was_told_or_asked():
    s = RandomSearch(Space((Integer("a", 0, 5),)), seed=1)
    s.add_pending(0, {"a": 2})
    s.tell(1, {"a": 4}, 1.0)
    drawn = [s.ask(i)["a"] for i in range(2, 6)]
    assert sorted(drawn + [2, 4]) == [0, 1, 2, 3, 4, 5]


def test_a_round_learns_results_exactly_and_spreads_its_hand_outs():
    from mpiopt.search._gp import Posterior

    s = BayesianSearch(SPACE, seed=0, initial_points=5, acquisition="EI")
    for i in range(8):
        p = s.ask(i)
        s.tell(i, p, branin(p))
    running = {"x": 3.0, "y": 2.5}
    s.add_pending(8, running)
    rnd = s.prepare_round(polish=2)
    rnd.learn(running, branin(running))  # trial 8 came back before any hand-out
    # the corrected means are those of a posterior fitted with trial 8's real value
    X = np.array([s.coder.encode(p) for p, _ in s.completed] + [s.coder.encode(running)])
    y = np.array([v for _, v in s.completed] + [branin(running)])
    ys = (y - rnd.mean) / rnd.sd
    ref = Posterior(s.hyper, X, ys)
    mu, _ = ref.predict(rnd.post.C)
    assert np.allclose(rnd.post.mu_c, mu, atol=1e-6)
    out = [rnd.hand_out(polish_s=RoundPolicy().handout_polish_s) for _ in range(5)]
    pts = np.array([[p["x"] / 15.0, p["y"] / 15.0] for p in out])
    assert min(np.linalg.norm(a - b) for i, a in enumerate(pts) for b in pts[i + 1:]) > 1e-3


@pytest.mark.parametrize("surrogate", ["GP", "RF"])
def test_a_batch_from_one_fit_is_spread_out(surrogate):
    s = BayesianSearch(SPACE, seed=0, initial_points=5, surrogate=surrogate, acquisition="EI")
    for i in range(5):
        p = s.ask(i)
        s.tell(i, p, branin(p))
    s.add_pending(5, {"x": 3.0, "y": 3.0})
    batch = s.suggest_batch(6)
    keys = [(p["x"], p["y"]) for p in batch]
    assert len(set(keys)) == 6
    assert not set(keys) & {(p["x"], p["y"]) for p, _ in s.observed.values()}
    assert (3.0, 3.0) not in keys
    assert set(s.pending) == {5}  # suggesting a batch does not mark anything pending
    # spread: no two suggestions of the batch on top of each other
    pts = np.array([[p["x"] / 15.0, p["y"] / 15.0] for p in batch])
    gaps = [np.linalg.norm(a - b) for i, a in enumerate(pts) for b in pts[i + 1:]]
    assert min(gaps) > 1e-3


def test_hand_outs_polish_their_pick_only_where_that_costs_the_groups_little(monkeypatch):
    # 1 ms per hand-out is nothing to 8 groups with trials of seconds, but 63 groups finishing
    # half-second trials together would wait 63 ms for the last of them: no polish there.
    budget = RoundPolicy().handout_polish_s
    for groups, trial, expect in ((8, 10.0, budget), (8, 0.5, 0.0), (63, 0.5, 0.0), (63, 60.0, budget),
                                  (8, None, 0.0)):
        s = Prefetching(BayesianSearch(SPACE, seed=0), groups=groups, policy=RoundPolicy())
        monkeypatch.setattr(s, "_median_turnaround", lambda t=trial: t)
        assert s._polish_s() == expect, (groups, trial)
        s.close()


def test_a_hand_out_in_a_burst_of_results_skips_its_polish(monkeypatch):
    # Trials of equal length end together: while more results are waiting, each hand-out goes
    # out unpolished so that the rest of the burst is served sooner; a hand-out alone polishes.
    import time as _time

    s = Prefetching(BayesianSearch(SPACE, seed=0, initial_points=3, acquisition="EI"), groups=8, policy=RoundPolicy())
    monkeypatch.setattr(s, "_median_turnaround", lambda: 10.0)
    try:
        for i in range(4):
            p = s.ask(i)
            s.tell(i, p, branin(p))
        deadline = _time.monotonic() + 30
        while (s.round is None or s._round_tells < 4) and _time.monotonic() < deadline:
            _time.sleep(0.01)
        waiting = [True]
        s.watch_backlog(lambda: waiting[0])
        s.ask(4)
        assert (s.polished, s.unpolished_in_bursts) == (0, 1)
        waiting[0] = False
        s.ask(5)
        assert (s.polished, s.unpolished_in_bursts) == (1, 1)
        assert "1 polished at hand-out (1 not, in bursts)" in s.report()
    finally:
        s.close()

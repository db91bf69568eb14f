"""Suggestions prepared ahead of time, beside the dispatch loop.

A Bayesian suggestion costs a surrogate fit and an acquisition search: tens of milliseconds at
100 trials, more at 300. Done when a group asks, every group waits for it, and with many groups
the waits add up (MPI Opt's way: 0.2 group utilization with 8 groups of 0.5 s trials).

`Prefetching` splits the work. A background thread prepares *rounds* (`BayesianSearch.
prepare_round`): it fits the surrogate on a snapshot of the results, adds every running trial as
a fantasy observation, scores a candidate set and polishes its best points. `ask()` hands out the
best candidate of the current round after bringing the round up to date: results that arrived
since the round was prepared replace their fantasies (an exact update of the candidates' means,
O(n C)), and each hand-out becomes a fantasy itself so that the next one goes elsewhere. So a
hand-out costs about a millisecond, knows every result so far, and never waits for a fit; only
the kernel hyperparameters and the candidate set are as old as the round. A new round replaces
the old one as soon as it is ready, and starts whenever a result arrived since the last.

When the model takes over from the design, the design goes on until the first round is ready
(tens of milliseconds). Only when trials are shorter than a round (the median time from hand-out
to result) does a hand-out wait: for the first round, and for a fresher one when more than one
result per group, or more than a tenth of the results so far, arrived since the round's fit
(`stale_limit`); with such trials the groups are
idle most of the time anyway, and a fit that old would waste them. At the other end, on request
(MPIOPT_FRESH_SHARE, e.g. 0.01; 0, the default, never), with trials of minutes (groups x round
time under that share of a trial) a hand-out waits for a round that includes the result just in:
one result of staleness, with the pick polished again at hand-out, costs about 0.02 on
Hartmann-6's median best with 8 groups (bench/sample_efficiency.py, mpiopt-ahead against
mpiopt-long, 500 seeds), and the wait costs the groups under 1% of their time. It is off by
default because it makes a group wait for the surrogate. If a round ran out of candidates, the
next point of the Sobol design is handed out instead (a `fallback`).
"""
from __future__ import annotations

import copy
import logging
import sys
import threading
import time
from typing import Any

import numpy as np

from .. import _env
from ..space import encode
from ._base import Searcher

log = logging.getLogger(__name__)

POLISH_BUDGET_S = 0.25  # a round polishes its picks with L-BFGS for at most this long
FIRST_ROUND_WAIT_S = 10.0
FIRST_ROUND_GUESS_S = 0.1  # what a round is taken to cost before the first one was timed
TURNAROUND_KEEP = 64
VERY_SHORT = 4  # trials this many times shorter than a round: hand-outs wait for a round behind by >1 result
PARK_MAX_S = 0.05
YIELD_EVERY_S, YIELD_S = 0.001, 0.00005  # the background thread lets the dispatch loop in (`_checkpoint`)
CATCH_UP_IN_LOCK = 2  # a new round takes in at most this many hand-outs and results under the lock
# long trials, on request: a hand-out waits for a round with the latest result while groups x
# round time is under this share of a trial (MPIOPT_FRESH_SHARE, e.g. 0.01; 0, the default: never
# make a group wait for a fit), for at most this many round times
FRESH_SHARE = _env.get("MPIOPT_FRESH_SHARE")
FRESH_TIMEOUT_ROUNDS = 3.0
POLISH_SHARE = 0.01  # a hand-out polishes its pick when groups x that polish cost under this share of a trial


class Prefetching(Searcher):
    """Wraps a `BayesianSearch` so that suggestions are ready before they are asked for."""

    def __init__(self, inner, groups: int) -> None:
        super().__init__(inner.space, seed=inner.seed)
        self.inner = inner
        inner.defer_fit = True
        self.observed = inner.observed  # shared views: the coordinator reads them
        self.pending = inner.pending
        self.groups = max(1, groups)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self._thread: threading.Thread | None = None
        self.round = None  # the current `Round`
        self._tells = 0  # results told so far
        self._round_tells = -1  # results the current round was prepared with
        self._told: list[tuple[dict[str, Any], float | None]] = []  # every result, in order
        self._handed: list[dict[str, Any]] = []  # handed out (or re-run) while a round is prepared
        self.round_s = 0.0  # seconds the last round took to prepare
        self.first_wait_s = 0.0  # how long the first model suggestion waited for the first round
        self.waits, self.wait_s = 0, 0.0  # hand-outs that waited for a fresher round, and how long
        # long trials: hand-outs that waited for a round with the latest result, how long, and how
        # many of them gave up after FRESH_TIMEOUT_ROUNDS round times
        self.fresh_waits, self.fresh_wait_s, self.fresh_missed = 0, 0.0, 0
        self.ask_wait_s = 0.0  # how long the last ask() waited for a round (the coordinator's dispatch statistics)
        # set by the coordinator: whether more results are already waiting (a burst), in which case
        # a hand-out does not polish its pick, so that the rest of the burst is served sooner
        self.results_waiting = None
        self.polished, self.unpolished_in_bursts = 0, 0
        self.rounds = 0
        self.fits = 0  # deferred hyperparameter fits
        self.counts = {"model": 0, "design": 0, "fallback": 0}
        self.behind: list[int] = []  # per model suggestion: results newer than its round's fit
        self.error: BaseException | None = None
        self._warned = False
        # trial -> when it was handed out, and the hand-outs' waits for rounds until then: a wait
        # holds up the dispatch loop, so the other groups' results come in that much later, and a
        # turnaround that counted it would make trials look longer the more hand-outs wait
        self._asked: dict[int, tuple[float, float]] = {}
        self._waited = 0.0
        self._turnaround: list[float] = []  # hand-out to result, seconds, the latest TURNAROUND_KEEP
        self._keys = inner.known_points()  # every point asked, re-run or told, kept up to date here
        self._go = threading.Event()  # cleared while the coordinator is busy handing out trials
        self._go.set()
        self._yielded = time.perf_counter()
        inner.checkpoint = self._checkpoint

    # -- the interface -------------------------------------------------------------------
    def ask(self, trial: int) -> dict[str, Any]:
        with self._lock:
            params = None
            self.ask_wait_s = 0.0
            limit = self.stale_limit()
            first = self.round is None
            if self.inner.model_ready() and self.error is None and \
                    (first or self._tells - self._round_tells > limit) and self._trials_are_short(first):
                # trials shorter than a round: wait for the first round (the switch from the design
                # to the model, once), or for a fresher one when more than `limit` results arrived
                # since the round's fit, rather than hand out design points or a stale fit; tens of
                # milliseconds, and with such trials the groups are idle most of the time anyway
                t0 = time.perf_counter()
                self._start()
                self._go.set()
                self._wake.notify_all()
                self._wake.wait_for(lambda: (self.round is not None and self._tells - self._round_tells <= limit)
                                    or self.error is not None or self._stop, timeout=FIRST_ROUND_WAIT_S)
                waited = time.perf_counter() - t0
                self._waited += waited
                self.ask_wait_s = waited
                if first:
                    self.first_wait_s = waited
                else:
                    self.waits += 1
                    self.wait_s += waited
            elif self.round is not None and self.error is None and self._tells > self._round_tells and \
                    self._fresh_affordable():
                # long trials: wait for a round that knows every result so far (this group's own
                # included), as long as such waits cost the groups under FRESH_SHARE of their time
                t0 = time.perf_counter()
                target = self._tells
                self._go.set()
                self._wake.notify_all()
                self._wake.wait_for(lambda: self._round_tells >= target or self.error is not None or self._stop,
                                    timeout=FRESH_TIMEOUT_ROUNDS * self.round_s)
                waited = time.perf_counter() - t0
                self._waited += waited
                self.ask_wait_s = waited
                self.fresh_waits += 1
                self.fresh_wait_s += waited
                self.fresh_missed += self._round_tells < target
            if self.round is not None:
                polish_s = self._polish_s()
                if polish_s and self.results_waiting is not None and self.results_waiting():
                    polish_s = 0.0
                    self.unpolished_in_bursts += 1
                before = self.round.polished
                params = self.round.hand_out(self._keys, polish_s=polish_s)
                self.polished += self.round.polished - before
            if params is not None:
                self.counts["model"] += 1
                self.behind.append(self._tells - self._round_tells)
            else:
                if self.error is not None and not self._warned:
                    self._warned = True
                    log.warning("the suggestion thread stopped (%s: %s); handing out design points from now on",
                                type(self.error).__name__, self.error)
                # before the first round is ready the design goes on; later, a design point stands
                # in for a round that ran out of candidates or a stopped thread
                source = "fallback" if self.inner.model_ready() and self.round is not None else "design"
                self.counts[source] += 1
                params = self.inner.design_point()
            self._note_running(trial, params)
            self._asked[trial] = (time.perf_counter(), self._waited)
            self._wake.notify()
        self._start()
        return params

    def _trials_are_short(self, first: bool) -> bool:
        """Whether a group finishes a trial faster than a round is prepared (the median time from
        a hand-out to its result, less the time hand-outs waited for rounds meanwhile, against the
        last round's time, or FIRST_ROUND_GUESS_S before the
        first): then waiting for a round costs little, and handing out without one wastes trials.
        With longer trials a group never waits: the design goes on until the first round is ready,
        and a round behind by many results is still corrected exactly by each of them."""
        t = self._median_turnaround()
        return t is None or t < (FIRST_ROUND_GUESS_S if first or not self.round_s else self.round_s)

    def tell(self, trial: int, params: dict[str, Any], loss: float | None) -> None:
        with self._lock:
            asked = self._asked.pop(trial, None)
            if asked is not None:
                self._turnaround.append(max(0.0, time.perf_counter() - asked[0] - (self._waited - asked[1])))
                del self._turnaround[:-TURNAROUND_KEEP]
            self.inner.tell(trial, params, loss)
            self._keys.add(tuple(encode(self.space, params)))
            self._told.append((dict(params), loss))
            self._tells += 1
            if self.round is not None:
                self.round.learn(params, self.inner.observed[trial][1])
            self._wake.notify()
        self._start()

    def add_pending(self, trial: int, params: dict[str, Any]) -> None:
        with self._lock:
            self._asked[trial] = (time.perf_counter(), self._waited)
            self.inner.add_pending(trial, params)
            self._note_running(trial, params)

    def prefers_fresh(self) -> bool:
        """Whether the next hand-out would wait for a round with the latest result (the
        coordinator then takes in every result already waiting first: one round for a burst)."""
        return self.round is not None and self.error is None and self._fresh_affordable()

    def _fresh_affordable(self) -> bool:
        """Whether a hand-out may wait for a round that includes the latest result: when one
        round per result costs the groups under FRESH_SHARE of their time (groups x round time
        against the median trial; trials of minutes). A round prepared before the latest result
        came in, brought up to date and polished again at hand-out, is good but not quite as good
        as a fresh one (Hartmann-6, 8 groups, 40 trials, seeds 0-499: median best -3.045 against
        -3.064; see docs/benchmarks.md). Off unless MPIOPT_FRESH_SHARE is set."""
        t = self._median_turnaround()
        return FRESH_SHARE > 0 and t is not None and self.round_s > 0 and \
            self.groups * self.round_s <= FRESH_SHARE * t

    def _polish_s(self) -> float:
        """How long a hand-out may polish its pick under the posterior that knows every result
        (`Round.hand_out`): up to HANDOUT_POLISH_S, when that for every group costs them under
        POLISH_SHARE of a trial (8 groups: trials from 0.8 s); never in bursts of short trials,
        where 63 groups x 2 ms (the budget then) kept the last of them waiting (bench/coordinator.py). And
        (in `ask`) not while more results are already waiting: with trials of equal length the
        first waves end together, and 8 groups of 4 ranks at 2 s, on 2 cores, had hand-outs of
        3-4 ms at the median and dispatch p99 of 8.6-10.5 ms in six runs, all in those waves."""
        from ._bayesian import HANDOUT_POLISH_S

        t = self._median_turnaround()
        ok = t is not None and self.groups * HANDOUT_POLISH_S <= POLISH_SHARE * t
        return HANDOUT_POLISH_S if ok else 0.0

    def stale_limit(self) -> int:
        """The most results a hand-out's round may be behind, when trials are shorter than a round
        (longer trials never wait): one per group (at least 4), but never more than a tenth of
        the results so far (at least 1), and only 1 when a group finishes several trials while
        one round is prepared (trials of milliseconds: the model, not the groups, is what limits
        such a search). The tenth: a round's kernel is fitted on the data of its snapshot, and a
        fit on 10 results is a poor guide at 15 (the README's Branin toy, 4 groups, whose
        trials come back in 5-9 ms against rounds of 10-25 ms, ran on rounds up to 5 results
        behind and ended above 0.7 in about 1 run in 9; see docs/benchmarks.md)."""
        t = self._median_turnaround()
        if t is not None and self.round_s and t * VERY_SHORT < self.round_s:
            return 1
        return max(1, min(max(self.groups, 4), len(self.observed) // 10))

    def _median_turnaround(self) -> float | None:
        return sorted(self._turnaround)[len(self._turnaround) // 2] if self._turnaround else None

    def _note_running(self, trial: int, params: dict[str, Any]) -> None:
        self.inner.pending[trial] = params
        self._keys.add(tuple(encode(self.space, params)))
        self._handed.append(params)
        if self.round is not None:
            self.round.add_pending(params)

    def _suggest(self) -> dict[str, Any]:  # not used: ask() is overridden
        return self.inner._suggest()

    def pause(self, busy: bool) -> None:
        if busy:
            self._go.clear()
        else:
            self._go.set()

    def _checkpoint(self) -> None:
        """Called by the surrogate between steps of a round: wait while the coordinator is busy.

        The dispatch loop and this thread share one interpreter lock; a result burst (many groups
        finishing together) is handed out fastest with this thread parked; at most PARK_MAX_S at a
        time, so that a coordinator that is never idle (trials of milliseconds) still gets rounds.
        The first round is never parked: until it is ready the groups get design points.

        And every YIELD_EVERY_S of work it sleeps YIELD_S, whatever the coordinator does: numpy
        releases and retakes the interpreter lock inside its calls, microseconds apart, and each
        retake resets the dispatch loop's claim to it (CPython hands the lock over on request only
        when no other thread took it within the switch interval), so a result that arrived while
        a round polished its picks could wait for the loop to run at all (bench/dispatch_gil.py,
        126 results and 63 running trials: the loop's wake-ups late by 6-8 ms at p99 and 11 ms at
        most without these sleeps, 1 ms and 3-4 ms with them; rounds no slower beyond noise)."""
        now = time.perf_counter()
        if now - self._yielded > YIELD_EVERY_S:
            time.sleep(YIELD_S)
            self._yielded = time.perf_counter()
        if not self._go.is_set() and not self._stop and self.round is not None:
            self._go.wait(PARK_MAX_S)

    def close(self) -> None:
        self._go.set()
        with self._lock:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # -- the background thread -------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None and self.inner.model_ready():
            # a short switch interval: the dispatch loop gets the interpreter back within 0.1 ms
            # of a message, whatever the background thread is doing
            sys.setswitchinterval(min(sys.getswitchinterval(), 0.0001))
            self._thread = threading.Thread(target=self._run, name="mpiopt-suggestions", daemon=True)
            self._thread.start()

    def _snapshot(self):
        clone = copy.copy(self.inner)
        clone.observed = dict(self.inner.observed)
        clone.pending = dict(self.inner.pending)
        clone.gains = self.inner.gains.copy()
        clone._rng = np.random.RandomState([self.inner.seed, self.rounds])  # the main thread keeps its own
        return clone

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - the dispatch loop falls back to the design
            self.error = exc

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stop and self._tells == self._round_tells and self.round is not None:
                    self._wake.wait()
                if self._stop:
                    return
            self._checkpoint()
            with self._lock:
                if self._stop:
                    return
                clone = self._snapshot()
                tells = self._tells
                self._handed = []
                if self.round is not None and clone.refit_due() and self._trials_are_short(first=False) \
                        and self.stale_limit() < max(self.groups, 4):
                    # hand-outs wait for rounds here, and with so few results a fit takes milliseconds:
                    # fit the kernel on this round's own data rather than after it
                    clone.defer_fit = False
            t0 = time.perf_counter()
            clone.polish_deadline = t0 + POLISH_BUDGET_S
            # slow: outside the lock (the first round, which a group waits for, polishes little)
            new = clone.prepare_round(polish=min(2 * self.groups, 12) if self.round is not None else 2)
            round_s = time.perf_counter() - t0
            # the trials handed out while this round was prepared join it as fantasies, and the
            # results that came in meanwhile correct it: outside the lock while there are more than
            # a few (each costs O(n^2 + n C); 63 design points handed out during the first round
            # held the dispatch loop 13 ms when this was done under the lock), the rest under it
            handed_i, told_i = 0, tells
            while True:
                with self._lock:
                    handed, told = self._handed[handed_i:], self._told[told_i:]
                    if len(handed) + len(told) > CATCH_UP_IN_LOCK and not self._stop:
                        handed_i, told_i = handed_i + len(handed), told_i + len(told)
                    else:
                        break
                for params in handed:
                    self._checkpoint()
                    new.add_pending(params)
                for params, loss in told:
                    new.learn(params, loss)
            with self._lock:
                handed, told = self._handed[handed_i:], self._told[told_i:]
                self.rounds += 1
                self.round_s = round_s
                self.inner.hyper = clone.hyper
                self.inner.fitted_on = clone.fitted_on
                self.inner.gains = clone.gains
                self.inner._proposals = clone._proposals
                for params in handed:
                    new.add_pending(params)
                for params, loss in told:
                    new.learn(params, loss)
                self.round = new
                self._round_tells = tells
                self._wake.notify_all()
                refit = self.inner.refit_due() and not self._stop
                if refit:
                    clone = self._snapshot()
            if refit:  # the current round serves meanwhile: now there is time to refit the kernel
                clone.refit()
                with self._lock:
                    self.inner.hyper = clone.hyper
                    self.inner.fitted_on = clone.fitted_on
                    self.fits += 1

    def report(self) -> str:
        """One line about where the suggestions came from."""
        st = sorted(self.behind)
        stale = f"; results newer than the round's fit p50 {st[len(st) // 2]}, max {st[-1]}" if st else ""
        fresh = (f"{self.fresh_waits} waits for a round with the latest result ({self.fresh_wait_s * 1000:.0f} ms, "
                 f"{self.fresh_missed} timed out), ") if self.fresh_waits else ""
        return (f"suggestions: {self.counts['model']} from the surrogate ({self.rounds} rounds, {self.fits} refits, "
                f"first round waited for {self.first_wait_s * 1000:.0f} ms, {self.waits} waits for a fresher "
                f"round ({self.wait_s * 1000:.0f} ms), {fresh}{self.polished} polished at hand-out "
                f"({self.unpolished_in_bursts} not, in bursts), last round {self.round_s * 1000:.0f} ms"
                f"{stale}), {self.counts['design']} from the initial design, "
                f"{self.counts['fallback']} fallback design points")

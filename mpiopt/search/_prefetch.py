"""Suggestions prepared ahead of time, beside the dispatch loop.

A Bayesian suggestion costs a surrogate fit and an acquisition search: tens of milliseconds at
100 trials, more at 300. Made when a group asks, every group waits for it, and with many groups
the waits add up.

`Prefetching` splits the work. A background thread prepares *rounds* (`BayesianSearch.
prepare_round`) on a snapshot of the searcher: it fits the surrogate, adds every running trial as
a fantasy observation, scores a candidate set and polishes its best points. `ask()` hands out the
best candidate of the current round after bringing the round up to date: results that arrived
since the round was prepared replace their fantasies (an exact update of the candidates' means,
O(n C)), and each hand-out becomes a fantasy itself so that the next one goes elsewhere. So a
hand-out costs about a millisecond, knows every result so far, and never waits for a fit; only
the kernel hyperparameters and the candidate set are as old as the round. A new round replaces
the old one as soon as it is ready, and starts whenever a result arrived since the last.

Whether a hand-out waits for a round (`RoundPolicy` holds the numbers):

* trials longer than a round: never; the design goes on until the first round is ready;
* trials shorter than a round (the groups are idle most of the time anyway): for the first
  round, and for a fresher one when the current one is too many results behind (`stale_limit`).
  The coordinator sees such a wait coming (`holds_hand_outs`) and keeps its free groups waiting
  while it answers the others, so that reports and results are not queued behind the model;
* on request (MPIOPT_FRESH_SHARE), with trials of minutes: for a round that includes the result
  just in; off by default because it makes a group wait for the surrogate.

If a round ran out of candidates, or the thread stopped, the next point of the Sobol design is
handed out instead (a `fallback`).
"""
from __future__ import annotations

import logging
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import _env
from ..space import encode
from ._base import Searcher
from ._bayesian import BayesianSearch, Round

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundPolicy:
    """When hand-outs wait for rounds, and how long rounds and hand-outs may work.

    A trial's length is the median time from hand-out to result; a round's, the time the last
    round took to prepare.
    """

    # a round polishes its best candidates for at most this long: it should be ready while its data is recent
    polish_budget_s: float = 0.25
    # a hand-out waiting for a round (short trials) goes on without it after this long: a stalled
    # thread must not stall the search
    round_wait_s: float = 10.0
    # what a round is taken to cost before one was timed: decides whether the switch to the model waits
    first_round_guess_s: float = 0.1
    # trial lengths kept for their median: recent enough to follow a change of trial length
    turnaround_keep: int = 64
    # trials this many times shorter than a round: a hand-out's round may be at most one result behind,
    # since the model, not the groups, limits such a search
    very_short: int = 4
    # the thread parks at its checkpoints while the coordinator hands out trials, but for at most
    # `park_share` of every `park_window_s`: a coordinator that is never idle (trials of
    # milliseconds, reports by the thousand) must still get rounds
    park_window_s: float = 0.2
    park_share: float = 0.5
    # after this much work the thread sleeps `yield_s`: numpy releases and retakes the interpreter
    # lock inside its calls, which resets the dispatch loop's claim to it, so without a real sleep
    # the loop could wait for the whole round
    yield_every_s: float = 0.001
    yield_s: float = 0.00005
    # a new round takes in at most this many hand-outs and results under the lock, the rest just
    # before it: each costs O(n^2 + n C), and the lock holds up the dispatch loop
    catch_up_in_lock: int = 2
    # long trials: a hand-out waits for a round with the latest result while groups x round time is
    # under this share of a trial (0: never; MPIOPT_FRESH_SHARE): a fresh round chooses a little
    # better, but the wait costs the groups
    fresh_share: float = 0.0
    # such a wait gives up after this many round times: a slow round must not hold a group for long
    fresh_timeout_rounds: float = 3.0
    # a hand-out polishes its pick only while groups x `handout_polish_s` is under this share of a
    # trial: when the groups finish together, the last of them waits for every polish
    polish_share: float = 0.01
    # a hand-out polishes its pick for at most this long: enough for most polishes to converge
    handout_polish_s: float = 0.001

    @classmethod
    def from_env(cls, *, own_core: bool = True) -> RoundPolicy:
        """The defaults, with `fresh_share` from MPIOPT_FRESH_SHARE (a ConfigError if malformed).
        Without `own_core` (the coordinator shares its cores with other ranks) the thread never
        parks: the loop then waits for a core among the ranks whatever the thread does, and a
        parked thread only makes the groups wait longer for fresh rounds."""
        return cls(fresh_share=_env.get("MPIOPT_FRESH_SHARE"), park_share=cls.park_share if own_core else 0.0)


class _Abandoned(Exception):
    """Raised at a checkpoint of a closed searcher's thread: its round is of no use any more."""


class Prefetching(Searcher):
    """Wraps a `BayesianSearch` so that suggestions are ready before they are asked for.

    Args:
        inner: the searcher; it must not be asked directly any more.
        groups: how many groups ask for trials.
        policy: the tuning (`RoundPolicy.from_env()` when None).
        clock: seconds, for every timing and deadline of this class.
        sleep: how the background thread sleeps to let the dispatch loop in.
    """

    def __init__(self, inner: BayesianSearch, groups: int, *, policy: RoundPolicy | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(inner.space, seed=inner.seed)
        self.inner = inner
        self.policy = policy if policy is not None else RoundPolicy.from_env()
        self._clock = clock
        self._sleep = sleep
        self.observed = inner.observed  # shared views: the coordinator reads them
        self.pending = inner.pending
        self.aside = inner.aside
        self.groups = max(1, groups)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self._thread: threading.Thread | None = None
        self.round: Round | None = None  # the current round
        self._tells = 0  # results told so far
        self._round_tells = -1  # results the current round was prepared with
        self._told: list[tuple[dict[str, Any], float | None]] = []  # every result, in order
        self._handed: list[dict[str, Any]] = []  # handed out (or re-run) while a round is prepared
        self._results_waiting: Callable[[], bool] | None = None  # see `watch_backlog`
        self.error: BaseException | None = None
        self._warned = False
        # trial -> when it was handed out, and the hand-outs' waits for rounds until then: a wait
        # holds up the dispatch loop, so the other groups' results come in that much later, and a
        # turnaround that counted it would make trials look longer the more hand-outs wait
        self._asked: dict[int, tuple[float, float]] = {}
        self._waited = 0.0
        self._turnaround: list[float] = []  # hand-out to result, seconds, the latest `turnaround_keep`
        self._keys = inner.known_points()  # every point asked, re-run or told, kept up to date here
        self._go = threading.Event()  # cleared while the coordinator is busy handing out trials
        # a wait for a round, from the first hand-out it held (`holds_hand_outs`) or that waited,
        # until one goes ahead: its start (None: no wait on) and whether it waits for the first round
        self._hold_t0: float | None = None
        self._hold_first = False
        self._skip_wait = False  # `holds_hand_outs` said no: the next hand-out does not wait for a round
        # a hold ran out its bound (`round_wait_s`): no group is held again until a round is fresh
        # enough. A hold ends only so, or when its group goes ahead: groups let through beside it
        # do not restart its bound, or the group it holds would wait for ever
        self._hold_spent = False
        self._go.set()
        self._yielded = self._clock()
        self._park_window = (self._yielded, 0.0)  # the current window's start, and the time parked in it
        self._standing_by = False  # see `stand_by`
        # statistics, for `report`
        self.round_s = 0.0  # seconds the last round took to prepare
        self.rounds = 0
        self.fits = 0  # deferred hyperparameter fits
        self.first_wait_s = 0.0  # how long the first model suggestion waited for the first round
        self.waits, self.wait_s = 0, 0.0  # hand-outs that waited for a fresher round, and how long
        # hand-outs that waited for a round with the latest result, how long, and how many timed out
        self.fresh_waits, self.fresh_wait_s, self.fresh_missed = 0, 0.0, 0
        self.polished, self.unpolished_in_bursts = 0, 0
        self.parked_s = 0.0  # how long the thread parked while the coordinator was busy
        self.counts = {"model": 0, "design": 0, "fallback": 0}
        self.behind: list[int] = []  # per model suggestion: results newer than its round's fit

    # -- the interface -------------------------------------------------------------------
    def ask(self, trial: int) -> dict[str, Any]:
        with self._lock:
            self.ask_wait_s = 0.0
            limit = self.stale_limit()
            first = self.round is None
            round_due, held_off = self._round_wait_due(first, limit), self._skip_wait
            self._skip_wait = False
            if round_due and not held_off:  # the coordinator did not hold this hand-out: no wait
                self._wait_for_round(first, limit)
            elif not round_due and self._fresh_wait_due():
                self._wait_for_fresh_round()
            if not round_due:
                self._hold_spent = False
            if not (round_due and held_off):  # one let through beside a held group ends no hold
                self._end_hold()
            params = self._from_round() if self.round is not None else None
            if params is None:
                params = self._from_design()
            self._note_running(trial, params)
            self._asked[trial] = (self._clock(), self._waited)
            self._wake.notify()
        self._start()
        return params

    def tell(self, trial: int, params: dict[str, Any], loss: float | None) -> None:
        with self._lock:
            asked = self._asked.pop(trial, None)
            if asked is not None:
                self._turnaround.append(max(0.0, self._clock() - asked[0] - (self._waited - asked[1])))
                del self._turnaround[:-self.policy.turnaround_keep]
            self.inner.tell(trial, params, loss)
            self._keys.add(tuple(encode(self.space, params)))
            self._told.append((dict(params), loss))
            self._tells += 1
            if self.round is not None:
                self.round.learn(params, self.inner.observed[trial][1])
            self._wake.notify()
        self._start()

    def drop_pending(self, trial: int) -> None:
        # a round prepared before keeps the point as a fantasy; the next round has it no more
        with self._lock:
            self._asked.pop(trial, None)
            self.inner.drop_pending(trial)
            self._wake.notify()

    def add_pending(self, trial: int, params: dict[str, Any]) -> None:
        with self._lock:
            self._asked[trial] = (self._clock(), self._waited)
            self.inner.add_pending(trial, params)
            self._note_running(trial, params)

    def set_aside(self, trial: int, params: dict[str, Any]) -> None:
        with self._lock:
            self._asked.pop(trial, None)
            self.inner.set_aside(trial, params)
            self._keys.add(tuple(encode(self.space, params)))

    def holds_hand_outs(self, may_hold: bool) -> bool:
        """Whether the next hand-out would wait for a round (`_round_wait_due`), within
        `round_wait_s` of the first hand-out that was held (then none waits until a round is
        fresh enough: see `_hold_spent`): the round is worked on meanwhile.
        Without `may_hold` it goes ahead, except that every group waits for the first round when
        trials are `very_short` against it (`_design_would_spend_the_budget`)."""
        with self._lock:
            first = self.round is None
            if not self._round_wait_due(first, self.stale_limit()):
                self._end_hold()
                self._hold_spent = False
                self._skip_wait = True
                return False
            if self._hold_spent:
                self._skip_wait = True
                return False
            now = self._clock()
            self._begin_hold(first, now)
            may_hold = may_hold or self._design_would_spend_the_budget(first)
            in_bound = now - self._hold_t0 < self.policy.round_wait_s
            if not in_bound:
                self._end_hold()
                self._hold_spent = True
            holding = may_hold and in_bound
            self._skip_wait = not holding
        self._start()
        return holding

    def ready(self) -> bool:
        with self._lock:
            return self.round is not None or self.error is not None or self._stop or not self.inner.model_ready()

    def prefers_fresh(self) -> bool:
        return self.round is not None and self.error is None and self._fresh_affordable()

    def watch_backlog(self, results_waiting: Callable[[], bool]) -> None:
        """While `results_waiting()`, hand-outs skip their polish: with trials of equal length the
        groups finish together, and each polish would keep the rest of the burst waiting."""
        self._results_waiting = results_waiting

    def pause(self, busy: bool) -> None:
        if busy and self._hold_t0 is None:  # while hand-outs wait for a round, it goes on at full speed
            self._go.clear()
        else:
            self._go.set()

    def stand_by(self) -> None:
        self._standing_by = True

    def close(self) -> None:
        self._go.set()
        with self._lock:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def report(self) -> str:
        behind = (f"; results newer than the round's fit p50 {statistics.median_high(self.behind)}, "
                  f"max {max(self.behind)}") if self.behind else ""
        parked = (f"parked {self.parked_s * 1000:.0f} ms while the coordinator was busy" if self.policy.park_share
                  else "never parked (the coordinator shares its cores with other ranks)")
        fresh = (f"{self.fresh_waits} waits for a round with the latest result ({self.fresh_wait_s * 1000:.0f} ms, "
                 f"{self.fresh_missed} timed out), ") if self.fresh_waits else ""
        return (f"suggestions: {self.counts['model']} from the surrogate ({self.rounds} rounds, {self.fits} refits, "
                f"first round waited for {self.first_wait_s * 1000:.0f} ms, {self.waits} waits for a fresher "
                f"round ({self.wait_s * 1000:.0f} ms), {fresh}{self.polished} polished at hand-out "
                f"({self.unpolished_in_bursts} not, in bursts), last round {self.round_s * 1000:.0f} ms, {parked}"
                f"{behind}), {self.counts['design']} from the initial design, "
                f"{self.counts['fallback']} fallback design points")

    def _suggest(self) -> dict[str, Any]:  # required by Searcher; ask() is overridden and never calls it
        return self.inner.suggest_batch(1, defer_fit=True, checkpoint=self._checkpoint)[0]

    # -- the steps of a hand-out (under the lock) ----------------------------------------------
    def _round_wait_due(self, first: bool, limit: int) -> bool:
        """Trials shorter than a round: wait for the first round (the switch from the design to
        the model, once), or for a fresher one when more than `limit` results arrived since the
        round's fit, rather than hand out design points or a stale fit."""
        return (self.inner.model_ready() and self.error is None
                and (first or self._tells - self._round_tells > limit) and self._trials_are_short(first))

    def _wait_for_round(self, first: bool, limit: int) -> None:
        """Wait (the hold's bound included) for a round at most `limit` results behind."""
        t0 = self._clock()
        self._begin_hold(first, t0)
        self._start()
        self._wake.wait_for(lambda: (self.round is not None and self._tells - self._round_tells <= limit)
                            or self.error is not None or self._stop,
                            timeout=max(0.0, self._hold_t0 + self.policy.round_wait_s - t0))
        self.ask_wait_s = self._clock() - t0

    def _begin_hold(self, first: bool, now: float) -> None:
        """A wait for a round begins (if none is on): the thread gets to work on it at once."""
        if self._hold_t0 is None:
            self._hold_t0, self._hold_first = now, first
            self._go.set()
            self._wake.notify_all()

    def _end_hold(self) -> None:
        """The wait for a round is over: counted in the statistics and left out of trial lengths."""
        if self._hold_t0 is None:
            return
        held = self._clock() - self._hold_t0
        self._hold_t0 = None
        self._waited += held
        if self._hold_first:
            self.first_wait_s += held
        else:
            self.waits += 1
            self.wait_s += held

    def _fresh_wait_due(self) -> bool:
        """Long trials, on request: wait for a round that knows every result so far (the asking
        group's own included), when such waits are affordable (`_fresh_affordable`)."""
        return (self.round is not None and self.error is None and self._tells > self._round_tells
                and self._fresh_affordable())

    def _wait_for_fresh_round(self) -> None:
        t0 = self._clock()
        target = self._tells
        self._go.set()
        self._wake.notify_all()
        self._wake.wait_for(lambda: self._round_tells >= target or self.error is not None or self._stop,
                            timeout=self.policy.fresh_timeout_rounds * self.round_s)
        waited = self._note_wait(t0)
        self.fresh_waits += 1
        self.fresh_wait_s += waited
        self.fresh_missed += self._round_tells < target

    def _note_wait(self, t0: float) -> float:
        """Record a wait that began at `t0`, for the coordinator and for the trial lengths."""
        waited = self._clock() - t0
        self._waited += waited
        self.ask_wait_s = waited
        return waited

    def _from_round(self) -> dict[str, Any] | None:
        """The current round's next suggestion (None: it has no candidate left). Its pick is
        polished only where that is affordable (`_polish_s`) and no burst of results is waiting."""
        polish_s = self._polish_s()
        if polish_s and self._results_waiting is not None and self._results_waiting():
            polish_s = 0.0
            self.unpolished_in_bursts += 1
        before = self.round.polished
        params = self.round.hand_out(self._keys, polish_s=polish_s)
        self.polished += self.round.polished - before
        if params is not None:
            self.counts["model"] += 1
            self.behind.append(self._tells - self._round_tells)
        return params

    def _from_design(self) -> dict[str, Any]:
        """The next design point: before the first round is ready the design goes on; later, it
        stands in for a round that ran out of candidates or a stopped thread."""
        if self.error is not None and not self._warned:
            self._warned = True
            log.warning("the suggestion thread stopped (%s: %s); handing out design points from now on",
                        type(self.error).__name__, self.error)
        source = "fallback" if self.inner.model_ready() and self.round is not None else "design"
        self.counts[source] += 1
        return self.inner.design_point()

    def _note_running(self, trial: int, params: dict[str, Any]) -> None:
        self.inner.pending[trial] = params
        self._keys.add(tuple(encode(self.space, params)))
        self._handed.append(params)
        if self.round is not None:
            self.round.add_pending(params)

    # -- the rules -----------------------------------------------------------------------------
    def _trials_are_short(self, first: bool) -> bool:
        """Whether a group finishes a trial faster than a round is prepared (the last round's
        time, or `first_round_guess_s` before one was timed). Then waiting for a round costs
        little, and handing out without one wastes trials; with longer trials a round behind by
        many results is still corrected exactly by each of them."""
        t = self._median_turnaround()
        return t is None or t < (self.policy.first_round_guess_s if first or not self.round_s else self.round_s)

    def _design_would_spend_the_budget(self, first: bool) -> bool:
        """Trials `very_short` against the first round (its guessed time): a group that went on
        without the model would run several design points in the time of the round, and groups
        that go on together would spend the budget on the design; the wait costs them little
        (a round, once)."""
        return first and self._trials_very_short_against(self.policy.first_round_guess_s)

    def _trials_very_short_against(self, round_s: float) -> bool:
        """Whether the median trial is `very_short` times shorter than a round of `round_s`."""
        t = self._median_turnaround()
        return t is not None and t * self.policy.very_short < round_s

    def _fresh_affordable(self) -> bool:
        """Whether a hand-out may wait for a round that includes the latest result: when one round
        per result costs the groups under `fresh_share` of their time (groups x round time against
        a trial). A round brought up to date at hand-out is good, a fresh one a little better."""
        share = self.policy.fresh_share
        if share <= 0:  # off (the default): no median to take, on every pass of the dispatch loop
            return False
        t = self._median_turnaround()
        return t is not None and self.round_s > 0 and self.groups * self.round_s <= share * t

    def _polish_s(self) -> float:
        """How long a hand-out may polish its pick: `handout_polish_s`, when that for every group
        costs them under `polish_share` of a trial (a burst of results waits for every polish)."""
        t = self._median_turnaround()
        p = self.policy
        ok = t is not None and self.groups * p.handout_polish_s <= p.polish_share * t
        return p.handout_polish_s if ok else 0.0

    def stale_limit(self) -> int:
        """The most results a hand-out's round may be behind when trials are shorter than a round
        (longer trials never wait): one per group (at least 4), but never more than a tenth of the
        results so far (at least 1), since a kernel fitted on 10 results is a poor guide at 15; and
        only 1 when trials are `very_short`, since then the model, not the groups, limits the search."""
        if self._trials_very_short_against(self.round_s):
            return 1
        return max(1, min(max(self.groups, 4), len(self.observed) // 10))

    def _median_turnaround(self) -> float | None:
        return statistics.median_high(self._turnaround) if self._turnaround else None

    # -- the background thread -------------------------------------------------------------
    def _checkpoint(self) -> None:
        """Called by the surrogate between steps of a round: let the dispatch loop in.

        While the coordinator is busy (a result is handed out fastest with this thread out of
        the way) it parks (`_park_while_busy`). And every `yield_every_s`
        of work it sleeps `yield_s` whatever the coordinator does: numpy releases and retakes the
        interpreter lock inside its calls, microseconds apart, and each retake resets the
        dispatch loop's claim to it (CPython hands the lock over on request only when no other
        thread took it within the switch interval). A closed searcher's thread abandons its work
        here, so that `close` (on the dispatch path when a model moves rung) does not wait for it.
        """
        if self._stop:
            raise _Abandoned
        p = self.policy
        if self._clock() - self._yielded > p.yield_every_s:
            self._sleep(p.yield_s)
            self._yielded = self._clock()
        if not self._go.is_set() and (self.round is not None or self._standing_by):
            self._park_while_busy()

    def _park_while_busy(self) -> None:
        """Wait until the coordinator is idle again, within this window's allowance: at most
        `park_share` of every `park_window_s` parked, so that rounds go on at least that fast
        however busy the loop is. The first round parks only for a model standing by
        (`stand_by`), which the serving one stands in for: otherwise, until it is ready, the
        groups get design points, and a coordinator that is never idle (hundreds of groups)
        could hand out the whole budget from the design."""
        p = self.policy
        now = self._clock()
        start, parked = self._park_window
        if now - start >= p.park_window_s:
            start, parked = now, 0.0
        allowance = p.park_share * p.park_window_s - parked
        if allowance > p.yield_s:  # a shorter park is not worth the thread switches
            self._go.wait(allowance)
            waited = self._clock() - now
            parked += waited
            self.parked_s += waited
        self._park_window = (start, parked)

    def _start(self) -> None:
        if self._thread is None and self.inner.model_ready():
            # a short switch interval: the dispatch loop gets the interpreter back within 0.1 ms
            # of a message, whatever the background thread is doing
            sys.setswitchinterval(min(sys.getswitchinterval(), 0.0001))
            self._thread = threading.Thread(target=self._run, name="mpiopt-suggestions", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._loop()
        except _Abandoned:
            pass
        except BaseException as exc:  # noqa: BLE001 - the dispatch loop falls back to the design
            self.error = exc

    def _loop(self) -> None:
        """Prepare a round whenever a result arrived since the last one; refit the kernel after."""
        while self._await_news():
            self._checkpoint()
            job = self._begin_round()
            if job is None:
                return
            clone, tells, defer_fit = job
            t0 = self._clock()
            # slow: outside the lock (the first round, which a group may wait for, polishes little)
            new = clone.prepare_round(polish=min(2 * self.groups, 12) if self.round is not None else 2,
                                      defer_fit=defer_fit, deadline=t0 + self.policy.polish_budget_s,
                                      checkpoint=self._checkpoint)
            round_s = self._clock() - t0
            seen = self._catch_up(new, tells)
            refit = self._install(new, clone, tells, round_s, seen)
            if refit is not None:
                self._refit(refit)

    def _await_news(self) -> bool:
        """Wait until a result arrived since the current round (or there is none yet); False: stop."""
        with self._lock:
            while not self._stop and self._tells == self._round_tells and self.round is not None:
                self._wake.wait()
            return not self._stop

    def _begin_round(self) -> tuple[BayesianSearch, int, bool] | None:
        """The snapshot a round is prepared on, how many results it includes, and whether it keeps
        the last kernel fit (`defer_fit`); None when stopping."""
        with self._lock:
            if self._stop:
                return None
            clone = self.inner.snapshot(self.rounds)
            self._handed = []
            # hand-outs wait for rounds here, and with so few results a fit takes milliseconds: fit
            # the kernel on this round's own data rather than after it
            fit_now = (self.round is not None and clone.refit_due() and self._trials_are_short(first=False)
                       and self.stale_limit() < max(self.groups, 4))
            return clone, self._tells, not fit_now

    def _catch_up(self, new: Round, tells: int) -> tuple[int, int]:
        """Take into the new round, outside the lock, the trials handed out and the results told
        while it was prepared, as long as more than `catch_up_in_lock` are left; returns how far
        it got in `_handed` and `_told` (`_install` takes in the rest, under the lock)."""
        handed_i, told_i = 0, tells
        while True:
            with self._lock:
                handed, told = self._handed[handed_i:], self._told[told_i:]
                if len(handed) + len(told) <= self.policy.catch_up_in_lock or self._stop:
                    return handed_i, told_i
                handed_i, told_i = handed_i + len(handed), told_i + len(told)
            for params in handed:
                self._checkpoint()
                new.add_pending(params)
            for params, loss in told:
                new.learn(params, loss)

    def _install(self, new: Round, clone: BayesianSearch, tells: int, round_s: float,
                 seen: tuple[int, int]) -> BayesianSearch | None:
        """Make `new` the current round, up to date, and adopt the model fitted for it; returns
        a snapshot to refit the kernel on when a refit is due."""
        with self._lock:
            handed, told = self._handed[seen[0]:], self._told[seen[1]:]
            self.rounds += 1
            self.round_s = round_s
            self.inner.adopt_model(clone)
            for params in handed:
                new.add_pending(params)
            for params, loss in told:
                new.learn(params, loss)
            self.round = new
            self._round_tells = tells
            self._wake.notify_all()
            return self.inner.snapshot(self.rounds) if self.inner.refit_due() and not self._stop else None

    def _refit(self, clone: BayesianSearch) -> None:
        """The current round serves meanwhile: now there is time to refit the kernel."""
        clone.refit(checkpoint=self._checkpoint)
        with self._lock:
            self.inner.adopt_model(clone)
            self.fits += 1

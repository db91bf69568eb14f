"""Learning from partial training: models fitted on the rung results of an early-stopping scheduler.

Schedulers such as ASHA and Hyperband judge trials at *rungs*, epoch counts such as 1, 3, 9, 27,
and stop or pause most of them there. Two models learn from them. `LadderModel`, an alternative
that bench/multifidelity.py compares (not used by `mpiopt search`), fits one model on every trial,
scored on the lowest rung's scale in the order the higher rungs give (`ladder_scores`; see its
class). `RungModel`, which `mpiopt search` uses, collects every result per rung and fits its
inner searcher on one rung only, with BOHB's rule (Falkner, Klein and Hutter, "BOHB: Robust and
efficient hyperparameter optimization at scale", ICML 2018): the highest rung with at least
`enough` results. Losses after different numbers of epochs are not comparable, so one model never
mixes rungs; a higher rung is more faithful to the full training, so the model moves up as soon
as a higher rung has enough results, and never back down.

The inner searcher on rung r sees each trial once, as its outcome at r:

* its loss at r, when it arrives;
* a failure (None), when the trial ended without a loss at r: the point is never proposed again;
* nothing yet: the trial is pending there (running, or paused by the scheduler), a fantasy that
  keeps parallel groups apart.

A completed trial (its final word a finite loss) stands at every rung it did not report with its
final loss: its training ended on its own (early stopping) before that rung, so more epochs would
not have changed it. At the top rung (`top`, the training epochs) that is stored as its result;
below, it is what lets such a trial leave the inner searcher's pending points.

On a switch a new inner searcher (`make_inner()`) is told the outcomes at the new rung, trial by
trial, exactly as if it had been the model all along. It is *staged*: the old one goes on
answering until the new one is `ready()` (its first model round is prepared), so that no
hand-out waits for a model at a switch; then the old one is closed.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np

from ..space import Space, encode
from . import _gp
from ._base import Searcher
from ._bayesian import prior_mean

Params = dict[str, Any]
Result = tuple[Params, float | None]


def _finite(loss: float | None) -> float | None:
    """The loss, or None for a trial without one (None, NaN or inf: never a good value)."""
    return loss if loss is not None and math.isfinite(loss) else None


class RungModel(Searcher):
    """Fits the inner searcher on one rung's results: the highest rung with at least `enough` results (BOHB's rule).

    Before any result the model has no rung (`model_rung` is None); the first result fixes it at
    its own rung, which with a scheduler is the lowest one (every trial reaches it first). From
    there it only moves up, to the highest rung with `enough` finite results.

    Args:
        make_inner: builds a fresh inner searcher (at the start and on each switch of rung).
        space: the search space.
        top: the training epochs: a completed trial counts as a result at this rung.
        enough: the results a higher rung needs before the model moves there.
        seed: kept as `self.seed`; the inner searchers' seeds are `make_inner`'s business.

    Attributes:
        results: epochs -> trial -> (params, loss), as reported (the first report of a
            (trial, epochs) wins), plus completed trials at `top`.
        model_rung: the rung the inner searcher is fitted on now (None before any result).
        switches: how many times the model moved up (a staged model counts once it serves).
        staged: the inner searcher being prepared for `staged_rung`, or None.
        observed, pending: the wrapper's own: the final words told via `tell`, and the trials
            asked or added and not finally told.
    """

    def __init__(self, make_inner: Callable[[], Searcher], space: Space, *, top: int, enough: int,
                 seed: int = 0) -> None:
        if top < 1 or enough < 1:
            raise ValueError(f"RungModel needs top >= 1 and enough >= 1, not top={top}, enough={enough}")
        super().__init__(space, seed=seed)
        self.make_inner = make_inner
        self.top = top
        self.enough = enough
        self.results: dict[int, dict[int, Result]] = {}
        self.model_rung: int | None = None
        self.switches = 0
        self.inner = make_inner()
        self._told_inner: set[int] = set()  # trials the current inner searcher has as observations
        self.staged: Searcher | None = None
        self.staged_rung: int | None = None
        self._told_staged: set[int] = set()
        # the coordinator calls these hooks once or now and then: a new inner searcher gets them again
        self._backlog: Callable[[], bool] | None = None
        self._busy: bool | None = None
        self._closed = False
        self._enough_at: set[int] = set()  # rungs found with `enough` finite results (see _rung_due)
        self._asked_now = 0  # hand-outs of the serving inner searcher (its report counts these)
        self._asked_before = 0  # hand-outs of the inner searchers it replaced

    # -- the interface -------------------------------------------------------------------
    def ask(self, trial: int) -> Params:
        self._serve_staged_if_ready()
        params = self.inner.ask(trial)
        self._asked_now += 1
        self.ask_wait_s = self.inner.ask_wait_s
        self.pending[trial] = params
        if self.staged is not None:
            self.staged.add_pending(trial, params)
        return params

    def add_pending(self, trial: int, params: Params) -> None:
        super().add_pending(trial, params)
        for inner in self._inners():
            inner.add_pending(trial, params)

    def drop_pending(self, trial: int) -> None:
        """A paused trial is no fantasy at any rung: it trains no more unless promoted (BOHB's
        models hold their rung's results only); set aside, its point is not proposed again."""
        super().drop_pending(trial)
        for inner in self._inners():
            inner.drop_pending(trial)

    def set_aside(self, trial: int, params: Params) -> None:
        super().set_aside(trial, params)
        for inner in self._inners():
            inner.set_aside(trial, params)

    def tell_rung(self, trial: int, params: Params, epochs: int, loss: float | None) -> None:
        """A result of `trial` at the rung of `epochs` epochs (None, NaN or inf: it has no loss there)."""
        at_rung = self.results.setdefault(epochs, {})
        if trial in at_rung:  # the first report wins: a repeat is the scheduler's echo, not news
            return
        at_rung[trial] = (dict(params), _finite(loss))
        self._after_result(trial)

    def tell(self, trial: int, params: Params, loss: float | None) -> None:
        """The trial's final word: a completed trial (finite loss) counts as a result at `top`
        unless it has one there; one that did not complete reaches the model as a failure when it
        has no loss at the model's rung."""
        super().tell(trial, params, loss)
        final = self.observed[trial][1]
        if final is not None:
            self.results.setdefault(self.top, {}).setdefault(trial, (dict(params), final))
        self._after_result(trial)

    def rung_results(self, rung: int) -> dict[int, Result]:
        """The outcomes at `rung` that the model there is told, in trial order: the reports at
        `rung`, and for a completed trial without one, its final loss (see the module's docs)."""
        reported = self.results.get(rung, {})
        merged = {t: r for t, r in self.observed.items() if r[1] is not None and t not in reported}
        merged.update(reported)
        return dict(sorted(merged.items()))

    # -- optional hooks: the current inner searcher's ------------------------------------------
    def holds_hand_outs(self, may_hold: bool) -> bool:
        self._serve_staged_if_ready()
        return self.inner.holds_hand_outs(may_hold)

    def ready(self) -> bool:
        return self.inner.ready()

    def prefers_fresh(self) -> bool:
        return self.inner.prefers_fresh()

    def watch_backlog(self, results_waiting: Callable[[], bool]) -> None:
        self._backlog = results_waiting
        for inner in self._inners():
            inner.watch_backlog(results_waiting)

    def pause(self, busy: bool) -> None:
        self._busy = busy
        for inner in self._inners():
            inner.pause(busy)

    def report(self) -> str:
        if self.model_rung is None:
            rung = "model on no rung yet"
        else:
            moves = f"{self.switches} switch" + ("" if self.switches == 1 else "es")
            rung = f"model on rung {self.model_rung} ({self._count(self.model_rung)} results, {moves})"
        if self.staged is not None:
            rung += f", rung {self.staged_rung} staged"
        inner = self.inner.report()
        if self._asked_before:  # the serving searcher's report counts its own hand-outs only
            inner = (f"since it serves, {inner}; " if inner else "") + \
                f"{self._asked_before} handed out before, by the models on lower rungs"
        return f"{rung}; {inner}" if inner else rung

    def close(self) -> None:
        self._closed = True
        for inner in self._inners():
            inner.close()

    def _suggest(self) -> Params:  # required by Searcher; ask() is overridden and never calls it
        return self.inner._suggest()

    # -- a result arrives ----------------------------------------------------------------------
    def _after_result(self, trial: int) -> None:
        """Tell the model the trial's news, then move the model up if a higher rung has enough results."""
        if self.model_rung is None and self.results:
            # the first result: its rung is the lowest with any result, and the inner searcher
            # has only failures and pending trials so far, which need no rebuild
            self.model_rung = min(self.results)
        self._tell(self.inner, self.model_rung, self._told_inner, trial)
        if self.staged is not None:
            self._tell(self.staged, self.staged_rung, self._told_staged, trial)
        rung = self._rung_due()
        if rung is not None and not self._closed:  # a closed searcher starts no new inner one (no threads)
            self._stage(rung)

    def _tell(self, inner: Searcher, rung: int | None, told: set[int], trial: int) -> None:
        """The trial's outcome at `rung` to `inner`, if it has one now and `inner` has not seen one."""
        if trial in told:
            return
        outcome = self._outcome(trial, rung)
        if outcome is not None:
            inner.tell(trial, *outcome)
            told.add(trial)

    def _outcome(self, trial: int, rung: int | None) -> Result | None:
        """The trial's result at the rung (as `rung_results` has it), a failure (it ended
        without one), or None: still pending. One lookup: this runs on every result."""
        if rung is not None and trial in self.results.get(rung, {}):
            return self.results[rung][trial]
        final = self.observed.get(trial)
        if final is None or (rung is None and final[1] is not None):
            return None
        return final  # a failure, or a completed trial standing at the rung with its final loss

    def _count(self, rung: int) -> int:
        """Finite results at `rung`: a failure tells the model nothing about a good region."""
        return sum(loss is not None for _, loss in self.rung_results(rung).values())

    def _rung_due(self) -> int | None:
        """The highest rung above the model's (and the staged one's) with `enough` results, if any.

        A rung keeps every result it counts (the first report wins, a final loss only stands
        where no report came), so one found with `enough` is not counted again: the count is
        O(trials), and this runs on every result."""
        floor = self.staged_rung if self.staged is not None else self.model_rung
        if floor is None:
            return None
        for r in self.results:
            if r > floor and r not in self._enough_at and self._count(r) >= self.enough:
                self._enough_at.add(r)
        return max((r for r in self._enough_at if r > floor), default=None)

    # -- a switch of rung ----------------------------------------------------------------------
    def _inners(self) -> list[Searcher]:
        return [self.inner] if self.staged is None else [self.inner, self.staged]

    def _stage(self, rung: int) -> None:
        """Prepare the model on `rung` beside the serving one (replacing a staged one on a lower rung)."""
        if self.staged is not None:
            self.staged.close()
        self.staged, self.staged_rung, self._told_staged = self._build(rung)
        self._serve_staged_if_ready()  # a searcher without background work is ready at once

    def _serve_staged_if_ready(self) -> None:
        """The staged model takes over once it is ready; the old one is closed (its background
        work, if any, is abandoned)."""
        if self.staged is None or not self.staged.ready():
            return
        self.inner.close()
        self.inner, self.model_rung, self._told_inner = self.staged, self.staged_rung, self._told_staged
        self.staged, self.staged_rung, self._told_staged = None, None, set()
        self.switches += 1
        self._asked_before, self._asked_now = self._asked_before + self._asked_now, 0

    def _build(self, rung: int) -> tuple[Searcher, int, set[int]]:
        """A new inner searcher that has seen every trial's outcome at `rung`, in trial order:
        results, then failures, then the trials still pending there, then the paused ones it has no
        result of (set aside); with its rung and the trials it was told."""
        inner = self.make_inner()
        inner.stand_by()  # the serving model hands out until this one is ready
        if self._backlog is not None:
            inner.watch_backlog(self._backlog)
        if self._busy is not None:
            inner.pause(self._busy)
        told: set[int] = set()
        for trial, (params, loss) in self.rung_results(rung).items():
            inner.tell(trial, params, loss)
            told.add(trial)
        for trial in sorted(self.observed):
            outcome = self._outcome(trial, rung)
            if trial not in told and outcome is not None:
                inner.tell(trial, *outcome)
                told.add(trial)
        for trial in sorted(self.pending):
            if trial not in told:
                inner.add_pending(trial, self.pending[trial])
        for trial in sorted(self.aside):  # paused below `rung`: known, not fitted
            if trial not in told:
                inner.set_aside(trial, self.aside[trial])
        return inner, rung, told


def ladder_scores(results: dict[int, dict[int, float]]) -> dict[int, float]:
    """Every trial's score on the lowest rung's scale, in the order the highest rungs give.

    `results`: epochs -> trial -> finite loss. A trial's score starts as its loss at the lowest
    rung it has, among the lowest rung's results; then, rung by rung upwards, the trials with a
    result there swap their scores among themselves so that the better one there holds the
    better score. A trial that stopped at rung 1 keeps its rung-1 loss; the trials promoted past
    it keep the rung-1 losses they had as a set (they earned them), in the order of the highest
    rung they reached. So the model sees every trial, on one scale, and ASHA's own ranking.

    A trial with a result at a higher rung but none at the lowest joins with that result as its
    starting score (a completed trial that stopped early, told at its final loss; see RungModel).
    """
    scores: dict[int, float] = {}
    for rung in sorted(results):
        at_rung = results[rung]
        members = [t for t in at_rung if t in scores]
        ranked = sorted(members, key=lambda t: (at_rung[t], t))
        scores.update(zip(ranked, sorted(scores[t] for t in members), strict=True))
        scores.update((t, loss) for t, loss in at_rung.items() if t not in scores)
    return scores


class LadderModel(Searcher):
    """Fits one inner searcher on every trial, each scored by `ladder_scores` of its rung results.

    BOHB's rule (`RungModel`) fits the model on one rung and leaves out the many trials stopped
    below it; the ladder keeps them all on the lowest rung's scale and lets the higher rungs order
    the trials that reached them (bench/multifidelity.py compares the two).

    A trial is pending in the inner searcher until its first result; from then on it is an
    observation whose score may change as it, or others, reach higher rungs (it is told again
    with its new score). A paused or promoted trial is therefore never a fantasy: it has a score.
    A trial that ends without any result reaches the model as a failure.

    Args:
        inner: the searcher fitted on the scores (asked for every suggestion).
        space: the search space.
        top: the training epochs: a completed trial counts as a result at this rung.
        seed: kept as `self.seed`.

    Attributes:
        results: epochs -> trial -> (params, loss), as reported (the first report of a
            (trial, epochs) wins), plus completed trials at `top`.
        scores: trial -> the score the inner searcher was last told.
    """

    def __init__(self, inner: Searcher, space: Space, *, top: int, seed: int = 0) -> None:
        if top < 1:
            raise ValueError(f"LadderModel needs top >= 1, not top={top}")
        super().__init__(space, seed=seed)
        self.inner = inner
        self.top = top
        self.results: dict[int, dict[int, Result]] = {}
        self.scores: dict[int, float] = {}
        self.ladder = Ladder()
        self._params: dict[int, Params] = {}

    # -- the interface -------------------------------------------------------------------
    def ask(self, trial: int) -> Params:
        params = self.inner.ask(trial)
        self.ask_wait_s = self.inner.ask_wait_s
        self.pending[trial] = params
        return params

    def add_pending(self, trial: int, params: Params) -> None:
        super().add_pending(trial, params)
        if trial not in self.scores:  # a promoted trial is an observation already
            self.inner.add_pending(trial, params)

    def drop_pending(self, trial: int) -> None:
        super().drop_pending(trial)
        if trial not in self.scores:
            self.inner.drop_pending(trial)

    def set_aside(self, trial: int, params: Params) -> None:
        super().set_aside(trial, params)
        if trial not in self.scores:
            self.inner.set_aside(trial, params)

    def tell_rung(self, trial: int, params: Params, epochs: int, loss: float | None) -> None:
        """A result of `trial` at the rung of `epochs` epochs (None, NaN or inf: it has no loss there)."""
        at_rung = self.results.setdefault(epochs, {})
        if trial in at_rung:  # the first report wins: a repeat is the scheduler's echo, not news
            return
        at_rung[trial] = (dict(params), _finite(loss))
        self._add(trial, at_rung[trial][0], epochs, at_rung[trial][1])

    def tell(self, trial: int, params: Params, loss: float | None) -> None:
        """The trial's final word: a completed trial (finite loss) counts as a result at `top`
        unless it has one there; one without any result reaches the model as a failure."""
        super().tell(trial, params, loss)
        final = self.observed[trial][1]
        if final is None:
            if trial not in self.scores:
                self.inner.tell(trial, params, None)
            return
        at_top = self.results.setdefault(self.top, {})
        if trial not in at_top:
            at_top[trial] = (dict(params), final)
            self._add(trial, at_top[trial][0], self.top, final)

    # -- optional hooks: the inner searcher's ----------------------------------------------------
    def holds_hand_outs(self, may_hold: bool) -> bool:
        return self.inner.holds_hand_outs(may_hold)

    def ready(self) -> bool:
        return self.inner.ready()

    def prefers_fresh(self) -> bool:
        return self.inner.prefers_fresh()

    def watch_backlog(self, results_waiting: Callable[[], bool]) -> None:
        self.inner.watch_backlog(results_waiting)

    def pause(self, busy: bool) -> None:
        self.inner.pause(busy)

    def report(self) -> str:
        counts = ", ".join(f"{len(self.results[r])} at rung {r}" for r in sorted(self.results)) or "no results yet"
        inner = self.inner.report()
        return f"model on all rungs ({counts}); {inner}" if inner else f"model on all rungs ({counts})"

    def close(self) -> None:
        self.inner.close()

    def _suggest(self) -> Params:  # required by Searcher; ask() is overridden and never calls it
        return self.inner._suggest()

    # -- a result arrives ----------------------------------------------------------------------
    def _add(self, trial: int, params: Params, rung: int, loss: float | None) -> None:
        """Score the trial's new result, and tell the inner searcher every score that changed."""
        if loss is None:
            return
        self._params[trial] = params
        if trial not in self.scores:  # its first result: it joins with its own loss
            self._retell({trial: loss})
            return
        changed = self.ladder.join(rung, trial, loss, self.scores[trial])
        self._retell(self.ladder.propagate(rung, changed))

    def _retell(self, changed: dict[int, float]) -> None:
        for trial, score in changed.items():
            if self.scores.get(trial) != score:
                self.scores[trial] = score
                self.inner.tell(trial, self._params[trial], score)


class Ladder:
    """`ladder_scores` kept up to date one result at a time, in time proportional to the scores
    that change (the trials whose rank at a rung lies between the newcomer's two ranks there).

    Per rung, the members (trials with a result there that had a score before it) are kept sorted
    by their loss there, and the scores they brought sorted by value: the member of rank k holds
    the k-th smallest score. Results of a trial must arrive in the order of its rungs, as a
    trial's reports do.
    """

    def __init__(self) -> None:
        self.ranked: dict[int, list[tuple[float, int]]] = {}  # rung -> (loss there, trial), sorted
        self.values: dict[int, list[float]] = {}  # rung -> the scores its members brought, sorted
        self.brought: dict[int, dict[int, float]] = {}  # rung -> trial -> the score it brought
        self.rungs_of: dict[int, list[int]] = {}  # trial -> the rungs it is a member of, ascending

    def join(self, rung: int, trial: int, loss: float, brought: float) -> dict[int, float]:
        """`trial`, scored `brought` so far, has `loss` at `rung`: the members whose score there changed."""
        ranked, values = self.ranked.setdefault(rung, []), self.values.setdefault(rung, [])
        self.brought.setdefault(rung, {})[trial] = brought
        self.rungs_of.setdefault(trial, []).append(rung)
        i = bisect.bisect_left(ranked, (loss, trial))
        ranked.insert(i, (loss, trial))
        j = bisect.bisect_left(values, brought)
        values.insert(j, brought)
        return self._holders(rung, i, j)

    def rebring(self, rung: int, trial: int, brought: float) -> dict[int, float]:
        """A member of `rung` brings a new score there: the members whose score there changed."""
        values = self.values[rung]
        old = self.brought[rung][trial]
        self.brought[rung][trial] = brought
        a = bisect.bisect_left(values, old)
        del values[a]
        b = bisect.bisect_left(values, brought)
        values.insert(b, brought)
        return self._holders(rung, a, b)

    def _holders(self, rung: int, a: int, b: int) -> dict[int, float]:
        """The members of ranks a to b (either order) at `rung` and their scores: after an insert
        at one rank and an insert or a move at the other, only these can have changed."""
        ranked, values = self.ranked[rung], self.values[rung]
        return {ranked[k][1]: values[k] for k in range(min(a, b), max(a, b) + 1)}

    def propagate(self, rung: int, changed: dict[int, float]) -> dict[int, float]:
        """Carry the changes at `rung` up to the higher rungs the changed trials are members of;
        returns each affected trial's final score (its score at its highest rung)."""
        final: dict[int, float] = {}
        due: dict[int, dict[int, float]] = {rung: changed}
        while due:
            at = min(due)
            for trial, score in due.pop(at).items():
                nxt = next((r for r in self.rungs_of[trial] if r > at), None)
                if nxt is None:
                    final[trial] = score
                elif self.brought[nxt][trial] != score:
                    for member, s in self.rebring(nxt, trial, score).items():
                        due.setdefault(nxt, {})[member] = s
        return final


def rung_offsets(results: dict[int, dict[int, float]]) -> dict[int, float]:
    """How much lower every rung's losses lie than the lowest rung's: rung by rung upwards, the
    mean change from the rung below among the trials with a result at both (0 without any).

    `results`: epochs -> trial -> finite loss. Only paired differences count: the trials at a
    higher rung are the ones promoted there, better than the lower rung's average, so comparing
    the rungs' own means would take selection for improvement.
    """
    rungs = sorted(results)
    offsets = {rung: 0.0 for rung in rungs[:1]}
    for low, high in pairwise(rungs):
        changes = [loss - results[low][t] for t, loss in results[high].items() if t in results[low]]
        offsets[high] = offsets[low] + (sum(changes) / len(changes) if changes else 0.0)
    return offsets


class BudgetModel(Searcher):
    """One GP on (configuration, log epochs), fitted on every rung result; suggestions maximise
    expected improvement at the top rung: the budget as an input of the GP.

    Where BOHB's rule (`RungModel`) fits one rung and leaves out the trials stopped below it, this
    model keeps them all, and its kernel learns from the trials with results at several rungs how
    far a rung predicts the top: a trial's rung-1 result counts as much as the data say it should,
    and a configuration unlike the fast starters is not judged by its first epoch alone. Before the
    fit, each rung's losses are shifted by `rung_offsets`, so that the kernel models how
    configurations differ rather than how every learning curve falls.

    It suggests in `ask` itself (a fit of the kernel every `refit_every` suggestions, warm-started),
    so a suggestion takes as long as a fit on every result: bench/multifidelity.py compares it
    (`budget+asha`); `mpiopt search` uses `RungModel`, whose inner searcher prepares suggestions in
    a background thread (`Prefetching`).

    Pending trials are fantasies at the top rung (a kriging believer no better than the best
    prediction), so parallel groups get different points. A trial that ends without any result
    stands at the lowest rung with the worst loss seen (never a good value).

    Args:
        space: the search space.
        top: the training epochs: a completed trial counts as a result at this rung.
        seed: for the design points and the candidates.
        initial_points: trials with a result before the first fit; until then, Sobol points.
        refit_every: suggestions between two fits of the kernel's hyperparameters.

    Attributes:
        results: epochs -> trial -> loss (finite only; the first report of a (trial, epochs) wins),
            plus completed trials at `top`.
    """

    def __init__(self, space: Space, *, top: int, seed: int = 0, initial_points: int = 5,
                 refit_every: int = 4) -> None:
        if top < 2 or initial_points < 1 or refit_every < 1:
            raise ValueError(f"BudgetModel needs top >= 2, initial_points >= 1 and refit_every >= 1, not "
                             f"top={top}, initial_points={initial_points}, refit_every={refit_every}")
        super().__init__(space, seed=seed)
        self.coder = _gp.UnitCoder(space)
        self.scales = _gp.Scales.of(self.coder.dim + 1, self.coder.blocks)  # and the budget's
        self.top = top
        self.initial_points = initial_points
        self.refit_every = refit_every
        self.results: dict[int, dict[int, float]] = {}
        self._x: dict[int, np.ndarray] = {}  # trial -> its configuration in the unit cube
        self._rng = np.random.default_rng(seed)
        self._hyper: _gp.Hyper | None = None
        self._suggested = 0

    def tell_rung(self, trial: int, params: Params, epochs: int, loss: float | None) -> None:
        """A result of `trial` at the rung of `epochs` epochs (None, NaN or inf: it has no loss there)."""
        loss = _finite(loss)
        if loss is not None:
            self._x.setdefault(trial, self.coder.encode(params))
            self.results.setdefault(epochs, {}).setdefault(trial, loss)

    def tell(self, trial: int, params: Params, loss: float | None) -> None:
        """The trial's final word: a completed trial counts as a result at `top` unless it has one there."""
        super().tell(trial, params, loss)
        self._x.setdefault(trial, self.coder.encode(params))
        self.tell_rung(trial, params, self.top, self.observed[trial][1])

    def report(self) -> str:
        counts = ", ".join(f"{len(self.results[r])} at rung {r}" for r in sorted(self.results)) or "no results yet"
        return f"one GP on configuration and epochs ({counts})"

    def _suggest(self) -> Params:
        self._suggested += 1
        with_results = {t for at_rung in self.results.values() for t in at_rung}
        if len(with_results) < self.initial_points:
            return self._design_point()
        return self._best_new(*self._posterior())

    def _design_point(self) -> Params:
        known = self.known_points()
        for k in range(self._suggested, self._suggested + 64):
            u = _gp.sobol(len(self.space.params), k, 1, self.seed)
            params = self.coder.decode(self.coder.from_design(u)[0])
            if tuple(encode(self.space, params)) not in known:
                return params
        return self.coder.decode(self.coder.from_design(self._rng.random((1, len(self.space.params))))[0])

    def _training_data(self) -> tuple[np.ndarray, np.ndarray]:
        """Every result as (configuration, log epochs / log top) -> loss less its rung's offset,
        and every trial that ended without a result at the lowest rung, at the worst of them."""
        offsets = rung_offsets(self.results)
        rows, ys = [], []
        for rung, at_rung in sorted(self.results.items()):
            for trial, loss in at_rung.items():
                rows.append(np.append(self._x[trial], self._budget(rung)))
                ys.append(loss - offsets[rung])
        with_results = {t for at_rung in self.results.values() for t in at_rung}
        failed = [t for t, (_, loss) in self.observed.items() if loss is None and t not in with_results]
        lowest = self._budget(min(self.results))
        rows += [np.append(self._x[t], lowest) for t in failed]
        ys += [max(ys)] * len(failed)
        return np.array(rows), np.array(ys)

    def _budget(self, epochs: int) -> float:
        return math.log(epochs) / math.log(self.top)

    def _posterior(self) -> tuple[_gp.Posterior, np.ndarray, float]:
        """The GP on every result with the pending trials as fantasies at the top, its candidates
        (their acquisition computed), and the best predicted loss at the top of a trial seen."""
        X, y = self._training_data()
        mean, scale = prior_mean(y)
        y = (y - mean) / scale
        if self._hyper is None or self._suggested % self.refit_every == 0:
            self._hyper = _gp.fit_hyper(X, y, self._hyper, scales=self.scales, maxiter=60)
        fresh = [p for t, p in self.pending.items() if t not in self._x]
        post = _gp.Posterior(self._hyper, X, y, capacity=len(X) + len(fresh))
        seen = np.array(list(self._x.values()))
        at_top, _ = post.predict(self._at_top(seen))
        best = float(at_top.min())
        found = _gp.candidates(self.coder, seen, at_top, self._rng)
        post.set_candidates(self._at_top(found))
        for params in fresh:
            z = self._at_top(self.coder.encode(params)[None, :])[0]
            post.add_fantasy(z, "believer_clipped", best)
        return post, found, best

    @staticmethod
    def _at_top(X: np.ndarray) -> np.ndarray:
        return np.hstack([X, np.ones((len(X), 1))])

    def _best_new(self, post: _gp.Posterior, found: np.ndarray, best: float) -> Params:
        """The candidate of highest expected improvement that no trial has tried or is trying."""
        gain = _gp.acquisition("EI", post.mu_c, post.var_c, best)
        known = self.known_points()
        for k in np.argsort(-gain):
            params = self.coder.decode(found[k])
            if tuple(encode(self.space, params)) not in known:
                return params
        return self._design_point()

"""Bayesian optimisation aware of pending points.

The first `initial_points` suggestions come from a scrambled Sobol design (space-filling, unlike
independent random draws). Then the surrogate takes over:

* `GP` (the default): mpiopt's own Gaussian process (`_gp.py`): one hyperparameter fit per batch,
  pending points and earlier picks of a batch added as fantasy observations with cheap posterior
  updates ("believer_clipped", see `_gp.py`), the acquisition maximised over space-filling and
  local candidates and polished by L-BFGS.
* `RF`, `ET`, `GBRT`: scikit-optimize's tree surrogates, the pending points at the best completed
  value (the constant liar).

Trials that did not complete are fitted at the worst completed value (never as good as any); the
GP fits results far above the rest at the worst within a fence (`tame_outliers`).

The GP's prior mean is pessimistic: the worst loss seen plus a fifth of the range of the losses
(`prior_mean`), not their average. Where the model knows nothing it expects a bad trial, so the
acquisition leans on the neighbourhood of good points, and several groups searching at once refine
the best basin instead of spreading over the flat rest of the space (De Ath, Fieldsend and Everson,
"What do you mean? The role of the mean function in Bayesian optimisation", GECCO 2020).

A background caller (`Prefetching`) works on a copy (`snapshot`) and takes its model back
(`adopt_model`); it passes its limits as arguments: `defer_fit` (keep the last kernel fit, refit
later with `refit`), a polish `deadline` and a `checkpoint` called between steps.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..space import Space, encode, to_skopt
from . import _gp
from ._base import Searcher
from ._random import RandomDraw

# The surrogate's fitting chatter (length scales at their bounds, repeated points) is not the
# user's concern. Set once for the process: `warnings.catch_warnings` is not thread-safe, and
# suggestions are computed in a background thread while the coordinator runs.
warnings.filterwarnings("ignore", module=r"sklearn\.gaussian_process")
warnings.filterwarnings("ignore", module=r"skopt\.")

PESSIMISM = 0.2  # the prior mean sits this share of the losses' range above the worst loss seen
OUTLIER_REACH = 100  # interquartile ranges above the upper quartile: see `tame_outliers`

# Past these sizes the GP works on a bounded part of its data, so that a round costs about the same
# after 20,000 results as after a few hundred and its memory stays bounded (docs/design.md, "The
# search at scale"); below them nothing changes.
MAX_TRAIN = 300  # results fitted: the best half, the most recent quarter of the rest, a spread of the others
MAX_FANTASIES = 256  # running trials conditioned on: the latest hand-outs
MAX_ROUND_GROWTH = 256  # hand-outs a round conditions on before the next round replaces it
EXAMINED_PER_HAND_OUT = 64  # distinct candidates a hand-out checks before it falls back to the design

Checkpoint = Callable[[], None]


def prior_mean(y: np.ndarray) -> tuple[float, float]:
    """The GP's prior mean and output scale for the losses `y`; the GP is fitted on
    (y - mean) / scale. The mean is the worst loss plus PESSIMISM times the range (see above)."""
    worst = float(y.max())
    with np.errstate(over="ignore"):
        sd = float(y.std())
    if not math.isfinite(sd):  # losses past 1e154: their squares overflow, so scale them first
        top = float(np.abs(y).max())
        sd = float((y / top).std()) * top
    return worst + PESSIMISM * (worst - float(y.min())), sd or 1.0


def tame_outliers(y: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The losses as the GP fits them, with the fence and the value a loss beyond it is fitted at:
    a loss more than OUTLIER_REACH interquartile ranges above the upper quartile (a penalty such
    as 1e12 for an infeasible point) is fitted at the worst loss within the fence, as a failed
    trial is. Left as they are, a few such values set the output scale, and the GP sees the rest
    as flat. Where the quartiles meet (ties), no loss is called far from the rest."""
    low, high = np.quantile(y, [0.25, 0.75])
    if not high > low:
        return y, math.inf, math.inf
    fence = float(high + OUTLIER_REACH * (high - low))
    far = y > fence
    top = float(y[~far].max())
    return (np.where(far, top, y) if far.any() else y), fence, top


def _gbrt(random_state: int):
    """scikit-optimize 0.10's GBRT surrogate, mended for current scikit-learn and numpy."""
    from sklearn.ensemble import GradientBoostingRegressor
    from skopt.learning import GradientBoostingQuantileRegressor

    class GBRT(GradientBoostingQuantileRegressor):
        _estimator_type = "regressor"

        def __sklearn_tags__(self):
            tags = super().__sklearn_tags__()
            tags.estimator_type = "regressor"
            return tags

        def predict(self, X, return_std=False, return_quantiles=False):
            if not return_std or return_quantiles:
                return super().predict(X, return_std=False, return_quantiles=return_quantiles)
            q = list(self.quantiles)
            low, mid, high = (self.regressors_[q.index(v)].predict(X) for v in (0.16, 0.5, 0.84))
            return mid, (high - low) / 2.0

    return GBRT(base_estimator=GradientBoostingRegressor(n_estimators=30, loss="quantile"),
                random_state=random_state)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() > deadline


class BayesianSearch(Searcher):
    """A Sobol design for the first `initial_points` trials, then the surrogate's choice.

    `batch_rule` (not a user option; the benchmark compares them): how a pending point is
    accounted for by the GP -- "believer_clipped" (default), "believer" or "liar".
    """

    def __init__(self, space: Space, *, seed: int = 0, surrogate: str = "GP", acquisition: str = "gp_hedge",
                 initial_points: int = 10, batch_rule: str = "believer_clipped") -> None:
        super().__init__(space, seed=seed)
        self.surrogate = surrogate
        self.acquisition = acquisition
        self.initial_points = initial_points
        self.batch_rule = batch_rule
        # one stream for the fallback draws and the tree surrogates' seeds
        self._random = RandomDraw(space, np.random.RandomState(seed))
        self._dims = to_skopt(space)
        self.coder = _gp.UnitCoder(space)
        self.scales = _gp.Scales.of(self.coder.dim, self.coder.blocks)
        self._design = np.zeros((0, self.coder.dim))
        self._discrete = bool(self.coder.integer or self.coder.blocks)
        # imported now, not in the background thread in the middle of a search: loading compiled
        # modules holds the interpreter lock for a long time
        import scipy.optimize  # noqa: F401
        import scipy.special  # noqa: F401
        from scipy.stats import qmc  # noqa: F401
        self.hyper: _gp.Hyper | None = None
        self.fitted_on = 0  # the number of results when `hyper` was fitted
        self._ready = False  # see `model_ready`
        self.gains = np.zeros(len(_gp.ACQUISITIONS))
        self._proposals: np.ndarray | None = None  # each acquisition's favourite at the last fit (gp_hedge)

    def _suggest(self) -> dict[str, Any]:
        return self.suggest_batch(1)[0]

    # -- working beside a background caller ------------------------------------------------------
    def snapshot(self, round_no: int) -> BayesianSearch:
        """A copy to prepare round `round_no` on while this one goes on handing out and learning.

        It has its own observed, pending and set-aside points and gp_hedge gains, and its own random
        stream seeded by the round number, so that preparing a round never advances this one's.
        """
        twin = copy.copy(self)
        twin.observed = dict(self.observed)
        twin.pending = dict(self.pending)
        twin.aside = dict(self.aside)
        twin.gains = self.gains.copy()
        twin._random = self._random.with_rng(np.random.RandomState([self.seed, round_no]))
        return twin

    def adopt_model(self, other: BayesianSearch) -> None:
        """Take the model of a snapshot: its kernel fit (and the data size it was fitted on) and
        gp_hedge's gains and last proposals, so that the next snapshot starts from them."""
        self.hyper, self.fitted_on = other.hyper, other.fitted_on
        self.gains, self._proposals = other.gains, other._proposals

    # -- the initial design ------------------------------------------------------------------
    def design_point(self) -> dict[str, Any]:
        """The next point of the Sobol design that is not known yet (index: points handed out so far)."""
        start = self.handed_out()
        if len(self._design) < start + 64:  # the sequence, drawn a block at a time
            self._design = self.coder.from_design(_gp.sobol(len(self.space), 0, 2 * (start + 64), self.seed))
        known = None
        for idx in range(start, start + 64):
            params = self.coder.decode(self._design[idx])
            if not self._discrete:  # a continuous space never repeats a Sobol point
                return params
            known = known if known is not None else self.known_points()
            if tuple(encode(self.space, params)) not in known:
                return params
        return self._draw()

    def _draw(self) -> dict[str, Any]:
        """A random unknown point: the rare fallback when the design or a surrogate repeats one."""
        return self._random.draw(self.known_points())

    def model_ready(self) -> bool:
        """The surrogate is used once the design is handed out and half of it has completed (and
        from then on: results are never taken back, and counting them is a walk of all of them)."""
        if not self._ready:
            known = self.handed_out()
            done = len(self.completed)
            self._ready = known >= self.initial_points and done >= max(2, math.ceil(self.initial_points / 2))
        return self._ready

    # -- batches -------------------------------------------------------------------------------
    def suggest_batch(self, k: int, *, defer_fit: bool = False, deadline: float | None = None,
                      checkpoint: Checkpoint | None = None) -> list[dict[str, Any]]:
        """`k` suggestions, each aware of the pending points and of the ones before it.

        Args:
            k: the number of suggestions.
            defer_fit: keep the last kernel hyperparameters, if any (the caller refits them when
                `refit_due()`), so that a fit on many points never delays the batch.
            deadline: no polishing after this `time.perf_counter()` value.
            checkpoint: called between steps (a background caller lets others in there).
        """
        out: list[dict[str, Any]] = []
        tmp = []
        try:
            while len(out) < k and not self.model_ready():
                out.append(self.design_point())
                tmp.append(-10**9 - len(out))
                self.pending[tmp[-1]] = out[-1]  # the batch's own points are pending for what follows
            if len(out) < k:
                rest = k - len(out)
                if self.surrogate == "GP":
                    out += self._gp_batch(rest, defer_fit=defer_fit, deadline=deadline, checkpoint=checkpoint)
                else:
                    out += self._skopt_batch(rest)
        finally:
            for key in tmp:
                self.pending.pop(key, None)
        return out

    def _data(self) -> tuple[np.ndarray, np.ndarray, int, tuple[float, float]]:
        """Encoded points and losses: completed ones first, then the failed ones at the worst loss;
        past MAX_TRAIN results, the part `_bounded` keeps; far outliers tamed (`tame_outliers`,
        whose fence and value above it come last)."""
        if len(self.observed) > MAX_TRAIN:
            done, failed, worst = self._bounded()
        else:
            done = self.completed
            failed = [p for p, v in self.observed.values() if v is None]
            worst = max(v for _, v in done)
        pts = [p for p, _ in done] + failed
        y = np.array([float(v) for _, v in done] + [worst] * len(failed))
        X = np.array([self.coder.encode(p) for p in pts])
        y, fence, top = tame_outliers(y)
        return X, y, len(done), (fence, top)

    def _bounded(self) -> tuple[list[tuple[dict[str, Any], float]], list[dict[str, Any]], float]:
        """MAX_TRAIN results (completed, failed), in the order they came, and the worst loss of all:
        the best half of the completed ones, where the search refines; the most recent quarter of
        the rest, where the groups work now; and a draw from the others (seeded), for the shape of
        the whole space."""
        entries = list(self.observed.values())
        failed = np.array([v is None for _, v in entries])
        losses = np.array([np.inf if v is None else v for _, v in entries])
        worst = float(losses[~failed].max())
        keep = np.zeros(len(entries), dtype=bool)
        keep[np.argsort(losses, kind="stable")[:MAX_TRAIN // 2]] = True
        keep[np.flatnonzero(~keep)[-(MAX_TRAIN // 4):]] = True
        rest = np.flatnonzero(~keep)
        rng = np.random.default_rng([self.seed, len(entries)])
        keep[rng.choice(rest, size=MAX_TRAIN - int(keep.sum()), replace=False)] = True
        chosen = [entries[i] for i in np.flatnonzero(keep)]
        return [(p, v) for p, v in chosen if v is not None], [p for p, v in chosen if v is None], worst

    def _posterior(self, extra: int, *, defer_fit: bool = False, checkpoint: Checkpoint | None = None):
        """The GP on the data, with every pending point added at its fantasy value; the kernel is
        fitted first unless `defer_fit` and there is a fit to keep."""
        X, y, n_done, taming = self._data()
        if checkpoint is not None:
            checkpoint()
        mean, sd = prior_mean(y)
        ys = (y - mean) / sd
        rng = np.random.default_rng([self.seed, len(self.observed), len(self.pending)])
        if self.hyper is None or not defer_fit:
            # on a bounded part of many results one start is enough, and three cost seconds
            restarts = 1 if len(self.observed) > MAX_TRAIN else 3 if self.hyper is None else 2
            self.hyper = _gp.fit_hyper(X, ys, self.hyper, scales=self.scales, restarts=restarts, rng=rng,
                                        checkpoint=checkpoint)
            self.fitted_on = len(self.observed)
        running = list(self.pending.values())[-MAX_FANTASIES:]
        post = _gp.Posterior(self.hyper, X, ys, capacity=len(X) + len(running) + extra, checkpoint=checkpoint)
        best = float(ys[:n_done].min())
        known = {tuple(np.round(x, 9)) for x in X}
        known |= {tuple(np.round(self.coder.encode(p), 9)) for p in self.aside.values()}  # paused: not fitted
        rows: dict[tuple, tuple[int, float]] = {}  # pending point -> (its row in `post`, its fantasy value)
        for p in running:
            if checkpoint is not None:
                checkpoint()
            x = self.coder.encode(p)
            known.add(tuple(np.round(x, 9)))
            row = post.n
            rows[tuple(encode(self.space, p))] = (row, post.add_fantasy(x, self.batch_rule, best))
        C = _gp.candidates(self.coder, X[:n_done], ys[:n_done], rng)
        post.set_candidates(C, checkpoint)
        return post, (mean, sd, best, float(ys.max()), taming), rng, known, rows

    def _propose(self, post: _gp.Posterior, best: float) -> None:
        """Remember each acquisition's favourite candidate, for gp_hedge's credit at the next fit."""
        if self.acquisition == "gp_hedge":
            self._proposals = np.array([post.C[int(np.argmax(_gp.acquisition(a, post.mu_c, post.var_c, best)))]
                                        for a in _gp.ACQUISITIONS])

    def _gp_batch(self, k: int, *, defer_fit: bool, deadline: float | None,
                  checkpoint: Checkpoint | None) -> list[dict[str, Any]]:
        post, (_, _, best, _, _), rng, known, _ = self._posterior(k, defer_fit=defer_fit, checkpoint=checkpoint)
        kinds = self._kinds(post, k, rng)  # credits the previous proposals under the new fit
        self._propose(post, best)
        picks = _gp.select(post, k, kinds, best, rule=self.batch_rule, coder=self.coder,
                           polish_picks=0 if _past(deadline) else k, exclude=known, deadline=deadline,
                           checkpoint=checkpoint)
        return self._unknown([self.coder.decode(x) for x in picks])

    def _unknown(self, picks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The picks, each known point among them replaced by a random unknown one: in a small
        discrete space every candidate the acquisition ranks high can be a point already tried."""
        known = self.known_points()
        return [self._unknown_or_drawn(params, known) for params in picks]

    def _unknown_or_drawn(self, params: dict[str, Any], known: set[tuple]) -> dict[str, Any]:
        """`params`, or a random unknown point where it is known; `known` then holds the one returned."""
        if tuple(encode(self.space, params)) in known:  # as known_points has it: inactive ones left out
            params = self._random.draw(known)
        known.add(tuple(encode(self.space, params)))
        return params

    # -- rounds (suggestions handed out one at a time) ------------------------------------------
    def prepare_round(self, polish: int = 6, *, defer_fit: bool = False, deadline: float | None = None,
                      checkpoint: Checkpoint | None = None) -> Round:
        """A posterior ready to hand out suggestions one at a time, each in O(n C) (see `Round`).

        The best `polish` candidates of the acquisition(s) are polished by L-BFGS now (until
        `deadline`, a `time.perf_counter()` value) and join the candidate set. `defer_fit` and
        `checkpoint` as for `suggest_batch`.
        """
        post, scaling, rng, known, rows = self._posterior(MAX_ROUND_GROWTH, defer_fit=defer_fit, checkpoint=checkpoint)
        best = scaling[2]
        probs = self._kinds(post, 1, rng, probabilities=True)
        self._propose(post, best)
        extra = self._polished_candidates(post, best, polish, deadline, checkpoint) if self.coder.continuous else []
        if extra:
            post.add_candidates(np.array(extra))
        return Round(self, post, rows, scaling, rng, probs, known)

    def _polished_candidates(self, post: _gp.Posterior, best: float, polish: int, deadline: float | None,
                             checkpoint: Checkpoint | None) -> list[np.ndarray]:
        """The best `polish` candidates, taken in turn from each acquisition, polished by L-BFGS."""
        kinds = list(_gp.ACQUISITIONS) if self.acquisition == "gp_hedge" else [self.acquisition]
        extra = []
        for i in range(polish):
            if _past(deadline):
                break
            kind = kinds[i % len(kinds)]
            score = _gp.acquisition(kind, post.mu_c, post.var_c, best)
            x0 = post.C[np.argsort(-score)[i // len(kinds)]]
            x, _ = _gp.polish(post, x0, kind, best, self.coder.free_at(x0), checkpoint=checkpoint)
            extra.append(x)
        return extra

    def refit_due(self) -> bool:
        """With deferred fits: refit once the data grew by a tenth since the last fit, and after
        every result while there are fewer than 10 (such fits take milliseconds, and a fit on a
        handful of points is a poor guide a few results later)."""
        n = len(self.observed)
        return self.surrogate == "GP" and self.hyper is not None and n - self.fitted_on >= max(1, 0.1 * self.fitted_on)

    def refit(self, maxiter: int = 60, *, checkpoint: Checkpoint | None = None) -> None:
        """Fit the kernel hyperparameters now, warm-started (for callers that defer fits)."""
        X, y, _, _ = self._data()
        mean, sd = prior_mean(y)
        ys = (y - mean) / sd
        self.hyper = _gp.fit_hyper(X, ys, self.hyper, scales=self.scales, restarts=1, maxiter=maxiter,
                                    checkpoint=checkpoint)
        self.fitted_on = len(self.observed)

    def _kinds(self, post: _gp.Posterior, k: int, rng: np.random.Generator, probabilities: bool = False):
        """The acquisition of each pick; gp_hedge draws one by the gains of its past proposals."""
        if self.acquisition != "gp_hedge":
            return None if probabilities else [self.acquisition] * k
        if self._proposals is not None:
            mu, _ = post.predict(self._proposals)
            self.gains -= mu  # a proposal the refitted model thinks good earns its acquisition credit
        z = self.gains - self.gains.max()
        probs = np.exp(z) / np.exp(z).sum()
        if probabilities:
            return probs
        return [_gp.ACQUISITIONS[int(i)] for i in rng.choice(len(probs), size=k, p=probs)]

    def _skopt_batch(self, k: int) -> list[dict[str, Any]]:
        """scikit-optimize's tree surrogates, pending points and earlier picks at the constant liar."""
        from skopt import Optimizer

        completed = self.completed
        X = [encode(self.space, p, fill=True) for p, _ in completed]
        y = [float(v) for _, v in completed]
        worst, best = max(y), min(y)
        for p, v in self.observed.values():
            if v is None:
                X.append(encode(self.space, p, fill=True))
                y.append(worst)
        for p in self.pending.values():
            X.append(encode(self.space, p, fill=True))
            y.append(best)
        out = []
        known = self.known_points()
        for _ in range(k):
            seed = int(self._random.rng.randint(0, 2**31 - 1))
            estimator = _gbrt(seed) if self.surrogate == "GBRT" else self.surrogate
            opt = Optimizer(self._dims, base_estimator=estimator, n_initial_points=1, acq_func=self.acquisition,
                            random_state=seed)
            opt.tell(X, y)
            params = self._unknown_or_drawn(self.space.from_list(opt.ask()), known)
            out.append(params)
            X.append(encode(self.space, params, fill=True))
            y.append(best)
        return out


class Round:
    """Suggestions from one surrogate fit, handed out one at a time as groups become free.

    Built in the background (`BayesianSearch.prepare_round`): the GP with every running trial as a
    fantasy observation, and a candidate set with its posterior mean and variance. A hand-out
    (`hand_out`) first corrects the posterior for results that arrived since -- a finished trial's
    fantasy value replaced by its real one, an exact O(n C) update of the candidates' means -- then
    takes the best candidate by the acquisition, polishes it briefly by L-BFGS under that corrected
    posterior, and adds it as a fantasy (O(n^2 + n C)). So a suggestion always knows every result
    so far; only the kernel hyperparameters and the candidate set date from the round, and the
    polish at hand-out makes up for most of that.
    """

    def __init__(self, owner: BayesianSearch, post, rows, scaling, rng, probs, known) -> None:
        self.owner = owner
        self.post = post
        self.rows = rows
        # the losses' scaling, the best and worst scaled loss, and the outlier fence and its value
        self.mean, self.sd, self.best, self.worst, (self.fence, self.top) = scaling
        self.rng = rng
        self.probs = probs
        self.known = set(known)
        self.taken = _gp.rows_in(post.C, self.known)  # in a discrete space many candidates are known points
        self.applied: set[tuple] = set()
        self.polished = 0  # hand-outs whose pick was polished
        self.limit = post.n + MAX_ROUND_GROWTH  # past it, a hand-out is only kept from being handed out again

    def add_pending(self, params: dict[str, Any]) -> None:
        """A trial handed out by someone else (an older round, a re-run) is running too."""
        key = tuple(encode(self.owner.space, params))
        if key in self.rows:
            return
        x = self.owner.coder.encode(params)
        self.known.add(tuple(np.round(x, 9)))
        self.taken |= _gp.same_rows(self.post.C, x)
        if self.post.n >= self.limit:
            return
        row = self.post.n
        self.rows[key] = (row, self.post.add_fantasy(x, self.owner.batch_rule, self.best))

    def learn(self, params: dict[str, Any], loss: float | None) -> None:
        """A running trial finished: its fantasy becomes its value (failures: the worst value)."""
        key = tuple(encode(self.owner.space, params))
        if key in self.applied or key not in self.rows:
            return
        self.applied.add(key)
        row, f = self.rows[key]
        y = self.worst if loss is None else (self._tamed(float(loss)) - self.mean) / self.sd
        self.post.correct(row, y - f)
        self.rows[key] = (row, y)
        self.best = min(self.best, y)

    def _tamed(self, loss: float) -> float:
        """A loss as the round's fit would take it (`tame_outliers`)."""
        return self.top if loss > self.fence else loss

    def hand_out(self, taken_keys: set[tuple] | None = None, *, polish_s: float) -> dict[str, Any] | None:
        """The next suggestion, not in `taken_keys` (None once no candidate is left).

        Its pick is polished for at most `polish_s` seconds (0: not at all) under the posterior
        that knows the latest results: the round's own candidates were polished before them.
        """
        if self.probs is None:
            kind = self.owner.acquisition
        else:
            kind = _gp.ACQUISITIONS[int(self.rng.choice(len(self.probs), p=self.probs))]
        score = _gp.acquisition(kind, self.post.mu_c, self.post.var_c, self.best)
        score[self.taken] = -np.inf
        examined = 0
        for j in np.argsort(-score):
            j = int(j)
            if not np.isfinite(score[j]) or examined == EXAMINED_PER_HAND_OUT:
                break
            if self.taken[j]:  # a copy of a candidate found taken below
                continue
            examined += 1
            self.taken[j] = True
            x = self.post.C[j]
            params = self.owner.coder.decode(x)
            if not self._free(x, params, taken_keys):
                self.taken |= _gp.same_rows(self.post.C, x)  # its copies too: a discrete space has many
                continue
            if self.owner.coder.continuous and polish_s > 0:
                x2, _ = _gp.polish(self.post, x, kind, self.best, self.owner.coder.free_at(x),
                                   deadline=time.perf_counter() + polish_s)
                p2 = self.owner.coder.decode(x2)
                if self._free(x2, p2, taken_keys):
                    params = p2
                self.polished += 1
            self.add_pending(params)
            return params
        return None

    def _free(self, x: np.ndarray, params: dict[str, Any], taken_keys: set[tuple] | None) -> bool:
        """Whether `x` (decoding to `params`) may be handed out: not known, not taken, and not on top
        of a training point (a fitted noise level can leave a point attractive next to a running one)."""
        if tuple(np.round(x, 9)) in self.known:
            return False
        if taken_keys is not None and tuple(encode(self.owner.space, params)) in taken_keys:
            return False
        return bool(np.min(((self.post.X[:self.post.n] - x) ** 2).sum(1)) >= 1e-6)

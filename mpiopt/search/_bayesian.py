"""Bayesian optimisation aware of pending points.

The first `initial_points` suggestions come from a scrambled Sobol design (space-filling, unlike
independent random draws). Then the surrogate takes over:

* `GP` (the default): mpiopt's own Gaussian process (`_gp.py`): one hyperparameter fit per batch,
  pending points and earlier picks of a batch added as fantasy observations with cheap posterior
  updates ("believer_clipped", see `_gp.py`), the acquisition maximised over space-filling and
  local candidates and polished by L-BFGS.
* `RF`, `ET`, `GBRT`: scikit-optimize's tree surrogates, the pending points at the best completed
  value (the constant liar).

Trials that did not complete are fitted at the worst completed value (never as good as any).

The GP's prior mean is pessimistic: the worst loss seen plus a fifth of the range of the losses
(`prior_mean`), not their average. Where the model knows nothing it expects a bad trial, so the
acquisition leans on the neighbourhood of good points, and several groups searching at once refine
the best basin instead of spreading over the flat rest of the space. De Ath, Fieldsend and Everson
("What do you mean? The role of the mean function in Bayesian optimisation", GECCO 2020) found the
worst observed value the best constant mean in 5 dimensions and more. Measured here on Hartmann-6
at 40 trials, 500 seeds: one group -3.200 -> -3.320 (median best), 8 groups -2.909 -> -3.059
(docs/benchmarks.md).
"""
from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np

from ..space import Space, encode, to_skopt
from . import _gp
from ._random import RandomSearch

# The surrogate's fitting chatter (length scales at their bounds, repeated points) is not the
# user's concern. Set once for the process: `warnings.catch_warnings` is not thread-safe, and
# suggestions are computed in a background thread while the coordinator runs.
warnings.filterwarnings("ignore", module=r"sklearn\.gaussian_process")
warnings.filterwarnings("ignore", module=r"skopt\.")

HANDOUT_POLISH_S = 0.001  # a hand-out polishes its pick for at most this long (see Round.hand_out)
PESSIMISM = 0.2  # the prior mean sits this share of the losses' range above the worst loss seen


def prior_mean(y: np.ndarray) -> tuple[float, float]:
    """The GP's prior mean and output scale for the losses `y`; the GP is fitted on
    (y - mean) / scale. The mean is the worst loss plus PESSIMISM times the range (see above)."""
    worst = float(y.max())
    return worst + PESSIMISM * (worst - float(y.min())), float(y.std()) or 1.0


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


class BayesianSearch(RandomSearch):
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
        self._dims = to_skopt(space)
        self.coder = _gp.UnitCoder(space)
        self._design = np.zeros((0, self.coder.dim))
        self._discrete = bool(self.coder.integer or self.coder.blocks)
        # imported now, not in the background thread in the middle of a search: loading compiled
        # modules holds the interpreter lock for a long time
        import scipy.optimize  # noqa: F401
        import scipy.special  # noqa: F401
        from scipy.stats import qmc  # noqa: F401
        self.hyper: _gp.Hyper | None = None
        self.gains = np.zeros(len(_gp.ACQUISITIONS))
        self._proposals: np.ndarray | None = None  # each acquisition's favourite at the last fit (gp_hedge)
        # a background caller picks with the last hyperparameters and refits them afterwards
        # (`refit_due`/`refit`), so that a fit on hundreds of points never delays a batch
        self.defer_fit = False
        self.checkpoint = None  # a background caller's hook, called between steps of a batch
        self.fitted_on = 0
        self.polish_deadline: float | None = None  # set by a background caller in a hurry (time.perf_counter)

    def _suggest(self) -> dict[str, Any]:
        return self.suggest_batch(1)[0]

    # -- the initial design ------------------------------------------------------------------
    def _known_keys(self) -> set[tuple]:
        # a wrapper (`Prefetching`) marks hand-outs pending directly: build the set from scratch
        # (draw() is this class's rare fallback, not its every suggestion)
        return self.known_points()

    def design_point(self, extra: int = 0) -> dict[str, Any]:
        """The next point of the Sobol design that is not known yet (index: points known so far)."""
        start = len(self.observed) + len(self.pending) + extra
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
        return self.draw()

    def model_ready(self, extra_pending: int = 0) -> bool:
        """The surrogate is used once the design is handed out and half of it has completed."""
        known = len(self.observed) + len(self.pending) + extra_pending
        done = len(self.completed)
        return known >= self.initial_points and done >= max(2, math.ceil(self.initial_points / 2))

    # -- batches -------------------------------------------------------------------------------
    def suggest_batch(self, k: int) -> list[dict[str, Any]]:
        """`k` suggestions, each aware of the pending points and of the ones before it."""
        out: list[dict[str, Any]] = []
        tmp = []
        try:
            while len(out) < k and not self.model_ready():
                out.append(self.design_point())
                tmp.append(-10**9 - len(out))
                self.pending[tmp[-1]] = out[-1]  # the batch's own points are pending for what follows
            if len(out) < k:
                rest = k - len(out)
                out += self._gp_batch(rest) if self.surrogate == "GP" else self._skopt_batch(rest)
        finally:
            for key in tmp:
                self.pending.pop(key, None)
        return out

    def _data(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Encoded points and losses: completed ones first, then the failed ones at the worst loss."""
        done = self.completed
        worst = max(v for _, v in done)
        pts = [p for p, _ in done] + [p for p, v in self.observed.values() if v is None]
        y = np.array([float(v) for _, v in done] + [worst] * (len(pts) - len(done)))
        X = np.array([self.coder.encode(p) for p in pts])
        return X, y, len(done)

    def _posterior(self, extra: int):
        """The GP on the data, with every pending point added at its fantasy value."""
        X, y, n_done = self._data()
        mean, sd = prior_mean(y)
        ys = (y - mean) / sd
        rng = np.random.default_rng([self.seed, len(self.observed), len(self.pending)])
        if self.hyper is None or not self.defer_fit:
            self.hyper = _gp.fit_hyper(X, ys, self.hyper, restarts=3 if self.hyper is None else 2, rng=rng,
                                       checkpoint=self.checkpoint)
            self.fitted_on = len(X)
        post = _gp.Posterior(self.hyper, X, ys, capacity=len(X) + len(self.pending) + extra)
        best = float(ys[:n_done].min())
        known = {tuple(np.round(x, 9)) for x in X}
        rows: dict[tuple, tuple[int, float]] = {}  # pending point -> (its row in `post`, its fantasy value)
        for p in self.pending.values():
            if self.checkpoint is not None:
                self.checkpoint()
            x = self.coder.encode(p)
            known.add(tuple(np.round(x, 9)))
            mu, var = post.predict(x[None, :])
            f = _gp.fantasy(self.batch_rule, float(mu[0]), best, float(np.sqrt(var[0])))
            rows[tuple(encode(self.space, p))] = (post.n, f)
            post.add(x, f)
        C = _gp.candidates(self.coder, X[:n_done], ys[:n_done], rng)
        post.set_candidates(C)
        return post, (mean, sd, best, float(ys.max())), rng, known, rows

    def _propose(self, post: "_gp.Posterior", best: float) -> None:
        """Remember each acquisition's favourite candidate, for gp_hedge's credit at the next fit."""
        if self.acquisition == "gp_hedge":
            self._proposals = np.array([post.C[int(np.argmax(_gp.acquisition(a, post.mu_c, post.var_c, best)))]
                                        for a in _gp.ACQUISITIONS])

    def _gp_batch(self, k: int) -> list[dict[str, Any]]:
        import time

        post, (_, _, best, _), rng, known, _ = self._posterior(k)
        kinds = self._kinds(post, k, rng)  # credits the previous proposals under the new fit
        self._propose(post, best)
        polish = k
        if self.polish_deadline is not None and time.perf_counter() > self.polish_deadline:
            polish = 0
        picks = _gp.select(post, k, kinds, best, rule=self.batch_rule, free=self.coder.continuous,
                           polish_picks=polish, exclude=known, deadline=self.polish_deadline,
                           checkpoint=self.checkpoint)
        return [self.coder.decode(x) for x in picks]

    def prepare_round(self, polish: int = 6) -> "Round":
        """A posterior ready to hand out suggestions one at a time, each in O(n C) (see `Round`).

        The best few candidates of the acquisition(s) are polished by L-BFGS now and join the
        candidate set (`polish` of them, until `polish_deadline`)."""
        import time

        post, (mean, sd, best, worst), rng, known, rows = self._posterior(256)
        kinds = list(_gp.ACQUISITIONS) if self.acquisition == "gp_hedge" else [self.acquisition]
        probs = self._kinds(post, 1, rng, probabilities=True)
        self._propose(post, best)
        extra = []
        if self.coder.continuous:
            for i in range(polish):
                if self.polish_deadline is not None and time.perf_counter() > self.polish_deadline:
                    break
                kind = kinds[i % len(kinds)]
                score = _gp.acquisition(kind, post.mu_c, post.var_c, best)
                order = np.argsort(-score)
                x0 = post.C[order[i // len(kinds)]]
                x, _ = _gp.polish(post, x0, kind, best, self.coder.continuous, checkpoint=self.checkpoint)
                extra.append(x)
        if extra:
            post.set_candidates(np.vstack([post.C, np.array(extra)]))
        return Round(self, post, rows, mean, sd, best, worst, rng, probs, known)

    def refit_due(self) -> bool:
        """Deferred fitting: refit once the data grew by a tenth since the last fit, and after
        every result while there are fewer than 10 (such fits take milliseconds; refitting only
        every 5 results, as before, left the Branin toy with 4 groups above 0.7 in 9 of 60
        simulated seeds, against 4 of 60; see docs/benchmarks.md)."""
        n = len(self.observed)
        return self.surrogate == "GP" and self.hyper is not None and n - self.fitted_on >= max(1, 0.1 * self.fitted_on)

    def refit(self, maxiter: int = 60) -> None:
        """Fit the kernel hyperparameters now, warm-started (for `defer_fit` callers)."""
        X, y, _ = self._data()
        mean, sd = prior_mean(y)
        ys = (y - mean) / sd
        self.hyper = _gp.fit_hyper(X, ys, self.hyper, restarts=1, maxiter=maxiter, checkpoint=self.checkpoint)
        self.fitted_on = len(X)

    def _kinds(self, post: "_gp.Posterior", k: int, rng: np.random.Generator, probabilities: bool = False):
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
        X = [encode(self.space, p) for p, _ in completed]
        y = [float(v) for _, v in completed]
        worst, best = max(y), min(y)
        for p, v in self.observed.values():
            if v is None:
                X.append(encode(self.space, p))
                y.append(worst)
        for p in self.pending.values():
            X.append(encode(self.space, p))
            y.append(best)
        out = []
        known = self.known_points()
        for i in range(k):
            seed = int(self._rng.randint(0, 2**31 - 1))
            estimator = _gbrt(seed) if self.surrogate == "GBRT" else self.surrogate
            opt = Optimizer(self._dims, base_estimator=estimator, n_initial_points=1, acq_func=self.acquisition,
                            random_state=seed)
            opt.tell(X, y)
            params = self.space.from_list(opt.ask())
            key = tuple(encode(self.space, params))
            if key in known:
                params = self.draw()
                key = tuple(encode(self.space, params))
            out.append(params)
            known.add(key)
            X.append(list(key))
            y.append(best)
        return out


class Round:
    """Suggestions from one surrogate fit, handed out one at a time as groups become free.

    Built in the background (`BayesianSearch.prepare_round`): the GP with every running trial as a
    fantasy observation, and a candidate set with its posterior mean and variance. A hand-out
    (`hand_out`) first corrects the posterior for results that arrived since -- a finished trial's
    fantasy value replaced by its real one, an exact O(n C) update of the candidates' means -- then
    takes the best candidate by the acquisition, polishes it by L-BFGS under that corrected
    posterior for at most HANDOUT_POLISH_S (1 ms; a polish converges in about 0.8 ms on an idle
    core), and adds it as a fantasy (O(n^2 + n C)). So a suggestion always knows every result so
    far, at a cost of one or two milliseconds; only the kernel
    hyperparameters and the candidate set date from the round. (The polish at hand-out recovers
    most of what a round one result old costs: Hartmann-6, 8 groups, 40 trials, paired over
    seeds 100-499, -0.05 on the best value found, against -0.06 for a round prepared after the
    result; docs/benchmarks.md.)
    """

    def __init__(self, owner: BayesianSearch, post, rows, mean, sd, best, worst, rng, probs, known) -> None:
        self.owner = owner
        self.post = post
        self.rows = rows
        self.mean, self.sd, self.best, self.worst = mean, sd, best, worst
        self.rng = rng
        self.probs = probs
        self.taken = np.zeros(len(post.C), dtype=bool)
        self.known = set(known)
        self.applied: set[tuple] = set()
        self.handed = 0
        self.polished = 0

    def add_pending(self, params: dict[str, Any]) -> None:
        """A trial handed out by someone else (an older round, a re-run) is running too."""
        key = tuple(encode(self.owner.space, params))
        if key in self.rows:
            return
        x = self.owner.coder.encode(params)
        mu, var = self.post.predict(x[None, :])
        f = _gp.fantasy(self.owner.batch_rule, float(mu[0]), self.best, float(np.sqrt(var[0])))
        self.rows[key] = (self.post.n, f)
        self.known.add(tuple(np.round(x, 9)))
        self.post.add(x, f)

    def learn(self, params: dict[str, Any], loss: float | None) -> None:
        """A running trial finished: its fantasy becomes its value (failures: the worst value)."""
        key = tuple(encode(self.owner.space, params))
        if key in self.applied or key not in self.rows:
            return
        self.applied.add(key)
        row, f = self.rows[key]
        y = self.worst if loss is None else (float(loss) - self.mean) / self.sd
        self.post.correct(row, y - f)
        self.rows[key] = (row, y)
        self.best = min(self.best, y)

    def hand_out(self, taken_keys: set[tuple] | None = None, polish_s: float | None = None) -> dict[str, Any] | None:
        """The next suggestion (None once no candidate is left); its pick polished for at most
        `polish_s` seconds (HANDOUT_POLISH_S by default, 0: not at all)."""
        polish_s = HANDOUT_POLISH_S if polish_s is None else polish_s
        if self.probs is None:
            kind = self.owner.acquisition
        else:
            kind = _gp.ACQUISITIONS[int(self.rng.choice(len(self.probs), p=self.probs))]
        score = _gp.acquisition(kind, self.post.mu_c, self.post.var_c, self.best)
        score[self.taken] = -np.inf
        for j in np.argsort(-score)[:64]:
            j = int(j)
            if not np.isfinite(score[j]):
                break
            self.taken[j] = True
            x = self.post.C[j]
            params = self.owner.coder.decode(x)
            key = tuple(encode(self.owner.space, params))
            if tuple(np.round(x, 9)) in self.known or (taken_keys is not None and key in taken_keys):
                continue
            n = self.post.n  # a fitted noise level can leave a point attractive next to a running one
            if np.min(((self.post.X[:n] - x) ** 2).sum(1)) < 1e-6:
                continue
            if self.owner.coder.continuous and polish_s > 0:
                # the round's candidates were polished before the latest results: polish the pick
                # under the posterior that knows them, for at most HANDOUT_POLISH_S
                x2, _ = _gp.polish(self.post, x, kind, self.best, self.owner.coder.continuous,
                                   deadline=time.perf_counter() + polish_s)
                p2 = self.owner.coder.decode(x2)
                k2 = tuple(encode(self.owner.space, p2))
                if (tuple(np.round(x2, 9)) not in self.known and (taken_keys is None or k2 not in taken_keys)
                        and np.min(((self.post.X[:n] - x2) ** 2).sum(1)) >= 1e-6):
                    params = p2
                self.polished += 1
            self.handed += 1
            self.add_pending(params)
            return params
        return None

"""Bayesian optimisation through scikit-optimize, aware of pending points (constant liar).

Each suggestion fits the surrogate once on the completed trials, the non-completed ones at the
worst completed value (never as good), and the pending ones at the best completed value (the
optimistic "constant liar", so parallel groups are pushed apart instead of sent to one point).
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..space import Space, encode, to_skopt
from ._random import RandomSearch

# The surrogate's fitting chatter (length scales at their bounds, repeated points) is not the
# user's concern. Set once for the process: `warnings.catch_warnings` is not thread-safe, and
# suggestions are computed in a background thread while the coordinator runs.
warnings.filterwarnings("ignore", module=r"sklearn\.gaussian_process")
warnings.filterwarnings("ignore", module=r"skopt\.")


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
    """Random points until `initial_points` trials completed, then the surrogate's choice."""

    def __init__(self, space: Space, *, seed: int = 0, surrogate: str = "GP", acquisition: str = "gp_hedge",
                 initial_points: int = 10) -> None:
        super().__init__(space, seed=seed)
        self.surrogate = surrogate
        self.acquisition = acquisition
        self.initial_points = initial_points
        self._dims = to_skopt(space)

    def _suggest(self) -> dict[str, Any]:
        return self.suggest_batch(1)[0]

    def suggest_batch(self, k: int) -> list[dict[str, Any]]:
        """`k` suggestions from one surrogate fit, each aware of the ones before it.

        The first comes from a full fit (kernel hyperparameters optimised). With a GP, the others
        reuse the fitted kernel: each earlier suggestion is added at the constant-liar value and the
        GP is refitted with its hyperparameters fixed (a Cholesky factorisation, milliseconds), so a
        batch costs about one fit instead of k.
        """
        completed = self.completed
        if len(completed) < max(1, self.initial_points):
            out: list[dict[str, Any]] = []
            for i in range(k):
                out.append(self.draw())
                self.pending[-10**9 - i] = out[-1]  # keep the batch's own points apart
            for i in range(k):
                self.pending.pop(-10**9 - i, None)
            return out
        from skopt import Optimizer

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
        seed = int(self._rng.randint(0, 2**31 - 1))
        estimator = _gbrt(seed) if self.surrogate == "GBRT" else self.surrogate
        opt = Optimizer(self._dims, base_estimator=estimator, n_initial_points=1, acq_func=self.acquisition,
                        random_state=seed)
        opt.tell(X, y)
        out = []
        known = self.known_points()
        x = opt.ask()
        for i in range(k):
            params = self.space.from_list(x)
            key = tuple(encode(self.space, params))
            if key in known:
                params = self.draw()
                key = tuple(encode(self.space, params))
            out.append(params)
            known.add(key)
            if i == k - 1:
                break
            X.append(encode(self.space, params))
            y.append(best)  # the constant liar, as for pending points
            if self.surrogate == "GP" and opt.models:
                from skopt.learning import GaussianProcessRegressor

                fitted = opt.models[-1]
                # the fitted kernel already holds the learned noise (its WhiteKernel): no noise= here,
                # which would add a second, unfitted WhiteKernel(1.0) and flatten the model
                fixed = GaussianProcessRegressor(kernel=fitted.kernel_, optimizer=None, normalize_y=True)
                opt = Optimizer(self._dims, base_estimator=fixed, n_initial_points=1, acq_func=self.acquisition,
                                acq_optimizer="sampling", acq_optimizer_kwargs={"n_points": 2000},
                                random_state=seed + i + 1)
            else:
                opt = Optimizer(self._dims, base_estimator=_gbrt(seed) if self.surrogate == "GBRT" else self.surrogate,
                                n_initial_points=1, acq_func=self.acquisition, random_state=seed + i + 1)
            opt.tell(X, y)
            x = opt.ask()
        return out

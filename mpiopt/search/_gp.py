"""Gaussian-process Bayesian optimisation in numpy: fast fits, cheap posterior updates, batches.

The `GP` surrogate of `algorithm: bayesian`. Written for the coordinator's needs rather than
borrowed from scikit-optimize, whose ask() refits from scratch and whose batch ask refits once per
point of the batch:

* Inputs live in the unit cube (`UnitCoder`: reals and integers scaled, log priors in log
  space, categoricals one-hot); outputs are centred on a pessimistic prior mean (the worst loss
  seen and then some, `_bayesian.prior_mean`) and scaled by their standard deviation.
* The kernel is Matern 5/2 with one length scale per input (a categorical's one-hot columns
  share one), an amplitude and a noise level, fitted by maximum a posteriori (L-BFGS on the log
  marginal likelihood with analytic gradients, warm-started from the previous fit, with weak
  Gamma priors that keep a fit on 10 points sane).
* `Posterior` holds the Cholesky factor of the training covariance and grows it one point at a
  time (O(n^2) a point), keeping the mean and variance of a candidate set up to date (O(n C)).
* `select()` picks a batch: every pending point and every earlier pick of the batch is added as
  a fantasy observation at max(posterior mean, best value) -- a kriging believer that may not
  believe a point is better than the best one seen, so the variance there collapses and the mean
  there is no better than the incumbent: the next pick goes elsewhere unless elsewhere is worse.
  (`fantasy` also offers the plain kriging believer and the constant liar, for comparison.)
* `polish()` refines a candidate by L-BFGS on the acquisition, within a deadline, so that a
  background round or a hand-out can bound its time.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.linalg import lapack
from scipy.optimize import minimize
from scipy.special import ndtr

from ..space import Categorical, Integer, Real, Space, is_choice

SQRT5 = math.sqrt(5.0)
JITTER = 1e-8
# candidates conditioned at a time between checkpoints: a block costs ~2 ms at 300 training points
CANDIDATE_BLOCK = 128
ACQUISITIONS = ("EI", "PI", "LCB")


# -- the unit cube -------------------------------------------------------------------------------
class UnitCoder:
    """Parameters <-> points of [0, 1]^D (one column a real/integer, one a category)."""

    def __init__(self, space: Space) -> None:
        self.space = space
        self.cols: list[slice] = []
        self.continuous: list[int] = []  # columns free to move continuously (reals)
        self.integer: list[int] = []
        self.blocks: list[slice] = []  # one-hot blocks
        d = 0
        for p in space.params:
            width = len(p.choices) if isinstance(p, Categorical) else 1
            self.cols.append(slice(d, d + width))
            if isinstance(p, Real):
                self.continuous.append(d)
            elif isinstance(p, Integer):
                self.integer.append(d)
            else:
                self.blocks.append(slice(d, d + width))
            d += width
        self.dim = d
        # each condition as (child, parent, the parent's one-hot columns that make the child active),
        # parents first, so one pass over them settles a chain
        index = {p.name: k for k, p in enumerate(space.params)}
        self._conditions = [(k, index[parent], [self.cols[index[parent]].start + i
                                                 for i, c in enumerate(space[parent].choices) if is_choice(c, allowed)])
                            for k in space.parents_first for parent, allowed in space.params[k].when]

    # Conditional spaces: an inactive parameter sits at a constant (a numeric column at 0.5, a
    # one-hot block all zeros), the imputation of Levesque et al. (2017), so points that differ
    # only in inactive values are one point to the GP, neither invented nor fitted as noise.
    def active_mask(self, X: np.ndarray) -> np.ndarray:
        """Which parameters (columns of the result, in space order) are active at each row of X."""
        act = np.ones((len(X), len(self.space.params)), dtype=bool)
        for k, j, hot in self._conditions:
            act[:, k] &= act[:, j] & (X[:, hot].max(axis=1) > 0.5)
        return act

    def canonical(self, X: np.ndarray) -> np.ndarray:
        """X with every inactive parameter at its constant (unchanged in a space without conditions)."""
        if not self.space.conditional:
            return X
        act = self.active_mask(X)
        for k, (p, c) in enumerate(zip(self.space.params, self.cols, strict=True)):
            X[~act[:, k], c] = 0.0 if isinstance(p, Categorical) else 0.5
        return X

    def free_at(self, x: np.ndarray) -> list[int]:
        """The continuous columns a local search may move at `x`: those of its active reals."""
        if not self.space.conditional:
            return self.continuous
        act = self.active_mask(x[None, :])[0]
        return [c.start for k, (p, c) in enumerate(zip(self.space.params, self.cols, strict=True))
                if act[k] and isinstance(p, Real)]

    @staticmethod
    def _scale(p, v: float) -> float:
        if p.prior == "log-uniform":
            lo, hi, v = math.log(p.low), math.log(p.high), math.log(max(v, p.low))
        else:
            lo, hi = p.low, p.high
        return 0.5 if hi == lo else min(1.0, max(0.0, (v - lo) / (hi - lo)))

    @staticmethod
    def _unscale(p, u: float) -> float:
        u = min(1.0, max(0.0, float(u)))
        if p.prior == "log-uniform":
            return math.exp(math.log(p.low) + u * (math.log(p.high) - math.log(p.low)))
        return p.low + u * (p.high - p.low)

    def encode(self, params: dict) -> np.ndarray:
        x = np.zeros(self.dim)
        for p, c in zip(self.space.params, self.cols, strict=True):
            if p.name not in params:  # inactive
                x[c] = 0.0 if isinstance(p, Categorical) else 0.5
                continue
            v = params[p.name]
            if isinstance(p, Categorical):
                x[c.start + next((i for i, ch in enumerate(p.choices) if is_choice(v, (ch,))), 0)] = 1.0
            else:
                x[c.start] = self._scale(p, float(v))
        return x

    def decode(self, x: np.ndarray) -> dict:
        out = {}
        for p, c in zip(self.space.params, self.cols, strict=True):
            if isinstance(p, Categorical):
                out[p.name] = p.choices[int(np.argmax(x[c]))]
            elif isinstance(p, Integer):
                out[p.name] = int(min(p.high, max(p.low, round(self._unscale(p, x[c.start])))))
            else:
                out[p.name] = float(min(p.high, max(p.low, self._unscale(p, x[c.start]))))
        return self.space.active(out)

    def snap(self, X: np.ndarray) -> np.ndarray:
        """Make unit-cube points feasible: integers on their grid, one-hot blocks one-hot."""
        X = np.clip(X, 0.0, 1.0)
        for j, p in zip(self.integer, [p for p in self.space.params if isinstance(p, Integer)], strict=True):
            vals = np.array([self._scale(p, round(self._unscale(p, u))) for u in X[:, j]])
            X[:, j] = vals
        for b in self.blocks:
            hot = np.argmax(X[:, b], axis=1)
            X[:, b] = 0.0
            X[np.arange(len(X)), b.start + hot] = 1.0
        return self.canonical(X)

    def from_design(self, U: np.ndarray) -> np.ndarray:
        """Points of a design in [0, 1)^len(space) (one column a parameter) as unit-cube points."""
        X = np.zeros((len(U), self.dim))
        for k, (p, c) in enumerate(zip(self.space.params, self.cols, strict=True)):
            if isinstance(p, Categorical):
                X[np.arange(len(U)), c.start + np.minimum((U[:, k] * len(p.choices)).astype(int),
                                                          len(p.choices) - 1)] = 1.0
            elif isinstance(p, Integer):
                if p.prior == "log-uniform":
                    raw = np.exp(math.log(p.low) + U[:, k] * (math.log(p.high + 1) - math.log(p.low)))
                else:
                    raw = p.low + U[:, k] * (p.high - p.low + 1)
                ints = np.clip(np.floor(raw), p.low, p.high)
                X[:, c.start] = [self._scale(p, v) for v in ints]
            else:
                X[:, c.start] = U[:, k]
        return self.canonical(X)


def sobol(n_dims: int, start: int, count: int, seed: int) -> np.ndarray:
    """Points start..start+count-1 of a scrambled Sobol sequence (reproducible from `seed`)."""
    from scipy.stats import qmc

    eng = qmc.Sobol(d=n_dims, scramble=True, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "balance properties ... power of 2": we take a prefix on purpose
        if start:
            eng.fast_forward(start)
        return eng.random(count)


# -- the kernel and its fit ----------------------------------------------------------------------
@dataclass
class Hyper:
    lengthscales: np.ndarray
    amplitude: float
    noise: float

    def vector(self) -> np.ndarray:
        return np.log(np.concatenate([self.lengthscales, [self.amplitude, self.noise]]))

    @classmethod
    def of(cls, theta: np.ndarray) -> Hyper:
        e = np.exp(theta)
        return cls(e[:-2], float(e[-2]), float(e[-1]))


def _sqdist(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
    return np.maximum(d2, 0.0)


def kernel(A: np.ndarray, B: np.ndarray, h: Hyper) -> np.ndarray:
    r = np.sqrt(_sqdist(A / h.lengthscales, B / h.lengthscales))
    return h.amplitude * (1.0 + SQRT5 * r + (5.0 / 3.0) * r * r) * np.exp(-SQRT5 * r)


# Weak priors (inputs in the unit cube, outputs standardised), as in BoTorch's classic defaults:
# length scale ~ Gamma(3, 6), amplitude ~ Gamma(2, 0.15), noise ~ Gamma(1.1, 0.05). A categorical's
# length scale has its own, Gamma(2, 0.5) (mode 2: two categories correlate about 0.75), loose
# enough for a fit to find a choice that does not matter as well as one that does; under the
# reals' prior every two categories would be nearly independent.
_PRIOR = {"ls": (3.0, 6.0), "category": (2.0, 0.5), "amp": (2.0, 0.15), "noise": (1.1, 0.05)}
_BOUNDS = {"ls": (0.01, 20.0), "amp": (0.01, 50.0), "noise": (1e-6, 1.0)}


@dataclass(frozen=True)
class Scales:
    """Which fitted length scale each input column uses: its own for a real or an integer, one for
    all the one-hot columns of a categorical (its categories are one input, not several)."""

    of_column: np.ndarray  # column -> length scale
    categorical: np.ndarray  # length scale -> whether a categorical's

    @classmethod
    def of(cls, dim: int, blocks: list[slice] = ()) -> Scales:
        of_column, categorical, k = np.zeros(dim, dtype=int), [], 0
        for c in range(dim):
            block = next((b for b in blocks if b.start <= c < b.stop), None)
            if block is not None and c > block.start:
                of_column[c] = of_column[block.start]
                continue
            of_column[c], k = k, k + 1
            categorical.append(block is not None)
        return cls(of_column, np.array(categorical, dtype=bool))

    def __len__(self) -> int:
        return len(self.categorical)

    def firsts(self, lengthscales: np.ndarray) -> np.ndarray:
        """Each length scale's value, read from one per column."""
        return lengthscales[[int(np.flatnonzero(self.of_column == k)[0]) for k in range(len(self))]]

    def prior(self) -> tuple[np.ndarray, np.ndarray]:
        """The Gamma prior's shape and rate of each length scale."""
        shape = np.where(self.categorical, _PRIOR["category"][0], _PRIOR["ls"][0])
        return shape, np.where(self.categorical, _PRIOR["category"][1], _PRIOR["ls"][1])


def inverse_cholesky(K: np.ndarray, checkpoint=None) -> tuple[np.ndarray, np.ndarray]:
    """L and L^-1, L the Cholesky factor of K (numpy's LinAlgError where K is not positive definite);
    `checkpoint()` is called between the steps of the inverse."""
    L = np.linalg.cholesky(K)
    return L, _triangular_inverse(L, checkpoint=checkpoint)


def _triangular_inverse(L: np.ndarray, leaf: int = 64, checkpoint=None) -> np.ndarray:
    """The inverse of the lower-triangular `L`, by halves: [[A, 0], [C, D]]^-1 is
    [[A^-1, 0], [-D^-1 C A^-1, D^-1]]. The matrix products run in numpy without the interpreter
    lock; LAPACK's triangular inverse, which scipy calls with the lock held, only on blocks of
    `leaf` (microseconds each). numpy's general inverse would solve an LU factorisation for
    every column: about four times the flops."""
    n = len(L)
    if n <= leaf:
        inverse, info = lapack.dtrtri(L, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular triangular factor (dtrtri info {info})")
        return inverse
    h = n // 2
    A_inv, D_inv = _triangular_inverse(L[:h, :h], leaf, checkpoint), _triangular_inverse(L[h:, h:], leaf, checkpoint)
    if checkpoint is not None:
        checkpoint()
    out = np.zeros_like(L)
    out[:h, :h], out[h:, h:] = A_inv, D_inv
    out[h:, :h] = -D_inv @ (L[h:, :h] @ A_inv)
    return out


def _neg_log_posterior(theta: np.ndarray, X: np.ndarray, y: np.ndarray,
                       scales: Scales | None = None) -> tuple[float, np.ndarray]:
    """The negative log posterior of log(length scales of `scales`, amplitude, noise) and its
    gradient (`scales`: one per column of X, none categorical, if not given)."""
    n, d = X.shape
    scales = scales or Scales.of(d)
    m = len(scales)
    h = Hyper(np.exp(theta[:m])[scales.of_column], float(np.exp(theta[m])), float(np.exp(theta[m + 1])))
    A = X / h.lengthscales
    r = np.sqrt(_sqdist(A, A))
    e = np.exp(-SQRT5 * r)
    Kf = h.amplitude * (1.0 + SQRT5 * r + (5.0 / 3.0) * r * r) * e
    K = Kf + (h.noise + JITTER) * np.eye(n)
    try:
        L, Li = inverse_cholesky(K)
    except np.linalg.LinAlgError:
        return 1e10, np.zeros_like(theta)
    Kinv = Li.T @ Li
    alpha = Kinv @ y
    nll = 0.5 * y @ alpha + np.log(np.diag(L)).sum() + 0.5 * n * math.log(2 * math.pi)
    R = np.outer(alpha, alpha) - Kinv  # dNLL/dtheta = -0.5 sum(R * dK/dtheta)
    G = h.amplitude * (5.0 / 3.0) * (1.0 + SQRT5 * r) * e  # dK/dlog(l_j) = G * (a_i - a_k)^2
    RG = R * G
    rs = RG.sum(1)
    g_columns = -0.5 * (2.0 * (rs @ (A * A)) - 2.0 * (A * (RG @ A)).sum(0))
    g_ls = np.bincount(scales.of_column, weights=g_columns, minlength=m)  # a shared scale: its columns' sum
    g_amp = -0.5 * (R * Kf).sum()
    g_noise = -0.5 * np.trace(R) * h.noise
    grad = np.concatenate([g_ls, [g_amp, g_noise]])
    # log priors in log-space (Gamma(k, rate) on the positive value, times the Jacobian)
    shape, rate = scales.prior()
    shape = np.concatenate([shape, [_PRIOR["amp"][0], _PRIOR["noise"][0]]])
    rate = np.concatenate([rate, [_PRIOR["amp"][1], _PRIOR["noise"][1]]])
    v = np.exp(theta)
    lp, glp = (shape * theta - rate * v).sum(), shape - rate * v
    return float(nll - lp), grad - glp


def _checkpointed(f, checkpoint):
    """`f` with `checkpoint()` before every call: an L-BFGS iteration may evaluate several
    times, and each evaluation at a few hundred points takes milliseconds of the coordinator's core."""
    def call(*args):
        checkpoint()
        return f(*args)
    return call


def fit_hyper(X: np.ndarray, y: np.ndarray, start: Hyper | None = None, *, scales: Scales | None = None,
              restarts: int = 1, rng: np.random.Generator | None = None, maxiter: int = 200,
              checkpoint=None) -> Hyper:
    """The maximum a posteriori kernel hyperparameters for centred and scaled `y`, with the length
    scales of `scales` (one per column of X if not given)."""
    d = X.shape[1]
    scales = scales or Scales.of(d)
    m = len(scales)
    bounds = [tuple(np.log(_BOUNDS["ls"]))] * m + [tuple(np.log(_BOUNDS["amp"])), tuple(np.log(_BOUNDS["noise"]))]
    starts = [] if start is None else [Hyper(scales.firsts(start.lengthscales), start.amplitude, start.noise).vector()]
    starts.append(Hyper(np.full(m, 0.3), 1.0, 1e-3).vector())
    rng = rng or np.random.default_rng(0)
    for _ in range(max(0, restarts - 1)):
        starts.append(Hyper(np.exp(rng.uniform(np.log(0.05), np.log(2.0), m)), float(np.exp(rng.uniform(-1, 1))),
                            1e-3).vector())
    objective = _neg_log_posterior if checkpoint is None else _checkpointed(_neg_log_posterior, checkpoint)
    best = None
    for theta0 in starts:
        theta0 = np.clip(theta0, [b[0] for b in bounds], [b[1] for b in bounds])
        with np.errstate(all="ignore"):
            res = minimize(objective, theta0, args=(X, y, scales), jac=True, method="L-BFGS-B", bounds=bounds,
                           options={"maxiter": maxiter})
        if np.isfinite(res.fun) and (best is None or res.fun < best.fun):
            best = res
    if best is None:
        return Hyper(np.full(d, 0.3), 1.0, 1e-3)
    fitted = Hyper.of(best.x)
    return Hyper(fitted.lengthscales[scales.of_column], fitted.amplitude, fitted.noise)


# -- the posterior, grown one point at a time -----------------------------------------------------
class Posterior:
    """The GP conditioned on training points; `add()` conditions on one more (real or fantasy).

    Keeps the inverse of the Cholesky factor, so every solve is a matrix product: numpy runs
    those without the interpreter lock, and a posterior built in the background thread holds up
    the coordinator's dispatch thread only for the small blocks of `inverse_cholesky`.
    """

    def __init__(self, h: Hyper, X: np.ndarray, y: np.ndarray, capacity: int | None = None,
                 checkpoint=None) -> None:
        self.h = h
        n = len(X)
        cap = max(capacity or 0, n) + 8
        self.X = np.zeros((cap, X.shape[1]))
        self.X[:n] = X
        self.Li = np.zeros((cap, cap))  # L^-1, L the Cholesky factor of the training covariance
        K = kernel(X, X, h) + (h.noise + JITTER) * np.eye(n)
        if checkpoint is not None:
            checkpoint()
        self.Li[:n, :n] = inverse_cholesky(K, checkpoint)[1]
        self.beta = np.zeros(cap)  # L^-1 y
        self.beta[:n] = self.Li[:n, :n] @ y
        self.n = n
        self.C: np.ndarray | None = None  # candidates, with V = L^-1 k(X, C), their mean and variance
        self.V: np.ndarray | None = None

    def _grow(self) -> None:
        cap = len(self.Li) * 2
        for name in ("X", "Li"):
            old = getattr(self, name)
            new = np.zeros((cap, old.shape[1]) if name == "X" else (cap, cap))
            new[:old.shape[0], :old.shape[1]] = old
            setattr(self, name, new)
        beta = np.zeros(cap)
        beta[:len(self.beta)] = self.beta
        self.beta = beta
        if self.V is not None:
            V = np.zeros((cap, self.V.shape[1]))
            V[:len(self.V)] = self.V
            self.V = V

    def predict(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and latent variance at the rows of `Z`."""
        n = self.n
        W = self.Li[:n, :n] @ kernel(self.X[:n], Z, self.h)
        mu = W.T @ self.beta[:n]
        var = np.maximum(self.h.amplitude - (W * W).sum(0), 1e-12)
        return mu, var

    def set_candidates(self, C: np.ndarray, checkpoint=None) -> None:
        """The candidate set, with its posterior mean and variance; `checkpoint()` is called
        between blocks of `CANDIDATE_BLOCK` candidates (O(n^2) a candidate)."""
        V = np.zeros((len(self.Li), len(C)))
        for start in range(0, len(C), CANDIDATE_BLOCK):
            if checkpoint is not None and start:
                checkpoint()
            block = slice(start, start + CANDIDATE_BLOCK)
            V[:self.n, block] = self._columns(C[block])
        self.C, self.V = C, V
        self.mu_c, self.var_c = self._moments(V)

    def add_candidates(self, C: np.ndarray) -> None:
        """More candidates: only their own columns are computed."""
        V = np.zeros((len(self.Li), len(C)))
        V[:self.n] = self._columns(C)
        mu, var = self._moments(V)
        self.C, self.V = np.vstack([self.C, C]), np.hstack([self.V, V])
        self.mu_c, self.var_c = np.concatenate([self.mu_c, mu]), np.concatenate([self.var_c, var])

    def _columns(self, C: np.ndarray) -> np.ndarray:
        """L^-1 k(X, C): the candidates' columns of V."""
        return self.Li[:self.n, :self.n] @ kernel(self.X[:self.n], C, self.h)

    def _moments(self, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The posterior mean and latent variance of the candidates with columns `V`."""
        n = self.n
        return V[:n].T @ self.beta[:n], np.maximum(self.h.amplitude - (V[:n] ** 2).sum(0), 1e-12)

    def correct(self, row: int, delta: float) -> None:
        """Training point `row`'s value changes by `delta` (a fantasy replaced by a result): the
        mean moves by an exact O(n C) update; the variance does not change."""
        n = self.n
        d = self.Li[row:n, row] * delta  # beta = L^-1 y, and L^-1 is lower triangular
        self.beta[row:n] += d
        if self.C is not None:
            self.mu_c = self.mu_c + d @ self.V[row:n]

    def add(self, x: np.ndarray, value: float, noise: float | None = None) -> None:
        """Condition on one more observation `value` at `x` (O(n^2 + n C)), of variance `noise`."""
        self._append(x, *self._project(x), value, noise)

    def add_fantasy(self, x: np.ndarray, rule: str, best: float) -> float:
        """Condition on a pending point at `x`, valued at `fantasy(rule, its posterior mean, best)`;
        returns that value. One O(n^2) projection serves the mean and the update."""
        w, mean_x = self._project(x)
        value = fantasy(rule, mean_x, best)
        self._append(x, w, mean_x, value, None)
        return value

    def _project(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        """(L^-1 k(X, x), the posterior mean at x), with room made for one more point."""
        if self.n + 1 >= len(self.Li):
            self._grow()
        n = self.n
        w = self.Li[:n, :n] @ kernel(self.X[:n], x[None, :], self.h)[:, 0]
        return w, float(w @ self.beta[:n])

    def _append(self, x: np.ndarray, w: np.ndarray, mean_x: float, value: float, noise: float | None) -> None:
        """Condition on `value` at `x`, given `_project(x)`."""
        n = self.n
        dd = math.sqrt(max(self.h.amplitude + (self.h.noise if noise is None else noise) + JITTER - w @ w, 1e-12))
        b = (value - mean_x) / dd
        self.X[n] = x
        self.Li[n, :n] = -(w @ self.Li[:n, :n]) / dd  # the new row of L^-1 for L's new row [w, dd]
        self.Li[n, n] = 1.0 / dd
        self.beta[n] = b
        if self.C is not None:
            row = (kernel(x[None, :], self.C, self.h)[0] - w @ self.V[:n]) / dd
            self.V[n] = row
            self.mu_c = self.mu_c + row * b
            self.var_c = np.maximum(self.var_c - row * row, 1e-12)
        self.n = n + 1


# -- acquisition ---------------------------------------------------------------------------------
def acquisition(kind: str, mu: np.ndarray, var: np.ndarray, best: float, xi: float = 0.01,
                kappa: float = 1.0) -> np.ndarray:
    """Higher is better (the loss is minimised). LCB's kappa is 1.0, not scikit-optimize's 1.96: less
    exploration found better points in searches of tens of trials, alone and with several groups."""
    sd = np.sqrt(var)
    if kind == "LCB":
        return -(mu - kappa * sd)
    z = (best - mu - xi) / sd
    if kind == "PI":
        return ndtr(z)
    return (best - mu - xi) * ndtr(z) + sd * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def fantasy(rule: str, mean: float, best: float) -> float:
    """The value a pending point is conditioned on, from its posterior `mean` and the `best` value:
    "believer" the mean, "liar" the best, "believer_clipped" (the default) the worse of the two."""
    if rule == "believer":
        return mean
    if rule == "liar":
        return best
    return max(mean, best)


def candidates(coder: UnitCoder, X: np.ndarray, y: np.ndarray, rng: np.random.Generator, n_global: int = 512,
               n_local: int = 512, top: int = 5) -> np.ndarray:
    """Space-filling points plus perturbations of the best points seen, all feasible."""
    parts = [coder.from_design(rng.random((n_global, len(coder.space.params))))] if n_global else []
    if len(X) and n_local:
        order = np.argsort(y)[:top]
        centres = X[order[rng.integers(0, len(order), n_local)]]
        scale = np.exp(rng.uniform(np.log(0.005), np.log(0.25), (n_local, 1)))
        mask = rng.random((n_local, X.shape[1])) < max(0.2, min(1.0, 3.0 / X.shape[1]))
        local = centres + mask * rng.normal(size=centres.shape) * scale
        for b in coder.blocks:  # categorical moves: another category now and then
            flip = rng.random(n_local) < 1.0 / max(1, len(coder.space.params))
            local[flip, b] = rng.random((int(flip.sum()), b.stop - b.start))
        parts.append(coder.snap(local))
    return np.vstack(parts)


class _OutOfTime(Exception):
    pass


def polish(post: Posterior, x0: np.ndarray, kind: str, best: float, free: list[int], maxiter: int = 30,
           checkpoint=None, deadline: float | None = None, eps: float = 1e-6) -> tuple[np.ndarray, float]:
    """Local L-BFGS ascent of the acquisition over the continuous columns `free`; stopped at
    `deadline` (a time.perf_counter() value) with the best point seen so far.

    The gradient is a forward difference of step `eps` (backward at an upper bound), as scipy
    would take it, but all len(free) + 1 points go through one `predict` call instead of one call
    each: a call costs about as much for one point as for a few, so the polish is several times
    faster and a hand-out's polish mostly ends inside its budget."""
    free = list(free)
    d = len(free)
    if not d:  # nothing to move (every real of this point inactive)
        mu, var = post.predict(x0[None, :])
        return x0.copy(), float(acquisition(kind, mu, var, best)[0])
    x = x0.copy()
    Z = np.repeat(x[None, :], d + 1, axis=0)
    rows, cols = np.arange(1, d + 1), np.array(free, dtype=int)
    seen = {"f": math.inf, "z": None}

    def fg(z):
        if checkpoint is not None:
            checkpoint()
        if deadline is not None and seen["z"] is not None and time.perf_counter() > deadline:
            raise _OutOfTime
        z = np.asarray(z, dtype=float)
        h = np.where(z + eps <= 1.0, eps, -eps)
        Z[:, cols] = z
        Z[rows, cols] += h
        mu, var = post.predict(Z)
        a = -acquisition(kind, mu, var, best)
        v = float(a[0])
        if v < seen["f"]:
            seen["f"], seen["z"] = v, z.copy()
        return v, (a[1:] - v) / h

    start = x0[free].copy()
    f0, _ = fg(start)
    try:
        with np.errstate(all="ignore"):
            res = minimize(fg, start, jac=True, method="L-BFGS-B", bounds=[(0.0, 1.0)] * d,
                           options={"maxiter": maxiter})
        fz, z = float(res.fun), res.x
    except _OutOfTime:
        fz, z = seen["f"], seen["z"]
    out = x0.copy()
    if np.isfinite(fz) and fz < f0:
        out[free] = np.clip(z, 0.0, 1.0)
        return out, -fz
    return out, -f0


def select(post: Posterior, k: int, kinds: list[str], best: float, *, rule: str, coder: UnitCoder,
           polish_picks: int, exclude: set[tuple] | None = None, deadline: float | None = None,
           checkpoint=None) -> list[np.ndarray]:
    """`k` points, one at a time, each conditioned on the ones before (at their fantasy value).

    The candidates (`post.set_candidates`) and the pending points must already be in `post`.
    `kinds[i]` is the acquisition of the i-th pick; the first `polish_picks` picks are polished by
    L-BFGS (none once `deadline`, a time.perf_counter() value, has passed).
    """
    C = post.C
    taken = np.zeros(len(C), dtype=bool)
    exclude = set(exclude or ())
    known = rows_in(C, exclude)  # in a discrete space most candidates can be points already tried
    picks: list[np.ndarray] = []
    for i in range(k):
        if checkpoint is not None:
            checkpoint()
        score = acquisition(kinds[i], post.mu_c, post.var_c, best)
        score[taken] = -np.inf
        # the best unknown candidate; where every one is known, the best (the caller replaces it)
        unknown = ~(taken | known)
        j = int(np.argmax(np.where(unknown, score, -np.inf))) if unknown.any() else int(np.argmax(score))
        taken[j] = True
        x = C[j]
        free = coder.free_at(x)
        if i < polish_picks and free and (deadline is None or time.perf_counter() < deadline):
            x, _ = polish(post, x, kinds[i], best, free, checkpoint=checkpoint)
            if tuple(np.round(x, 9)) in exclude:
                x = C[j]
        exclude.add(tuple(np.round(x, 9)))
        known |= same_rows(C, x)
        picks.append(x)
        post.add_fantasy(x, rule, best)
    return picks


def rows_in(C: np.ndarray, keys: set[tuple]) -> np.ndarray:
    """Which rows of C are among `keys` (points rounded to 9 decimals, as tuples)."""
    return np.fromiter((tuple(r) in keys for r in np.round(C, 9)), dtype=bool, count=len(C))


def same_rows(C: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Which rows of C are the point x (to 9 decimals)."""
    return np.all(np.abs(C - x) <= 1e-9, axis=1)

"""Parallel sample efficiency: best value found by 1, 8 and 32 groups searching at once.

    python bench/sample_efficiency.py [--seeds 10] [--first-seed 0] [--widths 1 8 32] [--budgets 40 80] [--jobs 2]
                                      [--methods mpiopt random optuna] [--functions branin hartmann6]
    python bench/sample_efficiency.py --methods mpiopt evolution random --functions hartmann6 mixed \
                                      --widths 1 8 --budgets 40 80 200     # evolution against the GP

Each search is simulated in virtual time (no MPI, no sleeping): `width` groups run trials whose
durations are drawn from U(0.5, 1.5), so results come back in a shuffled order as they do on a
cluster; when a trial finishes, the searcher is told its value and asked for the next point while
the other `width - 1` trials are still pending. The best value among the first B trials asked is
what a search with `trials: B` would have found (no method here looks at the budget).

Functions: branin, hartmann6, and `mixed`: a made-up training loss over 11 parameters (3
categorical, 2 integer, 6 real), 5 of them conditional on an optimizer or a depth (see `mixed`),
minimum 0; `branin+penalty`: Branin returning 1e12 where x2 > 12; `branin+cat`: Branin beside a
categorical of 4 that changes nothing; `categories`: two categoricals that matter (8 x 3
combinations) and a log-scaled real, minimum 0. `optuna` runs on the all-real spaces only.

Methods:
  mpiopt            BayesianSearch: GP, gp_hedge, initial_points 10, each suggestion computed
                    when a result arrives (what `mpiopt search` does with one group, or with
                    MPIOPT_PREFETCH=0)
  mpiopt-ahead      what `mpiopt search` does with several groups: the round (candidates,
                    polish) prepared before the latest result arrived, brought up to date with
                    that result at hand-out (see mpiopt/search/_prefetch.py), with the kernel
                    hyperparameters refitted only when `refit_due()` says so, as the background
                    thread does; with very short trials the round can be a few results older still;
                    with trials of any length, unless MPIOPT_FRESH_SHARE is set (see mpiopt-long)
  mpiopt-long       what it does with several groups when trials are long (groups x round time
                    under 1% of a trial: trials of minutes) and MPIOPT_FRESH_SHARE=0.01 is set
                    (off by default): the hand-out waits for a round prepared with the latest result
  mpiopt-liar       the same GP, pending points at the best value seen (the constant liar)
  mpiopt-believer   the same GP, pending points at the posterior mean (the kriging believer)
  skopt-liar        scikit-optimize 0.10 Optimizer (GP, gp_hedge, 10 initial), pending points
                    told at the best value seen (constant liar)
  random            independent uniform draws
  evolution         EvolutionSearch (algorithm: evolution): regularized evolution, population 20,
                    tournaments of 5
  optuna            Optuna's TPESampler(constant_liar=True, seed) through study.ask/tell
                    (`pip install optuna` for this benchmark; mpiopt does not depend on it)

Prints median [25th, 75th percentile] of the best value over seeds, then (when width 1 is run)
each width's gap to one group with a 90% bootstrap interval over the seeds; asserts nothing.
"""
from __future__ import annotations

import argparse
import heapq
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mpiopt.space import Real, Space, parse_space  # noqa: E402

# -- test functions ------------------------------------------------------------------------------
BRANIN_MIN = 0.397887
HARTMANN6_MIN = -3.32237


def branin(p: dict) -> float:
    x1, x2 = p["x1"], p["x2"]
    a, b, c, r, s, t = 1.0, 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


_H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8],
                 [17, 8, 0.05, 10, 0.1, 14]])
_H_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                        [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
_H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(p: dict) -> float:
    x = np.array([p[f"x{i}"] for i in range(1, 7)])
    return float(-(_H_ALPHA * np.exp(-(_H_A * (x - _H_P) ** 2).sum(1))).sum())


_OPTIMIZERS = {"sgd": (0.0, -1.5), "adam": (0.05, -3.0), "rmsprop": (0.08, -2.7)}  # offset, best log10(lr)


def mixed(p: dict) -> float:
    """A made-up training loss over a mixed, conditional space (`MIXED`), 0 at its minimum: an
    optimizer with its own best learning rate and its own parameters, a depth whose layer widths
    exist only when there are that many layers, a dropout whose best value grows with depth."""
    offset, best_lr = _OPTIMIZERS[p["optimizer"]]
    loss = offset + 0.3 * (math.log10(p["learning_rate"]) - best_lr) ** 2
    if p["optimizer"] == "sgd":
        loss += 0.5 * (p["momentum"] - 0.9) ** 2 + (0.0 if p["nesterov"] else 0.03)
    if p["optimizer"] == "rmsprop":
        loss += 0.4 * (p["rho"] - 0.95) ** 2
    layers = p["layers"]
    loss += {1: 0.1, 2: 0.0, 3: 0.02}[layers]
    loss += sum(0.01 * (math.log2(p[f"units{i}"]) - 7.0) ** 2 for i in range(1, layers + 1))
    loss += 0.2 * (p["dropout"] - (0.2 + 0.1 * layers)) ** 2
    return loss + {"relu": 0.0, "elu": 0.01, "tanh": 0.04}[p["activation"]]


MIXED = parse_space({
    "optimizer": {"choices": ["sgd", "adam", "rmsprop"]},
    "learning_rate": {"type": "real", "low": 1e-5, "high": 1.0, "prior": "log-uniform"},
    "momentum": {"type": "real", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}},
    "nesterov": {"choices": [True, False], "when": {"optimizer": "sgd"}},
    "rho": {"type": "real", "low": 0.5, "high": 0.999, "when": {"optimizer": "rmsprop"}},
    "layers": {"choices": [1, 2, 3]},
    "units1": {"type": "integer", "low": 8, "high": 512, "prior": "log-uniform"},
    "units2": {"type": "integer", "low": 8, "high": 512, "prior": "log-uniform", "when": {"layers": [2, 3]}},
    "units3": {"type": "integer", "low": 8, "high": 512, "prior": "log-uniform", "when": {"layers": 3}},
    "dropout": {"type": "real", "low": 0.0, "high": 0.7},
    "activation": {"choices": ["relu", "tanh", "elu"]},
}, source="bench/sample_efficiency.py", did_you_mean=lambda *_: "")

def branin_penalty(p: dict) -> float:
    """Branin with a fifth of the square infeasible (x2 > 12), where it returns a penalty of 1e12,
    as objectives often do."""
    return 1e12 if p["x2"] > 12 else branin(p)


def branin_cat(p: dict) -> float:
    """Branin beside a categorical that changes nothing: what a kernel must learn to ignore."""
    return branin(p)


_ARCH = {"a": 5, "b": 4, "c": 3, "d": 0, "e": 6, "f": 7, "g": 2, "h": 8}
_ACT = {"relu": 0, "tanh": 1, "elu": 2}


def categories(p: dict) -> float:
    """Two categoricals that matter (8 x 3 combinations) and a log-scaled real, 0 at (d, relu, 10^-2.5)."""
    return _ARCH[p["arch"]] + _ACT[p["act"]] + 0.2 * (math.log10(p["lr"]) + 2.5) ** 2


FUNCTIONS = {
    "branin": (branin, Space((Real("x1", -5.0, 10.0), Real("x2", 0.0, 15.0))), BRANIN_MIN),
    "hartmann6": (hartmann6, Space(tuple(Real(f"x{i}", 0.0, 1.0) for i in range(1, 7))), HARTMANN6_MIN),
    "mixed": (mixed, MIXED, 0.0),
    "branin+penalty": (branin_penalty, Space((Real("x1", -5.0, 10.0), Real("x2", 0.0, 15.0))), BRANIN_MIN),
    "branin+cat": (branin_cat, Space((Real("x1", -5.0, 10.0), Real("x2", 0.0, 15.0),
                                      parse_space({"c": {"choices": ["a", "b", "c", "d"]}}, source="bench",
                                                  did_you_mean=lambda *_: "").params[0])), BRANIN_MIN),
    "categories": (categories, parse_space({
        "arch": {"choices": list(_ARCH)}, "act": {"choices": list(_ACT)},
        "lr": {"type": "real", "low": 1e-4, "high": 1e-1, "prior": "log-uniform"}},
        source="bench/sample_efficiency.py", did_you_mean=lambda *_: ""), 0.0),
}


# -- searchers behind one ask/tell ----------------------------------------------------------------
class MpioptAdapter:
    def __init__(self, space, seed, rule=None, random=False, stale=False, width=1, fresh=False, evolution=False):
        from mpiopt.search import BayesianSearch, EvolutionSearch, RandomSearch, RoundPolicy

        if random:
            self.s = RandomSearch(space, seed=seed)
        elif evolution:
            self.s = EvolutionSearch(space, seed=seed)
        else:
            self.s = BayesianSearch(space, seed=seed, batch_rule=rule or "believer_clipped")
        # as under `Prefetching`: rounds keep the last kernel fit (`defer_fit`), refitted when due
        self.stale = stale
        self.polish_s = RoundPolicy().handout_polish_s
        self.fresh = fresh
        self.width = width
        self.before: tuple[dict, dict] | None = None
        self.latest = None

    def ask(self, n):
        if not self.stale or self.before is None or not self.s.model_ready():
            return self.s.ask(n)
        # as the live coordinator does with several groups: the round (fit, candidates, polish)
        # was prepared in the background before the latest result came in, with that trial still
        # pending; the hand-out replaces its fantasy by its value and takes the best candidate
        if self.fresh:  # long trials: the hand-out waits for a round prepared with the latest result
            rnd = self.s.prepare_round(polish=min(2 * self.width, 12), defer_fit=True)
        else:
            observed, pending = self.s.observed, self.s.pending
            self.s.observed, self.s.pending = self.before
            try:
                rnd = self.s.prepare_round(polish=min(2 * self.width, 12), defer_fit=True)
            finally:
                self.s.observed, self.s.pending = observed, pending
            rnd.learn(*self.latest)
        params = rnd.hand_out(self.s.known_points(), polish_s=self.polish_s)
        if params is None:
            params = self.s.design_point()
        self.s.pending[n] = params
        return params

    def tell(self, n, params, value):
        if self.stale:
            if self.s.refit_due():  # the background thread refits after a round, on that round's data
                self.s.refit()
            self.before = (dict(self.s.observed), dict(self.s.pending))
            self.latest = (params, value)
        self.s.tell(n, params, value)


class SkoptLiar:
    def __init__(self, space, seed):
        from skopt import Optimizer
        from mpiopt.space import to_skopt

        self.space = space
        self.opt = Optimizer(to_skopt(space), base_estimator="GP", acq_func="gp_hedge", n_initial_points=10,
                             random_state=seed)
        self.done: list[tuple[list, float]] = []
        self.pending: dict[int, list] = {}
        self.seed = seed

    def ask(self, n):
        from skopt import Optimizer
        from mpiopt.space import to_skopt

        if not self.pending:
            x = self.opt.ask()
        else:  # pending points told at the best value seen, on a copy (what ask(n_points) does inside)
            opt = Optimizer(to_skopt(self.space), base_estimator="GP", acq_func="gp_hedge", n_initial_points=10,
                            random_state=self.seed + n)
            best = min((v for _, v in self.done), default=0.0)
            X = [x for x, _ in self.done] + list(self.pending.values())
            y = [v for _, v in self.done] + [best] * len(self.pending)
            if X:
                opt.tell(X, y)
            x = opt.ask()
        self.pending[n] = list(x)
        return self.space.from_list(x)

    def tell(self, n, params, value):
        x = self.pending.pop(n)
        self.done.append((x, value))
        self.opt.tell(x, value)


class OptunaTPE:
    def __init__(self, space, seed):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, constant_liar=True))
        self.dists = {p.name: optuna.distributions.FloatDistribution(p.low, p.high) for p in space.params}
        self.trials = {}

    def ask(self, n):
        t = self.study.ask(self.dists)
        self.trials[n] = t
        return dict(t.params)

    def tell(self, n, params, value):
        self.study.tell(self.trials.pop(n), value)


def make(method, space, seed, width=1):
    if method == "optuna":
        return OptunaTPE(space, seed)
    if method == "random":
        return MpioptAdapter(space, seed, random=True)
    if method == "evolution":
        return MpioptAdapter(space, seed, evolution=True)
    if method == "skopt-liar":
        return SkoptLiar(space, seed)
    if method in ("mpiopt-ahead", "mpiopt-long"):
        return MpioptAdapter(space, seed, stale=True, width=width, fresh=method == "mpiopt-long")
    rule = {"mpiopt": None, "mpiopt-liar": "liar", "mpiopt-believer": "believer"}[method]
    return MpioptAdapter(space, seed, rule=rule)


def simulate(method: str, function: str, width: int, budget: int, seed: int) -> tuple[list[float], float]:
    """Losses of trials 0..budget-1 (in the order asked) and the seconds spent in ask/tell."""
    f, space, _ = FUNCTIONS[function]
    return replay(make(method, space, seed, width), f, width, budget, np.random.default_rng(seed + 1000 * width))


def replay(searcher, f, width: int, budget: int, rng: np.random.Generator) -> tuple[list, float]:
    """`budget` trials of `f` by `searcher` on `width` groups in virtual time, each trial lasting
    U(0.5, 1.5): the values of trials 0..budget-1 (in the order asked) and the seconds spent in
    ask/tell. The searcher is told a result and asked for the next point while the others run."""
    values: dict[int, object] = {}
    running: list[tuple[float, int, dict]] = []
    clock, asked, spent = 0.0, 0, 0.0
    while asked < min(width, budget):
        t = time.perf_counter()
        params = searcher.ask(asked)
        spent += time.perf_counter() - t
        heapq.heappush(running, (clock + rng.uniform(0.5, 1.5), asked, params))
        asked += 1
    while running:
        clock, n, params = heapq.heappop(running)
        values[n] = f(params)
        t = time.perf_counter()
        searcher.tell(n, params, values[n])
        if asked < budget:
            new = searcher.ask(asked)
            heapq.heappush(running, (clock + rng.uniform(0.5, 1.5), asked, new))
            asked += 1
        spent += time.perf_counter() - t
    return [values[i] for i in range(budget)], spent


def _job(args):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return args, simulate(*args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed+seeds-1")
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--budgets", type=int, nargs="+", default=[40, 80])
    ap.add_argument("--methods", nargs="+", default=["mpiopt", "random", "optuna"])
    ap.add_argument("--functions", nargs="+", default=["branin", "hartmann6"])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    top = max(args.budgets)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(m, fn, w, top, s) for fn in args.functions for m in args.methods for w in args.widths
            for s in seeds]
    results = {}
    t0 = time.time()
    with ProcessPoolExecutor(args.jobs) as pool:
        for (m, fn, w, _, s), (vals, spent) in pool.map(_job, jobs):
            results[(m, fn, w, s)] = (vals, spent)
    print(f"{len(jobs)} searches in {time.time() - t0:.0f} s; median [25th, 75th percentile] of the best value "
          f"over seeds {seeds[0]}-{seeds[-1]} (lower is better)\n")
    for fn in args.functions:
        print(f"### {fn} (minimum {FUNCTIONS[fn][2]})\n")
        cols = " | ".join(f"best @ {b}" for b in args.budgets)
        head = f"| method | groups | {cols} | s in ask/tell per search |"
        print(head)
        print("|" + " --- |" * (head.count("|") - 1))
        for m in args.methods:
            for w in args.widths:
                cells = []
                for b in args.budgets:
                    bests = [min(results[(m, fn, w, s)][0][:b]) for s in seeds]
                    q1, med, q3 = np.percentile(bests, [25, 50, 75])
                    cells.append(f"{med:.3f} [{q1:.3f}, {q3:.3f}]")
                spent = np.median([results[(m, fn, w, s)][1] for s in seeds])
                print(f"| {m} | {w} | " + " | ".join(cells) + f" | {spent:.1f} |")
        print()
        if 1 in args.widths and len(args.widths) > 1:
            print_gaps(results, fn, args.methods, args.widths, args.budgets, seeds)


def print_gaps(results, fn, methods, widths, budgets, seeds, draws: int = 5000) -> None:
    """Each width's median best minus the same method's median with one group, with a 90%
    bootstrap interval (the seeds resampled, the same draw for both widths: the gap's own
    noise, which a 10-seed median makes large)."""
    rng = np.random.default_rng(12345)
    idx = rng.integers(0, len(seeds), (draws, len(seeds)))
    head = "| method | groups | " + " | ".join(f"gap to 1 group @ {b} [90% interval]" for b in budgets) + " |"
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    for m in methods:
        for w in widths:
            if w == 1:
                continue
            cells = []
            for b in budgets:
                one = np.array([min(results[(m, fn, 1, s)][0][:b]) for s in seeds])
                many = np.array([min(results[(m, fn, w, s)][0][:b]) for s in seeds])
                boot = np.median(many[idx], axis=1) - np.median(one[idx], axis=1)
                lo, hi = np.percentile(boot, [5, 95])
                cells.append(f"{np.median(many) - np.median(one):.3f} [{lo:.3f}, {hi:.3f}]")
            print(f"| {m} | {w} | " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main()

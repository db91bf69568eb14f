"""Pareto searches: hypervolume after 40 and 80 trials on ZDT1 and DTLZ2, 1 and 8 groups.

    python bench/pareto.py [--seeds 10] [--widths 1 8] [--budgets 40 80] [--jobs 2]
                           [--methods mpiopt evolution random nsga2 motpe] [--functions zdt1 dtlz2]

Simulated in virtual time by bench/sample_efficiency.py's `replay` (no MPI, no sleeping): `width` groups
run trials whose durations are drawn from U(0.5, 1.5); when one finishes the searcher is told its
two losses and asked for the next point while the other trials are still running. The score is
the hypervolume of the first B trials asked (larger is better), against a fixed reference point.

Problems (two objectives, both minimised, 6 variables in [0, 1]):
  zdt1    Zitzler, Deb and Thiele (2000): f1 = x1, f2 = g (1 - sqrt(f1 / g)),
          g = 1 + 9 mean(x2..x6); reference point (11, 11), best hypervolume 120.667
  dtlz2   Deb, Thiele, Laumanns and Zitzler (2002), M = 2: f = (1 + g) (cos, sin)(x1 pi / 2),
          g = sum((x2..x6 - 0.5)^2); reference point (1.1, 1.1), best hypervolume 0.4246

Methods:
  mpiopt     objective.pareto with the default search: ParetoSearch over BayesianSearch (GP, EI,
             10 initial points), asked when a result arrives, as `mpiopt search` does
  evolution  objective.pareto with algorithm: evolution (population 20, tournaments of 5)
  random     independent uniform draws
  nsga2      Optuna's NSGAIISampler(seed) through study.ask/tell
  motpe      Optuna's TPESampler(seed, constant_liar=True) on the two objectives (MOTPE)
(`pip install optuna` for the last two; mpiopt does not depend on it.)

Prints the median [25th, 75th percentile] of the hypervolume over seeds; asserts nothing.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mpiopt.pareto import hypervolume_2d  # noqa: E402
from sample_efficiency import replay  # noqa: E402  (bench/ is the script's folder)
from mpiopt.space import Real, Space  # noqa: E402

DIMS = 6
SPACE = Space(tuple(Real(f"x{i}", 0.0, 1.0) for i in range(1, DIMS + 1)))


def zdt1(p: dict) -> tuple[float, float]:
    x = [p[f"x{i}"] for i in range(1, DIMS + 1)]
    g = 1.0 + 9.0 * sum(x[1:]) / (DIMS - 1)
    return x[0], g * (1.0 - math.sqrt(x[0] / g))


def dtlz2(p: dict) -> tuple[float, float]:
    x = [p[f"x{i}"] for i in range(1, DIMS + 1)]
    g = sum((v - 0.5) ** 2 for v in x[1:])
    return (1 + g) * math.cos(x[0] * math.pi / 2), (1 + g) * math.sin(x[0] * math.pi / 2)


FUNCTIONS = {  # function, reference point, best hypervolume
    "zdt1": (zdt1, (11.0, 11.0), 121.0 - 1.0 / 3.0),
    "dtlz2": (dtlz2, (1.1, 1.1), 1.21 - math.pi / 4),
}


class Mpiopt:
    def __init__(self, seed: int, algorithm: str) -> None:
        from mpiopt.config import SEARCH_DEFAULTS, SearchSettings
        from mpiopt.search import make_searcher

        settings = SearchSettings(**{**SEARCH_DEFAULTS, "algorithm": algorithm, "seed": seed})
        self.s = make_searcher(SPACE, settings, goals=2)  # as `mpiopt search` makes it, asked on demand

    def ask(self, n: int) -> dict:
        return self.s.ask(n)

    def tell(self, n: int, params: dict, values: tuple[float, float]) -> None:
        self.s.tell(n, params, values)


class Optuna:
    def __init__(self, seed: int, sampler: str) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        s = (optuna.samplers.NSGAIISampler(seed=seed) if sampler == "nsga2"
             else optuna.samplers.TPESampler(seed=seed, constant_liar=True))
        self.study = optuna.create_study(directions=["minimize", "minimize"], sampler=s)
        self.dists = {p.name: optuna.distributions.FloatDistribution(p.low, p.high) for p in SPACE.params}
        self.trials: dict = {}

    def ask(self, n: int) -> dict:
        t = self.study.ask(self.dists)
        self.trials[n] = t
        return dict(t.params)

    def tell(self, n: int, params: dict, values: tuple[float, float]) -> None:
        self.study.tell(self.trials.pop(n), list(values))


def make(method: str, seed: int):
    if method in ("nsga2", "motpe"):
        return Optuna(seed, method)
    return Mpiopt(seed, {"mpiopt": "bayesian", "evolution": "evolution", "random": "random"}[method])


def simulate(method: str, function: str, width: int, budget: int, seed: int) -> tuple[list[tuple], float]:
    """The losses of trials 0..budget-1 (in the order asked) and the seconds spent in ask/tell."""
    return replay(make(method, seed), FUNCTIONS[function][0], width, budget, np.random.default_rng(seed + 1000 * width))


def _job(args):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return args, simulate(*args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--budgets", type=int, nargs="+", default=[40, 80])
    ap.add_argument("--methods", nargs="+", default=["mpiopt", "evolution", "random", "nsga2", "motpe"])
    ap.add_argument("--functions", nargs="+", default=["zdt1", "dtlz2"])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(m, fn, w, max(args.budgets), s) for fn in args.functions for m in args.methods for w in args.widths
            for s in seeds]
    results = {}
    t0 = time.time()
    with ProcessPoolExecutor(args.jobs) as pool:
        for (m, fn, w, _, s), out in pool.map(_job, jobs):
            results[(m, fn, w, s)] = out
    print(f"{len(jobs)} searches in {time.time() - t0:.0f} s; median [25th, 75th percentile] of the hypervolume "
          f"over seeds {seeds[0]}-{seeds[-1]} (higher is better)\n")
    for fn in args.functions:
        _, ref, top = FUNCTIONS[fn]
        print(f"### {fn} (reference point {ref}, best hypervolume {top:.4g})\n")
        cols = " | ".join(f"hypervolume @ {b}" for b in args.budgets)
        head = f"| method | groups | {cols} | s in ask/tell per search |"
        print(head)
        print("|" + " --- |" * (head.count("|") - 1))
        for w in args.widths:
            for m in args.methods:
                cells = []
                for b in args.budgets:
                    hv = [hypervolume_2d(results[(m, fn, w, s)][0][:b], ref) for s in seeds]
                    q1, med, q3 = np.percentile(hv, [25, 50, 75])
                    cells.append(f"{med:.4g} [{q1:.4g}, {q3:.4g}]")
                spent = np.median([results[(m, fn, w, s)][1] for s in seeds])
                print(f"| {m} | {w} | " + " | ".join(cells) + f" | {spent:.1f} |")
        print()


if __name__ == "__main__":
    main()

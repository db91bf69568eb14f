"""Early stopping on recorded learning curves: full-training Bayesian search against ASHA, Hyperband
and Optuna's pruned TPE, with 1, 8 and 32 groups.

    python bench/multifidelity.py [--seeds 50] [--widths 1 8 32] [--budget 60] [--jobs 2]
                                  [--methods bayes random+asha bayes+asha hyperband optuna]
                                  [--curves bench/data/mnist1d_cnn_curves.jsonl] [--space searchspaces/mnist1d_cnn.yaml]
                                  [--oracle-at K ...] [--ranked-by R ...]
                                  [--acquisition gp_hedge|EI|PI|LCB] [--min-epochs 1] [--reduction-factor 3]
                                  [--judge-final] [--stopping] [--gaps G ...]

The curves are real: bench/record_curves.py trained 200 random configurations of the MNIST-1D CNN
space (searchspaces/mnist1d_cnn.yaml) for 27 epochs each on one process and kept every epoch's
val_accuracy and wall time; the MLP space's (searchspaces/mnist1d.yaml) are in
bench/data/mnist1d_mlp_curves.jsonl (give --curves and --space both). A search here runs in virtual
time: `width` groups train trials epoch by epoch, each epoch costing its recorded time. A suggested
point trains the configuration nearest to it (in the unit cube of the space, log scale where the
prior is) that no earlier trial of that search trained, so each search draws from the 200 without
replacement; searchers are told the point they suggested.

mpiopt's methods run mpiopt's own searchers and schedulers under the coordinator's rules: a free
group first continues a paused trial the scheduler promotes, otherwise it starts a new one; a
trial's reports go to the scheduler, and at a rung to the searcher (`tell_rung`); a paused trial
waits without a group and is no longer pending in the searcher; a pruned one is told to the
searcher as a failure.

  bayes         today's default: GP (gp_hedge, initial_points 5, the example space's settings), full training
  random        random search, full training
  random+asha   random search, ASHA (min_epochs 1, reduction_factor 3: rungs 1, 3, 9, 27)
  bayes+asha    mpiopt's: the GP fitted on the highest rung with 5 results (BOHB's rule, RungModel), ASHA
  ladder+asha   the GP fitted on every trial, scored on rung 1's scale in the order of the higher rungs
                (LadderModel), ASHA
  budget+asha   one GP on (configuration, log epochs) fitted on every rung result, EI at the top rung
                (BudgetModel: the budget as an input of the GP), ASHA
  hyperband     random search, Hyperband (ASHA brackets from rungs 1, 3, 9 and 27)
  bayes+hyperband  the GP on rungs (BOHB's rule), Hyperband (BOHB)
  ladder+hyperband the GP on ladder scores, Hyperband
  optuna        Optuna's TPESampler(constant_liar=True, seed) with HyperbandPruner(1, 27, 3), a
                trial reporting every epoch and stopping when should_prune() says so
                (`pip install optuna` for this benchmark only; mpiopt does not depend on it)
  oracle@K      (with --oracle-at K) random+asha whose trial K trains the best configuration of
                the table not trained yet: what handing out the winner at trial K costs under
                ASHA, a bound on what any searcher's steering can gain
  ranked@R      (with --ranked-by R) random+asha whose every new trial trains the configuration
                with the best recorded val_accuracy after R epochs among those not trained yet:
                a searcher that knows rung R perfectly and hands out best first (a model fitted
                on rung R's results can at most learn that order)

With --judge-final, mpiopt's schedulers rank a trial at a rung by the best val_accuracy its recorded
curve reaches in all 27 epochs instead of its best so far: a promotion rule that never mistakes a
slow starter, the most any rule at the rungs could know (the searchers are still told the rung values).
With --stopping, mpiopt's asha and hyperband stop a trial that does not lead at its rung for good, as
Ray Tune's ASHA does, instead of pausing it for a later promotion.

A search's best is the best figure of merit (its best epoch's val_accuracy) among its trials trained
to the end: what `mpiopt results` calls the best. The target is the best such value in the table
less 0.5 points. Each search stops starting work once it has spent `--budget` full trainings of
compute (budget x 27 epochs). Prints, per width, the median over seeds of the best at fractions of
the budget (compute and wall time; "-": most seeds had no trial trained to the end yet), and the
median compute and wall time to the target with the share of seeds that reached it (a seed that did
not counts as never), and the median compute spent when a configuration that can reach the target
is first handed out: what the searcher costs, the rest of the compute to the target being what
the schedule costs while that trial trains to the end; of that rest, the epochs the other groups
trained while the trial that reached the target sat paused at a rung. Asserts nothing.
"""
from __future__ import annotations

import argparse
import heapq
import importlib.util
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# one BLAS thread a process: the searches run side by side in a process pool
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mpiopt.config import load_config  # noqa: E402
from mpiopt.scheduler import Decision, make_scheduler  # noqa: E402
from mpiopt.search import BudgetModel, LadderModel, RungModel, make_searcher  # noqa: E402
from mpiopt.space import Categorical  # noqa: E402

EPOCHS = 27
TARGET_GAP = 0.005
# method -> (search.algorithm, search.scheduler); optuna is Optuna's
METHODS = {"bayes": ("bayesian", "none"), "random": ("random", "none"), "random+asha": ("random", "asha"),
           "bayes+asha": ("bayesian", "asha"), "ladder+asha": ("bayesian", "asha"),
           "budget+asha": ("bayesian", "asha"),
           "hyperband": ("random", "hyperband"), "bayes+hyperband": ("bayesian", "hyperband"),
           "ladder+hyperband": ("bayesian", "hyperband"), "optuna": None}


@dataclass(frozen=True)
class Knobs:
    """The settings a run varies: the GP's acquisition and the early-stopping schedule."""
    acquisition: str = "gp_hedge"
    min_epochs: int = 1
    reduction_factor: int = 3
    judge_final: bool = False  # the scheduler judges each trial by its final value (an oracle rule)
    stopping: bool = False  # a trial that does not lead at a rung is stopped for good, not paused


# -- the recorded curves -------------------------------------------------------------------------
@dataclass
class Curves:
    space: object  # mpiopt.space.Space
    params: list[dict]
    acc: np.ndarray  # (configurations, epochs) val_accuracy after each epoch
    sec: np.ndarray  # (configurations, epochs) wall seconds of each epoch
    coords: np.ndarray  # (configurations, dims) positions in the unit cube

    @classmethod
    def load(cls, path: Path, space) -> Curves:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        rows = [r for r in rows if len(r["val_accuracy"]) >= EPOCHS]
        return cls(space=space, params=[r["params"] for r in rows],
                   acc=np.array([r["val_accuracy"][:EPOCHS] for r in rows]),
                   sec=np.array([r["epoch_s"][:EPOCHS] for r in rows]),
                   coords=np.array([unit_coords(space, r["params"]) for r in rows]))

    def nearest_unused(self, params: dict, used: set[int]) -> int | None:
        """The configuration nearest to `params` among those not in `used`; None when all are."""
        distance = np.linalg.norm(self.coords - unit_coords(self.space, params), axis=1)
        distance[list(used)] = np.inf
        best = int(np.argmin(distance))
        return None if math.isinf(distance[best]) else best

    def best_unused(self, used: set[int], epochs: int = EPOCHS) -> int:
        """The configuration with the best value after `epochs` epochs among those not in `used`."""
        final = self.acc[:, :epochs].max(axis=1)
        final[list(used)] = -np.inf
        return int(np.argmax(final))

    def target(self) -> float:
        return float(self.acc.max()) - TARGET_GAP


def unit_coords(space, params: dict) -> list[float]:
    """A point's place in the unit cube: log scale for log-uniform priors, one-hot for categories."""
    out: list[float] = []
    for p in (space[name] for name in space.names):
        v = params[p.name]
        if isinstance(p, Categorical):
            out.extend(float(v == c) for c in p.choices)
        elif p.prior == "log-uniform":
            out.append(math.log(v / p.low) / math.log(p.high / p.low))
        else:
            out.append((v - p.low) / (p.high - p.low))
    return out


# -- one search in virtual time ------------------------------------------------------------------
@dataclass
class Trace:
    """After each trial trained to the end: the compute spent (epochs), the virtual time, the best."""
    compute: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    best: list[float] = field(default_factory=list)
    winner_starts: float = math.inf  # epochs trained when a configuration that reaches the target first starts
    winner_waited: float = math.inf  # epochs others trained while the trial that reached the target sat paused

    def add(self, compute: float, wall: float, value: float) -> None:
        best = max(value, self.best[-1]) if self.best else value
        self.compute.append(compute)
        self.wall.append(wall)
        self.best.append(best)

    def best_at(self, axis: str, x: float) -> float:
        xs = getattr(self, axis)
        k = int(np.searchsorted(xs, x, side="right"))
        return self.best[k - 1] if k else -math.inf  # no trial trained to the end yet

    def reached(self, target: float) -> tuple[float, float]:
        for c, w, b in zip(self.compute, self.wall, self.best, strict=True):
            if b >= target:
                return c, w
        return math.inf, math.inf


# work: (trial key, configuration, first epoch, last epoch): train epochs e0+1 .. e1
Work = tuple[object, int, int, int]


def simulate(policy, curves: Curves, width: int, budget_epochs: float) -> Trace:
    """`width` groups take work from `policy` whenever they are free, until the budget is spent."""
    trace = Trace()
    heap: list = []
    seq = 0
    started = done = 0.0
    idle: list[int] = []
    paused_at: dict[object, float] = {}  # trial key -> epochs trained when it last ended a segment
    waited: dict[object, float] = {}  # trial key -> epochs trained by others while it sat paused

    def start(group: int, now: float, work: Work | None) -> None:
        nonlocal seq, started
        if work is None:
            idle.append(group)
            return
        key, idx, e0, e1 = work
        if e0 == 0 and curves.acc[idx].max() >= curves.target():
            trace.winner_starts = min(trace.winner_starts, done)
        if e0 > 0 and key in paused_at:
            waited[key] = waited.get(key, 0.0) + done - paused_at.pop(key)
        started += e1 - e0
        seq += 1
        heapq.heappush(heap, (now + float(curves.sec[idx, e0:e1].sum()), seq, group, work))

    def fresh_work() -> Work | None:
        return policy.next_work() if started < budget_epochs else None

    for group in range(width):
        start(group, 0.0, fresh_work())
    while heap:
        now, _, group, work = heapq.heappop(heap)
        done += work[3] - work[2]
        going_on, value = policy.after_segment(work)
        if value is not None:
            if value >= curves.target() and math.isinf(trace.winner_waited):
                trace.winner_waited = waited.get(work[0], 0.0)
            trace.add(done, now, value)
        elif going_on is None:
            paused_at[work[0]] = done  # paused (or stopped: then never continued)
        start(group, now, going_on if going_on is not None else fresh_work())
        waiting, idle[:] = list(idle), []
        for g in waiting:  # a result may have made a paused trial promotable
            start(g, now, fresh_work())
    return trace


class MpioptPolicy:
    """The coordinator's rules with mpiopt's searcher and scheduler."""

    def __init__(self, curves: Curves, searcher, scheduler, oracle_at: int | None = None,
                 ranked_by: int | None = None, judge_final: bool = False) -> None:
        self.curves, self.searcher, self.scheduler = curves, searcher, scheduler
        self.judge_final = judge_final  # rungs rank trials by their recorded final value, not their value so far
        self.oracle_at = oracle_at  # the trial that trains the table's best configuration
        self.ranked_by = ranked_by  # every trial trains the best configuration left after this many epochs
        self.rungs = frozenset(scheduler.rung_epochs())
        self.used: set[int] = set()
        self.config: dict[int, int] = {}
        self.params: dict[int, dict] = {}
        self.paused: dict[int, int] = {}  # trial -> epochs done
        self.best_loss: dict[int, float] = {}
        self.next_trial = 0

    def next_work(self) -> Work | None:
        closing = len(self.used) == len(self.curves.params)  # no new trial can start
        for n in self.scheduler.promotable(closing=closing):
            if n in self.paused:
                self.scheduler.promote(n)
                self.searcher.add_pending(n, self.params[n])
                return self._segment(n, self.paused.pop(n))
        if closing:
            return None
        n = self.next_trial
        self.next_trial += 1
        self.params[n] = params = self.searcher.ask(n)
        self.config[n] = self.curves.nearest_unused(params, self.used)
        if n == self.oracle_at:
            self.config[n] = self.curves.best_unused(self.used)
        if self.ranked_by is not None:
            self.config[n] = self.curves.best_unused(self.used, epochs=self.ranked_by)
        self.used.add(self.config[n])
        self.scheduler.start(n)
        return self._segment(n, 0)

    def _segment(self, n: int, e0: int) -> Work:
        later = [e for e in self.scheduler.decision_epochs(n) if e > e0]
        return (n, self.config[n], e0, min(later, default=EPOCHS))

    def after_segment(self, work: Work) -> tuple[Work | None, float | None]:
        n, idx, e0, e1 = work
        decision = Decision.CONTINUE
        for epoch in range(e0 + 1, e1 + 1):
            decision = self._report(n, epoch, float(self.curves.acc[idx, epoch - 1]))
        if e1 == EPOCHS:
            value = float(self.curves.acc[idx].max())
            self.scheduler.finished(n)
            self.searcher.tell(n, self.params[n], -value)
            return None, value
        if decision is Decision.PAUSE:
            self.paused[n] = e1
            self.searcher.drop_pending(n)
        elif decision is Decision.STOP:
            self.scheduler.finished(n)
            self.searcher.tell(n, self.params[n], None)
        else:
            return self._segment(n, e1), None
        return None, None

    def _report(self, n: int, epoch: int, accuracy: float) -> Decision:
        """As Coordinator._take_report: the scheduler judges the best loss so far."""
        best = min(self.best_loss.get(n, math.inf), -accuracy)
        self.best_loss[n] = best
        judged = -float(self.curves.acc[self.config[n]].max()) if self.judge_final else best
        decision = self.scheduler.report(n, epoch, judged)
        if epoch in self.rungs:
            self.searcher.tell_rung(n, self.params[n], epoch, best)
        return decision


class OptunaPolicy:
    """Optuna's ask/tell with a pruner: every epoch reported, pruned when should_prune() says so."""

    def __init__(self, curves: Curves, space, seed: int, knobs: Knobs) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.curves, self.space = curves, space
        self.study = optuna.create_study(
            direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed, constant_liar=True),
            pruner=optuna.pruners.HyperbandPruner(min_resource=knobs.min_epochs, max_resource=EPOCHS,
                                                  reduction_factor=knobs.reduction_factor))
        self.used: set[int] = set()

    def next_work(self) -> Work | None:
        if len(self.used) == len(self.curves.params):
            return None
        trial = self.study.ask()
        params = {p.name: self._suggest(trial, p) for p in (self.space[n] for n in self.space.names)}
        idx = self.curves.nearest_unused(params, self.used)
        self.used.add(idx)
        return (trial, idx, 0, 1)

    @staticmethod
    def _suggest(trial, p):
        if isinstance(p, Categorical):
            return trial.suggest_categorical(p.name, list(p.choices))
        log = p.prior == "log-uniform"
        if isinstance(p.low, int):
            return trial.suggest_int(p.name, p.low, p.high, log=log)
        return trial.suggest_float(p.name, p.low, p.high, log=log)

    def after_segment(self, work: Work) -> tuple[Work | None, float | None]:
        import optuna

        trial, idx, _, epoch = work
        trial.report(float(self.curves.acc[idx, epoch - 1]), epoch)
        if epoch == EPOCHS:
            value = float(self.curves.acc[idx].max())
            self.study.tell(trial, value)
            return None, value
        if trial.should_prune():
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return None, None
        return (trial, idx, epoch, epoch + 1), None


def make_policy(method: str, curves: Curves, cfg, seed: int, knobs: Knobs):
    if method == "optuna":
        return OptunaPolicy(curves, cfg.space, seed, knobs)
    oracle_at = int(method.split("@")[1]) if method.startswith("oracle@") else None
    ranked_by = int(method.split("@")[1]) if method.startswith("ranked@") else None
    algorithm, scheduler = METHODS["random+asha" if "@" in method else method]
    settings = cfg.with_search(seed=seed, algorithm=algorithm, scheduler=scheduler, min_epochs=knobs.min_epochs,
                               reduction_factor=knobs.reduction_factor, acquisition=knobs.acquisition).search
    sched = make_scheduler(settings.scheduler, epochs=EPOCHS, min_epochs=knobs.min_epochs,
                           reduction_factor=knobs.reduction_factor, pausable=not knobs.stopping)
    if settings.scheduler == "none":
        searcher = make_searcher(cfg.space, settings)
    elif method.startswith("budget+"):
        searcher = BudgetModel(cfg.space, top=EPOCHS, seed=seed, initial_points=settings.initial_points)
    elif method.startswith("ladder+"):
        searcher = LadderModel(make_searcher(cfg.space, settings), cfg.space, top=EPOCHS, seed=seed)
    else:  # as mpiopt search builds it (cli._make_searcher)
        searcher = RungModel(lambda: make_searcher(cfg.space, settings), cfg.space, top=EPOCHS,
                             enough=settings.initial_points, seed=seed)
    return MpioptPolicy(curves, searcher, sched, oracle_at, ranked_by, knobs.judge_final)


# -- the experiment ------------------------------------------------------------------------------
def run_one(job: tuple) -> tuple[str, int, int, Trace]:
    method, width, seed, budget, curves_path, space_file, knobs = job
    cfg = load_config(space_file)
    curves = Curves.load(curves_path, cfg.space)
    trace = simulate(make_policy(method, curves, cfg, seed, knobs), curves, width, budget * EPOCHS)
    return method, width, seed, trace


def show(x: float, fmt: str) -> str:
    return "never" if x == math.inf else "-" if x == -math.inf else format(x, fmt)


def print_rung_correlation(curves: Curves) -> None:
    """How well a rung ranks the configurations as full training does (Spearman's rho of the best
    val_accuracy so far at the rung against the best over all epochs)."""
    from scipy.stats import spearmanr

    final = curves.acc.max(axis=1)
    rhos = [f"rung {r}: {spearmanr(curves.acc[:, :r].max(axis=1), final).statistic:.2f}" for r in (1, 3, 9)]
    print("rank correlation with the final value, " + ", ".join(rhos))


def report(traces: dict, methods: list[str], widths: list[int], budget: float, curves: Curves,
           knobs: Knobs) -> None:
    target = curves.target()
    full_train_s = float(np.median(curves.sec.sum(axis=1)))
    print(f"\n{len(curves.params)} configurations x {EPOCHS} epochs; best in the table "
          f"{curves.acc.max():.4f}, target {target:.4f}; median full training {full_train_s:.1f} s; "
          f"budget {budget:g} full trainings ({budget * EPOCHS:g} epochs); the GP's acquisition {knobs.acquisition}; "
          f"rungs from {knobs.min_epochs} epochs, reduction factor {knobs.reduction_factor}"
          + ("; rungs judge the final values" if knobs.judge_final else "")
          + ("; a trial that does not lead at a rung is stopped, not paused" if knobs.stopping else ""))
    print_rung_correlation(curves)
    fractions = (0.125, 0.25, 0.5, 1.0)
    for width in widths:
        seeds = len(traces[(methods[0], width)])
        wall_budget = budget * full_train_s / width
        print(f"\n## {width} group{'s' if width > 1 else ''}, {seeds} seeds: median best val_accuracy "
              f"after a share of the compute budget / of {wall_budget:.0f} s virtual time, and to the target")
        head = " | ".join(f"{f:g} compute" for f in fractions) + " | " + " | ".join(f"{f:g} wall" for f in fractions)
        print(f"| method | {head} | epochs to target | wall s to target | reached | epochs before a winner starts "
              f"| epochs it waited paused |")
        print("|---" * (3 + 2 * len(fractions) + 3) + "|")
        for method in methods:
            runs = traces[(method, width)]
            cells = [np.median([t.best_at("compute", f * budget * EPOCHS) for t in runs]) for f in fractions]
            cells += [np.median([t.best_at("wall", f * wall_budget) for t in runs]) for f in fractions]
            hit = [t.reached(target) for t in runs]
            epochs_to = float(np.median([c for c, _ in hit]))
            wall_to = float(np.median([w for _, w in hit]))
            share = sum(math.isfinite(c) for c, _ in hit) / len(hit)
            winner_starts = show(float(np.median([t.winner_starts for t in runs])), ".0f")
            winner_waited = show(float(np.median([t.winner_waited for t in runs])), ".0f")
            print(f"| {method} | " + " | ".join(show(c, ".4f") for c in cells)
                  + f" | {show(epochs_to, '.0f')} | {show(wall_to, '.0f')} | {share:.0%} | {winner_starts} "
                  f"| {winner_waited} |")


def report_gaps(traces: dict, methods: list[str], widths: list[int], curves: Curves, gaps: list[float]) -> None:
    """The compute to a target at several widths below the table's best: how much the verdict
    owes to the target's width."""
    best = float(curves.acc.max())
    print(f"\n## epochs to within G points of the table's best ({best:.4f}): median over seeds (share that got there)")
    within = [int(sum(curves.acc.max(axis=1) >= best - g / 100)) for g in gaps]
    print("| method | groups | " + " | ".join(f"G = {g:g} ({n} configuration{'s' * (n != 1)})"
                                             for g, n in zip(gaps, within, strict=True)) + " |")
    print("|---" * (2 + len(gaps)) + "|")
    for width in widths:
        for method in methods:
            runs = traces[(method, width)]
            cells = []
            for g in gaps:
                hit = [t.reached(best - g / 100)[0] for t in runs]
                share = sum(math.isfinite(c) for c in hit) / len(hit)
                cells.append(f"{show(float(np.median(hit)), '.0f')} ({share:.0%})")
            print(f"| {method} | {width} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--widths", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--budget", type=float, default=60, help="full trainings of compute per search")
    parser.add_argument("--methods", nargs="+", choices=METHODS,
                        default=[m for m in METHODS if not m.startswith(("ladder+", "budget+"))],
                        help="default: all but ladder+asha, ladder+hyperband and budget+asha (each an hour "
                             "more on 2 cores: their GP is fitted on every result)")
    parser.add_argument("--oracle-at", type=int, nargs="+", default=[], metavar="K",
                        help="also random+asha handing out the table's best configuration as trial K")
    parser.add_argument("--ranked-by", type=int, nargs="+", default=[], metavar="R",
                        help="also random+asha handing out configurations best first by their value after R epochs")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--curves", type=Path, default=ROOT / "bench" / "data" / "mnist1d_cnn_curves.jsonl")
    parser.add_argument("--space", type=Path, default=ROOT / "searchspaces" / "mnist1d_cnn.yaml",
                        help="the space the curves were recorded from")
    parser.add_argument("--acquisition", choices=["gp_hedge", "EI", "PI", "LCB"], default="gp_hedge",
                        help="the GP's acquisition for mpiopt's Bayesian methods (default: the space's, gp_hedge)")
    parser.add_argument("--min-epochs", type=int, default=1, help="the first rung (asha, hyperband, optuna)")
    parser.add_argument("--reduction-factor", type=int, default=3,
                        help="keep the best 1/factor at each rung (asha, hyperband, optuna)")
    parser.add_argument("--gaps", type=float, nargs="+", default=[], metavar="G",
                        help="also the epochs to within G points of the table's best (the target is 0.5)")
    parser.add_argument("--judge-final", action="store_true",
                        help="mpiopt's schedulers rank each trial at a rung by its recorded final value, not by "
                             "its value so far: a promotion rule that knows every curve's end (the searcher is "
                             "still told the rung values)")
    parser.add_argument("--stopping", action="store_true",
                        help="mpiopt's asha and hyperband stop a trial that does not lead at its rung for good "
                             "instead of pausing it (the stopping variant of ASHA, as Ray Tune's; what a function "
                             "objective gets, since it cannot be paused)")
    args = parser.parse_args()
    args.methods += [f"oracle@{k}" for k in args.oracle_at] + [f"ranked@{r}" for r in args.ranked_by]
    if "optuna" in args.methods and importlib.util.find_spec("optuna") is None:
        parser.error("method optuna needs Optuna: pip install optuna (for this benchmark only)")
    curves = Curves.load(args.curves, load_config(args.space).space)
    knobs = Knobs(args.acquisition, args.min_epochs, args.reduction_factor, args.judge_final, args.stopping)
    jobs = [(m, w, s, args.budget, args.curves, args.space, knobs) for w in args.widths for m in args.methods
            for s in range(args.first_seed, args.first_seed + args.seeds)]
    traces: dict = {(m, w): [] for m in args.methods for w in args.widths}
    t0 = time.monotonic()
    with ProcessPoolExecutor(args.jobs) as pool:
        for k, (method, width, _seed, trace) in enumerate(pool.map(run_one, jobs, chunksize=1), 1):
            traces[(method, width)].append(trace)
            if k % 50 == 0:
                print(f"{k}/{len(jobs)} searches, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    report(traces, args.methods, args.widths, args.budget, curves, knobs)
    if args.gaps:
        report_gaps(traces, args.methods, args.widths, curves, args.gaps)


if __name__ == "__main__":
    main()

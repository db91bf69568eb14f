"""The search at allocation scale: the real coordinator and searcher, N simulated groups, real time.

    python bench/scale.py --groups N --trials T --search default|ET|random --function hartmann6|ackley20
                          [--seed S] [--spread 0.2] [--rate 68] [--scheduler asha|hyperband] [--json]

One process, no MPI: the coordinator (`mpiopt.coordinator.Coordinator`, journal and results table
in a temporary run directory) and the searcher the CLI would make (`default`: `algorithm:
bayesian`, GP + gp_hedge, suggestions prepared in the background; `ET`: the extra-trees
surrogate; `random`) hand trials to N simulated groups. A group "trains" for a duration drawn
uniformly within +-spread of the mean N/rate seconds (about 1 s, 7.5 s and 60 s at 64, 512 and
4,096 groups with rate 68), so results arrive at `rate` a second at every N; the trial's value is
the test function at its parameters (bench/spaces/scale_functions.py).

With --scheduler asha (or hyperband) a trial trains 9 epochs of equal length and reports each
(a curve falling to the function's value at epoch 9: plus 30/epoch - 30/9); the scheduler judges it at
rungs 1, 3 and 9 and pauses it there (as a model objective's trial would be), and a promoted
trial goes on from the epoch it paused at on whichever group is free. `mpiopt search` then
fits its model on rung results (RungModel). The best after 1k, 2k, ... trials is the best
completed value once that many trials came back, so trials a rung paused or stopped count too.

Prints, per run: group utilization (busy time over N x the time until the last trial was handed
out: after that, idle groups are the budget's doing), dispatch latency p50/p99 (a result taken in
-> that group's next trial sent), the coordinator process's CPU seconds (all its threads) and CPU
per trial, its peak resident memory, the best value after 1k, 2k, 5k, 10k and 20k trials, and
where the suggestions came from. A run stops at its wall budget (`--wall`, default 1.5 x
trials / rate: a searcher too slow to keep up, e.g. `ET` past a few thousand results, is cut
off there, with the trials it finished). With --json, one JSON object on the last line (keys
`utilization`, `dispatch_p99_ms`, `coordinator_cpu_s`, `peak_rss_mb`, `best`, and more). Asserts
nothing.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the coordinator's numpy on one core, as under mpiexec
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import heapq  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "spaces"))

from scale_functions import FILE as FUNCTIONS  # noqa: E402
from scale_functions import SPACES  # noqa: E402

from mpiopt.trial import Report, TrialResult, TrialStatus  # noqa: E402

CHECKPOINTS = (1000, 2000, 5000, 10000, 20000, 50000, 100000)
EPOCHS = 9  # with a scheduler: the epochs of a trial, judged at rungs 1, 3 and 9


class WallReached(Exception):
    """The run's wall-clock budget is spent (a searcher too slow to hand out `--trials` in it)."""


class SimulatedGroups:
    """N groups in this process: a trial "ends" after its duration, in real time; with `epochs`,
    it reports each of its epochs to the coordinator as it goes, and stops when told."""

    queues_tasks = False  # a group gets a task only when it is free
    watch_s = None  # simulated groups are never lost

    def __init__(self, n: int, mean_s: float, spread: float, fn, seed: int, wall_s: float,
                 epochs: int | None = None) -> None:
        self.n = n
        self.epochs = epochs
        self.on_report = None
        self.trained: dict[int, int] = {}  # trial -> epochs trained (its checkpoint, when paused)
        self.decide_at: dict[int, tuple[int, ...]] = {}
        self.wall_s = wall_s
        self.mean_s, self.spread = mean_s, spread
        self.fn = fn
        self.rng = np.random.default_rng(seed)
        # (due, trial, group, params, sent): the trial's end, or with `epochs` its next epoch's
        self.heap: list[tuple[float, int, int, dict, float]] = []
        self.epoch_s: dict[int, float] = {}  # trial -> the length of each of its epochs
        self.final: dict[int, float] = {}  # trial -> the function's value, its curve's end
        self.taken_at: dict[int, float] = {}  # group -> when its result was taken in
        self.busy: list[tuple[float, float]] = []  # (sent, due) of every trial
        self.dispatch: list[float] = []
        self.values: list[float] = []  # in the order results were taken in (completed trials)
        # with a scheduler: the best completed value once each trial first came back (completed,
        # paused or pruned), so that "best after 1,000 trials" counts those a rung ended too
        self.best_by_trials: list[float] = []
        self.came_back: set[int] = set()
        self.t0 = time.perf_counter()
        self.last_send = self.t0

    @property
    def n_groups(self) -> int:
        return self.n

    def group_ranks(self, group: int) -> int:
        return 1

    def lost_groups(self) -> dict[int, tuple[str, float]]:
        return {}

    def send_task(self, group: int, task) -> None:
        now = time.perf_counter()
        if group in self.taken_at:
            self.dispatch.append(now - self.taken_at.pop(group))
        length = self.mean_s * self.rng.uniform(1.0 - self.spread, 1.0 + self.spread)
        if self.epochs:  # the first epoch's end; the rest follow one by one
            self.decide_at[task.trial] = task.decide_at
            self.epoch_s[task.trial] = length / self.epochs
            heapq.heappush(self.heap, (now + self.epoch_s[task.trial], task.trial, group, task.params, now))
        else:
            heapq.heappush(self.heap, (now + length, task.trial, group, task.params, now))
        self.last_send = now

    def has_result(self) -> bool:
        return bool(self.heap) and self.heap[0][0] <= time.perf_counter()

    def recv_message(self, timeout: float | None = None):
        """The next trial's end (with `epochs`: the next report that ends a trial, the reports
        before it answered on the way), or None once `timeout` passed without one."""
        while True:
            now = time.perf_counter()
            if now - self.t0 > self.wall_s:
                raise WallReached
            wait = self.heap[0][0] - now
            if timeout is not None and wait > timeout:
                time.sleep(max(0.0, timeout))
                return None
            if wait > 0:
                time.sleep(wait)
            due, trial, group, params, sent = heapq.heappop(self.heap)
            if self.epochs:
                status, value = self._epoch(due, trial, group, params, sent)
            else:
                status, value = "completed", self.fn(params)
            if status is not None:
                return self._result(due, trial, group, sent, status, value)
            timeout = 0.0 if timeout is None else max(0.0, timeout - (time.perf_counter() - now))

    def _result(self, due: float, trial: int, group: int, sent: float, status: str, value: float):
        if status == "completed":
            self.values.append(value)
        if self.epochs:
            best = min(self.best_by_trials[-1] if self.best_by_trials else float("inf"),
                       value if status == "completed" else float("inf"))
            if trial in self.came_back:  # a promoted trial: the best so far at the same count
                self.best_by_trials[-1] = best
            else:
                self.came_back.add(trial)
                self.best_by_trials.append(best)
        self.busy.append((sent, due))
        self.taken_at[group] = time.perf_counter()
        end = time.time()
        return group, TrialResult(trial=trial, status=TrialStatus(status),
                                  objective=value if status == "completed" else None,
                                  metrics={"objective": value}, epochs=self.trained.get(trial),
                                  start=end - (due - sent), end=end)

    def _epoch(self, due: float, trial: int, group: int, params: dict, sent: float):
        """The trial's next epoch ends: its report and the scheduler's word. Returns (status,
        value): (None, _) while it trains on."""
        epoch = self.trained.get(trial, 0) + 1
        self.trained[trial] = epoch
        if trial not in self.final:
            self.final[trial] = self.fn(params)
        value = self.final[trial] + 30.0 * (1 / epoch - 1 / self.epochs)  # the function's value at the last epoch
        decision = self.on_report(group, Report(trial, epoch, {"objective": value},
                                                decide=epoch in self.decide_at[trial]))
        if decision in ("pause", "stop"):
            return ("paused" if decision == "pause" else "pruned"), value
        if epoch == self.epochs:
            return "completed", value
        heapq.heappush(self.heap, (due + self.epoch_s[trial], trial, group, params, sent))
        return None, value

    def send_decision(self, group: int, decision: str) -> None:
        raise AssertionError("decisions come back from the report's call in one process")

    def listen(self, on_report) -> None:
        self.on_report = on_report

    def shutdown(self) -> None:
        pass

    def trials(self) -> int:
        """Trials done: completed (with a scheduler, every trial handed out: most end at a rung)."""
        return len(self.trained) if self.epochs else len(self.values)

    def utilization(self) -> float:
        end = self.last_send
        running = [(sent, due) for due, _, _, _, sent in self.heap]  # cut off by the wall budget
        busy = sum(max(0.0, min(due, end) - max(sent, self.t0)) for sent, due in self.busy + running)
        return busy / (self.n * max(end - self.t0, 1e-9))


def space_yaml(function: str, search: str, trials: int, seed: int) -> str:
    _, bounds = SPACES[function]
    params = "\n".join(f"  {k}: {{type: real, low: {lo}, high: {hi}}}" for k, (lo, hi) in bounds.items())
    algorithm = {"default": "", "ET": "  surrogate: ET\n", "random": "  algorithm: random\n"}[search]
    return (f"name: scale\nobjective: {{function: {FUNCTIONS}:{function}}}\nparameters:\n{params}\n"
            f"search:\n{algorithm}  trials: {trials}\n  seed: {seed}\n")


def run(groups: int, trials: int, search: str, function: str, seed: int, spread: float, rate: float,
        wall_s: float, scheduler: str = "none") -> dict:
    from mpiopt.cli import _make_searcher
    from mpiopt.config import load_config
    from mpiopt.coordinator import Coordinator
    from mpiopt.journal import RunDir
    from mpiopt.scheduler import make_scheduler

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "space.yaml").write_text(space_yaml(function, search, trials, seed))
        cfg = load_config(tmp / "space.yaml")
        # set after loading: the YAML would need a function that reports, which the groups simulate here
        cfg = dataclasses.replace(cfg, search=dataclasses.replace(cfg.search, scheduler=scheduler),
                                  training={**cfg.training, "epochs": EPOCHS})
        run_dir = RunDir(tmp / "run")
        run_dir.open(resume=False, config_text=(tmp / "space.yaml").read_text())
        fn, _ = SPACES[function]
        link = SimulatedGroups(groups, groups / rate, spread, fn, seed, wall_s,
                               epochs=EPOCHS if scheduler != "none" else None)
        searcher = _make_searcher(cfg, link)
        # paused at its rungs, as a model objective's trial is (a function's could only be stopped)
        rungs = make_scheduler(scheduler, epochs=EPOCHS, min_epochs=1, reduction_factor=3, pausable=True)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        link.t0 = wall0
        stopped = False
        try:
            Coordinator(cfg, searcher, link, run_dir, scheduler=rungs).run()
        except WallReached:
            stopped = True
        finally:
            searcher.close()
            run_dir.close()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        best = np.array(link.best_by_trials) if link.epochs else np.minimum.accumulate(np.array(link.values))
        d = np.array(link.dispatch) * 1000 if link.dispatch else np.zeros(1)
        out = {
            "groups": groups, "trials": trials, "search": search, "function": function, "seed": seed,
            "utilization": round(link.utilization(), 4),
            "dispatch_p50_ms": round(float(np.percentile(d, 50)), 3),
            "dispatch_p99_ms": round(float(np.percentile(d, 99)), 3),
            "coordinator_cpu_s": round(cpu, 1), "cpu_ms_per_trial": round(1000 * cpu / max(1, link.trials()), 2),
            "wall_s": round(wall, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "best": float(best[-1]), "finished": link.trials(), "stopped_at_wall": stopped, "scheduler": scheduler,
            "best_at": {str(k): float(best[k - 1]) for k in CHECKPOINTS if k <= len(best)},
            "suggestions": searcher.report() or "",
        }
        return out


def print_row(r: dict) -> None:
    at = "  ".join(f"@{int(k) // 1000}k {v:.4g}" for k, v in r["best_at"].items())
    scheduler = f" {r['scheduler']}" if r["scheduler"] != "none" else ""
    print(f"{r['groups']:>5} groups  {r['search']:<7}{scheduler} {r['function']:<9} seed {r['seed']}: utilization "
          f"{r['utilization']:.3f}, dispatch p50 {r['dispatch_p50_ms']:.2f} ms p99 {r['dispatch_p99_ms']:.2f} ms, "
          f"CPU {r['coordinator_cpu_s']:.0f} s ({r['cpu_ms_per_trial']:.1f} ms a trial) in {r['wall_s']:.0f} s, "
          f"peak RSS {r['peak_rss_mb']:.0f} MB, best {r['best']:.5g} ({at})"
          + (f"; stopped at the wall budget after {r['finished']} trials" if r["stopped_at_wall"] else ""), flush=True)
    if r["suggestions"]:
        print(f"      {r['suggestions']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=512)
    ap.add_argument("--trials", type=int, default=20000)
    ap.add_argument("--search", choices=["default", "ET", "random"], default="default")
    ap.add_argument("--function", choices=sorted(SPACES), default="hartmann6")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spread", type=float, default=0.2, help="durations uniform within +-spread of the mean")
    ap.add_argument("--rate", type=float, default=68.0, help="results a second (the mean duration is groups/rate)")
    ap.add_argument("--wall", type=float, help="stop after this many seconds (default: 1.5 x trials / rate)")
    ap.add_argument("--scheduler", choices=["none", "asha", "hyperband"], default="none",
                    help="trials report 9 epochs and are paused at rungs 1, 3 and 9")
    ap.add_argument("--json", action="store_true", help="one JSON object on the last line")
    a = ap.parse_args()
    r = run(a.groups, a.trials, a.search, a.function, a.seed, a.spread, a.rate, a.wall or 1.5 * a.trials / a.rate,
            a.scheduler)
    print_row(r)
    if a.json:
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

"""The dispatch loop's access to the interpreter while a round is prepared beside it.

    python bench/dispatch_gil.py [--results 126] [--running 63] [--rounds 8]

The coordinator waits for results by polling MPI between short sleeps, and every wake-up needs
the interpreter lock, which the background thread holds while it prepares a round (`Prefetching`,
mpiopt/search/_prefetch.py). This prepares rounds the way that thread does (its `_checkpoint`
included) on a Hartmann-6 search with RESULTS results and RUNNING running trials, while the main
thread sleeps 0.2 ms at a time and records how late each wake-up gets the interpreter back: with
the background thread's short sleeps every YIELD_EVERY_S of work, and without them. Then the cost
of taking into a new round the RUNNING trials handed out while it was prepared (done under the
lock before, outside it now but for the last CATCH_UP_IN_LOCK). Runs in one process: no MPI, so
no other rank competes for the cores. Prints tables; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402

from mpiopt.search import Prefetching, _prefetch  # noqa: E402
from mpiopt.search._bayesian import BayesianSearch  # noqa: E402
from sample_efficiency import FUNCTIONS  # noqa: E402


def searcher(results: int, running: int, seed: int = 0) -> Prefetching:
    f, space, _ = FUNCTIONS["hartmann6"]
    names = [p.name for p in space.params]
    rng = np.random.default_rng(seed)
    inner = BayesianSearch(space, seed=seed)
    for i in range(results):
        p = dict(zip(names, map(float, rng.random(len(names)))))
        inner.tell(i, p, f(p))
    for i in range(results, results + running):
        inner.pending[i] = dict(zip(names, map(float, rng.random(len(names)))))
    s = Prefetching(inner, groups=running)
    s.round = object()  # not the first round: the checkpoints behave as for every later one
    return s


def lateness(s: Prefetching, rounds: int) -> tuple[np.ndarray, float]:
    """Wake-up delays (ms) of 0.2 ms sleeps while `rounds` rounds are prepared, and s per round."""
    done = threading.Event()
    took = []

    def work():
        for _ in range(rounds):
            clone = s._snapshot()
            t0 = time.perf_counter()
            clone.polish_deadline = t0 + _prefetch.POLISH_BUDGET_S
            clone.prepare_round(polish=12)
            took.append(time.perf_counter() - t0)
        done.set()

    late = []
    th = threading.Thread(target=work)
    th.start()
    while not done.is_set():
        t0 = time.perf_counter()
        time.sleep(0.0002)
        late.append(time.perf_counter() - t0 - 0.0002)
    th.join()
    return np.array(late) * 1e3, float(np.median(took))


def catch_up_ms(s: Prefetching, running: int) -> float:
    """Time to add `running` trials handed out meanwhile to a freshly prepared round."""
    clone = s._snapshot()
    rnd = clone.prepare_round(polish=0)
    f, space, _ = FUNCTIONS["hartmann6"]
    rng = np.random.default_rng(1)
    extra = [dict(zip([p.name for p in space.params], map(float, rng.random(6)))) for _ in range(running)]
    t0 = time.perf_counter()
    for p in extra:
        rnd.add_pending(p)
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=int, nargs="+", default=[126, 252])
    ap.add_argument("--running", type=int, default=63)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    sys.setswitchinterval(0.0001)  # as the coordinator sets it
    print("| results | running | yields | wake-ups | late p50 / p99 / max ms | round ms (median) |")
    print("| --- | --- | --- | --- | --- | --- |")
    every = _prefetch.YIELD_EVERY_S
    for n in args.results:
        s = searcher(n, args.running)
        for yields in (True, False, True, False):  # interleaved: the machine's state drifts
            _prefetch.YIELD_EVERY_S = every if yields else float("inf")
            late, round_s = lateness(s, args.rounds)
            print(f"| {n} | {args.running} | {'every %g ms' % (every * 1e3) if yields else 'none'} | {len(late)} | "
                  f"{np.median(late):.2f} / {np.percentile(late, 99):.2f} / {late.max():.2f} | {round_s * 1e3:.0f} |",
                  flush=True)
        _prefetch.YIELD_EVERY_S = every
    print()
    print("| results | trials handed out while a round was prepared | taking them in, ms (under the lock before) |")
    print("| --- | --- | --- |")
    for n in args.results:
        print(f"| {n} | {args.running} | {catch_up_ms(searcher(n, args.running), args.running):.1f} |")


if __name__ == "__main__":
    main()

"""The dispatch loop's access to the interpreter while a round is prepared beside it.

    python bench/dispatch_gil.py [--results 126] [--running 63] [--rounds 8]

The coordinator waits for results by polling MPI between short sleeps, and every wake-up needs
the interpreter lock, which the background thread holds while it prepares a round (`Prefetching`,
mpiopt/search/_prefetch.py). This prepares rounds the way that thread does (its `_checkpoint`
included) on a Hartmann-6 search with RESULTS results and RUNNING running trials, while the main
thread sleeps 0.2 ms at a time and records how late each wake-up gets the interpreter back: with
the background thread's short sleeps every `RoundPolicy.yield_every_s` of work, and without them.
Then the cost of taking into a new round the RUNNING trials handed out while it was prepared
(outside the lock but for the last `RoundPolicy.catch_up_in_lock`). Runs in one process: no MPI,
so no other rank competes for the cores. Prints tables; asserts nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
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

from mpiopt.search import BayesianSearch, Prefetching, RoundPolicy  # noqa: E402
from sample_efficiency import FUNCTIONS  # noqa: E402


def searcher(results: int, running: int, policy: RoundPolicy, seed: int = 0) -> Prefetching:
    f, space, _ = FUNCTIONS["hartmann6"]
    names = [p.name for p in space.params]
    rng = np.random.default_rng(seed)
    inner = BayesianSearch(space, seed=seed)
    for i in range(results):
        p = dict(zip(names, map(float, rng.random(len(names))), strict=True))
        inner.tell(i, p, f(p))
    for i in range(results, results + running):
        inner.pending[i] = dict(zip(names, map(float, rng.random(len(names))), strict=True))
    s = Prefetching(inner, groups=running, policy=policy)
    s.round = object()  # not the first round: the checkpoints behave as for every later one
    return s


def lateness(s: Prefetching, rounds: int) -> tuple[np.ndarray, float]:
    """Wake-up delays (ms) of 0.2 ms sleeps while `rounds` rounds are prepared, and s per round."""
    done = threading.Event()
    took = []

    def work():
        for _ in range(rounds):
            clone = s.inner.snapshot(s.rounds)
            t0 = time.perf_counter()
            clone.prepare_round(polish=12, defer_fit=True, deadline=t0 + s.policy.polish_budget_s,
                                checkpoint=s._checkpoint)
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
    rnd = s.inner.snapshot(s.rounds).prepare_round(polish=0, defer_fit=True, checkpoint=s._checkpoint)
    f, space, _ = FUNCTIONS["hartmann6"]
    rng = np.random.default_rng(1)
    names = [p.name for p in space.params]
    extra = [dict(zip(names, map(float, rng.random(6)), strict=True)) for _ in range(running)]
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
    policy = RoundPolicy()
    no_yields = dataclasses.replace(policy, yield_every_s=float("inf"))
    every = policy.yield_every_s
    for n in args.results:
        searchers = {True: searcher(n, args.running, policy), False: searcher(n, args.running, no_yields)}
        for yields in (True, False, True, False):  # interleaved: the machine's state drifts
            late, round_s = lateness(searchers[yields], args.rounds)
            print(f"| {n} | {args.running} | {'every %g ms' % (every * 1e3) if yields else 'none'} | {len(late)} | "
                  f"{np.median(late):.2f} / {np.percentile(late, 99):.2f} / {late.max():.2f} | {round_s * 1e3:.0f} |",
                  flush=True)
    print()
    print("| results | trials handed out while a round was prepared | taking them in, ms |")
    print("| --- | --- | --- |")
    for n in args.results:
        print(f"| {n} | {args.running} | {catch_up_ms(searcher(n, args.running, policy), args.running):.1f} |")


if __name__ == "__main__":
    main()

"""Suggestions computed ahead of time, beside the dispatch loop.

A Bayesian suggestion costs a surrogate fit and an acquisition search: tens of milliseconds at
100 trials, more at 300. Done when a group asks, every group waits for it, and with many groups
the waits add up (MPI Opt's way: 0.2 group utilization with 8 groups of 0.5 s trials).

`Prefetching` keeps a queue of ready suggestions. A background thread runs *rounds*: it takes a
snapshot of the observations and the running trials, fits the surrogate, and picks a batch with
every running trial as a pending point (`BayesianSearch.suggest_batch`). The finished batch
replaces the queue, so a suggestion is at most one round old. `ask()` only pops the queue: no
fitting, no waiting. If the queue is ever empty once the surrogate is in use, the next point of
the Sobol design is handed out instead (counted as a `fallback`).

The batch size follows the load: enough suggestions for the results that arrive during one round
(measured arrival rate x round time, doubled), at least 1 and at most one per group. Suggestions
handed out while a round was computing were not among its pending points: for each of them the
closest point of the new batch is dropped, so two groups are not sent to the same place.
"""
from __future__ import annotations

import copy
import logging
import math
import sys
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from ..space import encode
from ._base import Searcher

log = logging.getLogger(__name__)

POLISH_BUDGET_S = 0.25  # a round polishes its picks with L-BFGS for at most this long


class Prefetching(Searcher):
    """Wraps a `BayesianSearch` so that suggestions are ready before they are asked for."""

    def __init__(self, inner, groups: int) -> None:
        super().__init__(inner.space, seed=inner.seed)
        self.inner = inner
        inner.defer_fit = True
        self.observed = inner.observed  # shared views: the coordinator reads them
        self.pending = inner.pending
        self.capacity = max(1, groups)
        self.ready: deque[dict[str, Any]] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self._thread: threading.Thread | None = None
        self._tells = 0  # results told so far
        self._round_tells = -1  # results the queue's batch knew
        self._since_snapshot: list[dict[str, Any]] = []  # handed out while a round computes
        self._rate = 0.0  # results a second (moving average)
        self._last_tell: float | None = None
        self.round_s = 0.05  # seconds a round takes (moving average)
        self.rounds = 0
        self.fits = 0  # deferred hyperparameter fits
        self.counts = {"model": 0, "design": 0, "fallback": 0}
        self.staleness: list[int] = []  # per model suggestion: results it did not know about
        self._ages: deque[int] = deque()  # the tells count of each queued suggestion's round
        self.error: BaseException | None = None
        self._warned = False
        self._go = threading.Event()  # cleared while the coordinator is busy handing out trials
        self._go.set()
        inner.checkpoint = self._checkpoint
        self._keys = inner.known_points()  # every point asked, re-run or told, kept up to date here

    # -- the interface -------------------------------------------------------------------
    def ask(self, trial: int) -> dict[str, Any]:
        with self._lock:
            params, age = self._pop_valid()
            if params is not None:
                self.counts["model"] += 1
                self.staleness.append(self._tells - age)
            else:
                if self.error is not None and not self._warned:
                    self._warned = True
                    log.warning("the suggestion thread stopped (%s: %s); handing out design points from now on",
                                type(self.error).__name__, self.error)
                source = "fallback" if self.inner.model_ready() else "design"
                self.counts[source] += 1
                params = self.inner.design_point()
            self.inner.pending[trial] = params
            self._keys.add(tuple(encode(self.space, params)))
            if self._thread is not None:
                self._since_snapshot.append(params)
            self._wake.notify()
        self._start()
        return params

    def tell(self, trial: int, params: dict[str, Any], loss: float | None) -> None:
        now = time.perf_counter()
        with self._lock:
            self.inner.tell(trial, params, loss)
            self._keys.add(tuple(encode(self.space, params)))
            self._tells += 1
            if self._last_tell is not None:
                gap = max(now - self._last_tell, 1e-6)
                self._rate = 0.8 * self._rate + 0.2 / gap if self._rate else 1.0 / gap
            self._last_tell = now
            self._wake.notify()
        self._start()

    def add_pending(self, trial: int, params: dict[str, Any]) -> None:
        with self._lock:
            self.inner.add_pending(trial, params)
            self._keys.add(tuple(encode(self.space, params)))

    def _suggest(self) -> dict[str, Any]:  # not used: ask() is overridden
        return self.inner._suggest()

    def pause(self, busy: bool) -> None:
        if busy:
            self._go.clear()
        else:
            self._go.set()

    def _checkpoint(self) -> None:
        """Called by the surrogate between steps of a round: wait while the coordinator is busy.

        The dispatch loop and this thread share one interpreter lock; a result burst (many groups
        finishing together) is handed out fastest with this thread parked. Waits at most 1 s."""
        if not self._go.is_set() and not self._stop:
            self._go.wait(1.0)

    def close(self) -> None:
        self._go.set()
        with self._lock:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def depth(self) -> int:
        """How many suggestions a round prepares: the results expected during two rounds, plus one."""
        return max(1, min(self.capacity, int(math.ceil(2.0 * self._rate * self.round_s)) + 1))

    # -- the background thread -------------------------------------------------------------
    def _pop_valid(self) -> tuple[dict[str, Any] | None, int]:
        while self.ready:
            params, age = self.ready.popleft(), self._ages.popleft()
            if tuple(encode(self.space, params)) not in self._keys:
                return params, age
        return None, 0

    def _start(self) -> None:
        if self._thread is None and self.inner.model_ready():
            # a short switch interval: the dispatch loop gets the interpreter back within 0.1 ms
            # of a message, whatever the background thread is doing
            sys.setswitchinterval(min(sys.getswitchinterval(), 0.0001))
            self._thread = threading.Thread(target=self._run, name="mpiopt-suggestions", daemon=True)
            self._thread.start()

    def _snapshot(self):
        clone = copy.copy(self.inner)
        clone.observed = dict(self.inner.observed)
        clone.pending = dict(self.inner.pending)
        clone.gains = self.inner.gains.copy()
        clone._rng = np.random.RandomState([self.inner.seed, self.rounds])  # the main thread keeps its own
        return clone

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - the dispatch loop falls back to the design
            self.error = exc

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stop and self._tells == self._round_tells and len(self.ready) >= 1:
                    self._wake.wait()
                if self._stop:
                    return
            self._checkpoint()
            with self._lock:
                if self._stop:
                    return
                clone = self._snapshot()
                tells = self._tells
                self._since_snapshot = []
                k = self.depth()
            t0 = time.perf_counter()
            clone.polish_deadline = t0 + POLISH_BUDGET_S
            batch = clone.suggest_batch(k)  # slow: outside the lock
            took = time.perf_counter() - t0
            with self._lock:
                self.rounds += 1
                self.round_s = 0.7 * self.round_s + 0.3 * took
                self.inner.hyper = clone.hyper
                self.inner.fitted_on = clone.fitted_on
                self.inner.gains = clone.gains
                self.inner._proposals = clone._proposals
                batch = self._drop_near(batch, self._since_snapshot)
                self.ready = deque(batch)
                self._ages = deque([tells] * len(batch))
                self._round_tells = tells
                refit = self.inner.refit_due() and not self._stop
                if refit:
                    clone = self._snapshot()
            if refit:  # the queue is full again: now there is time to refit the kernel
                clone.refit()
                with self._lock:
                    self.inner.hyper = clone.hyper
                    self.inner.fitted_on = clone.fitted_on
                    self.fits += 1

    def _drop_near(self, batch: list[dict[str, Any]], handed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """For each suggestion handed out during the round, drop the batch's closest point."""
        if not handed or not batch:
            return batch
        coder = self.inner.coder
        B = np.array([coder.encode(p) for p in batch])
        alive = np.ones(len(batch), dtype=bool)
        for p in handed:
            if not alive.any():
                break
            d = ((B - coder.encode(p)) ** 2).sum(1)
            d[~alive] = np.inf
            alive[int(np.argmin(d))] = False
        return [p for p, a in zip(batch, alive) if a]

    def report(self) -> str:
        """One line about where the suggestions came from."""
        st = sorted(self.staleness)
        stale = f", results not yet in the model at hand-out p50 {st[len(st) // 2]}, max {st[-1]}" if st else ""
        return (f"suggestions: {self.counts['model']} from the surrogate ({self.rounds} rounds, {self.fits} refits, "
                f"{self.round_s * 1000:.0f} ms a round{stale}), {self.counts['design']} from the initial design, "
                f"{self.counts['fallback']} fallback design points (queue empty)")

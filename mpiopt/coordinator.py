"""The coordinator: hands candidates to idle groups, journals every trial, keeps the table.

Pure Python: it talks to groups only through a transport (`send_task`, `recv_result`,
`shutdown`), so its logic runs and is tested in-process without MPI.
"""
from __future__ import annotations

import logging
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .config import Config
from .journal import RunDir
from .search import Searcher
from .trial import TrialRecord, TrialResult, TrialStatus

log = logging.getLogger(__name__)


@dataclass
class Summary:
    """How a search went (also what `mpiopt search` prints at the end)."""

    trials: dict[int, TrialRecord]
    best: TrialRecord | None
    dispatched: int = 0
    dispatch_s: list[float] = field(default_factory=list)  # coordinator time per dispatched trial
    wall_s: float = 0.0
    target_reached: bool = False
    retired: list[int] = field(default_factory=list)  # groups that never came back
    stopped: str | None = None  # why the search stopped before its budget (max_failures, no groups left)
    exit_code: int = 0  # 1 when stopped, 2 when the objective broke its contract

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.trials.values():
            out[t.status.value] = out.get(t.status.value, 0) + 1
        return out


class Coordinator:
    """Event-driven scheduling: wait for any result, tell it, give that group its next trial."""

    def __init__(self, cfg: Config, searcher: Searcher, transport, run_dir: RunDir | None = None,
                 trials: dict[int, TrialRecord] | None = None) -> None:
        self.cfg = cfg
        self.searcher = searcher
        self.transport = transport
        self.run_dir = run_dir
        self.trials: dict[int, TrialRecord] = dict(trials or {})
        self.sign = 1.0 if cfg.objective.direction == "minimize" else -1.0
        self._table_dirty = False
        self._table_at = -1e9
        self._best: TrialRecord | None = None
        self._best_known = False
        self._failed = sum(1 for t in self.trials.values() if t.status == TrialStatus.FAILED)
        self._finished = sum(1 for t in self.trials.values() if t.status.is_finished())

    # -- helpers -----------------------------------------------------------------------------
    def loss(self, rec: TrialRecord) -> float | None:
        if rec.status != TrialStatus.COMPLETED or rec.objective is None or not math.isfinite(rec.objective):
            return None
        return self.sign * rec.objective

    def best(self) -> TrialRecord | None:
        if not self._best_known:  # computed once, then kept up to date by _record (O(1) a result)
            done = [t for t in self.trials.values() if self.loss(t) is not None]
            self._best = min(done, key=lambda t: (self.loss(t), t.trial)) if done else None
            self._best_known = True
        return self._best

    def reached_target(self) -> bool:
        target = self.cfg.search.target
        best = self.best()
        return target is not None and best is not None and self.sign * best.objective <= self.sign * target

    def _journal(self, event: dict[str, Any]) -> None:
        # written and flushed at once (safe from a kill); fsynced by a helper thread whenever the
        # loop has nothing waiting (group commit), and before the search ends
        if self.run_dir is not None:
            self.run_dir.append(event, sync=False)

    TABLE_EVERY_S = 0.5  # results.csv is rewritten at most this often while trials pour in

    def _table(self, force: bool = False) -> None:
        """Rewrite results.csv if it is behind, not more often than TABLE_EVERY_S (the journal is
        written at once; the table is a view of it and is complete when the search ends)."""
        if self.run_dir is None or not self._table_dirty:
            return
        now = time.monotonic()
        if not force and now - self._table_at < self.TABLE_EVERY_S:
            return
        self.run_dir.write_results(self.trials.values(), self.cfg.space.names, live=True)
        self._table_dirty = False
        self._table_at = now

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> Summary:
        t0 = time.monotonic()
        budget = self.cfg.search.trials
        finished = {n for n, t in self.trials.items() if t.status.is_finished()}
        rerun = deque(sorted(n for n in self.trials if n not in finished))
        for n in sorted(finished):
            t = self.trials[n]
            self.searcher.tell(n, t.params, self.loss(t))
        if rerun:
            log.info("resuming: %d finished trials kept, %d interrupted trials to run again (%s)",
                     len(finished), len(rerun), ", ".join(map(str, rerun)))
        elif finished:
            log.info("resuming: %d finished trials kept", len(finished))
        next_trial = max(self.trials) + 1 if self.trials else 0
        idle = deque(range(self.transport.n_groups))
        running: dict[int, int] = {}  # group -> trial
        deadlines: dict[int, float] = {}  # group -> when it is declared lost
        retired: set[int] = set()
        limit = self.cfg.training.get("time_limit")
        grace = self.cfg.search.grace_period
        summary = Summary(self.trials, None)
        stopping = self.reached_target()
        if stopping:
            log.info("the target %s was already reached", self.cfg.search.target)

        idle_since = {g: time.perf_counter() for g in idle}  # when each group became free
        while True:
            while idle and not stopping and len(finished) + len(running) < budget:
                t_ready = time.perf_counter()
                group = idle.popleft()
                if rerun:
                    n = rerun.popleft()
                    params = self.trials[n].params
                    self.searcher.add_pending(n, params)
                else:
                    n = next_trial
                    next_trial += 1
                    params = self.searcher.ask(n)
                ranks = self.transport.group_ranks(group)
                now = time.time()
                self.trials[n] = TrialRecord(trial=n, params=params, start=now, group=group, ranks=ranks)
                # written before the task goes out (a crash after the send must not lose the trial);
                # the dispatch time is measured at the send and kept in memory and in the table
                self._journal({"event": "start", "trial": n, "params": params, "group": group, "ranks": ranks,
                               "time": now})
                task = {"trial": n, "params": params,
                        "trial_dir": str(self.run_dir.trial_dir(n)) if self.run_dir is not None else None}
                self.transport.send_task(group, task)
                # how long this group waited for the coordinator, from its result's arrival to the send
                dispatch = time.perf_counter() - idle_since.pop(group, t_ready)
                self.trials[n].dispatch_s = dispatch
                running[group] = n
                if limit:
                    trial_limit = self.cfg.trial_training(params).get("time_limit") or limit
                    deadlines[group] = time.monotonic() + float(trial_limit) + grace
                summary.dispatch_s.append(dispatch)
                summary.dispatched += 1
                log.debug("trial %d -> group %d: %s", n, group, params)
            has_result = getattr(self.transport, "has_result", None)
            if has_result is None or not has_result():
                # nothing waiting: the journal goes to disk (in a helper thread), the table is
                # brought up to date, and the searcher's background work resumes
                if self.run_dir is not None:
                    self.run_dir.sync_soon()
                self._table()
                self.searcher.pause(False)
            if not running:
                if retired and not idle and len(finished) < budget and not stopping:
                    summary.stopped = "every group was retired (none came back from a trial past its time limit)"
                    summary.exit_code = 1
                break
            waits = [deadlines[g] for g in running if g in deadlines]
            timeout = max(0.0, min(waits) - time.monotonic()) if waits else None
            got = self.transport.recv_result(timeout=timeout)
            t_recv = time.perf_counter()
            self.searcher.pause(True)  # results are coming in: the background thread steps aside
            if got is None:  # a group is past its trial's time limit and grace period
                now = time.monotonic()
                for group in [g for g in running if deadlines.get(g, now + 1) <= now]:
                    n = running.pop(group)
                    retired.add(group)
                    summary.retired.append(group)
                    self._record(n, TrialResult(
                        trial=n, status=TrialStatus.TIMEOUT.value, start=self.trials[n].start or 0.0, end=time.time(),
                        error=f"group {group} did not report back within training.time_limit + search.grace_period "
                              f"({float(limit):g} + {grace:g} s); the group is retired"))
                    finished.add(n)
                    log.warning("group %d did not come back from trial %d: retired; %d group(s) left", group, n,
                                self.transport.n_groups - len(retired))
                continue
            group, payload = got
            if group in retired:  # it came back after all: the trial stays a timeout, the group works again
                retired.discard(group)
                summary.retired.remove(group)
                idle.append(group)
                idle_since[group] = time.perf_counter()
                log.warning("group %d came back after it was retired (its late result for trial %s is ignored)",
                            group, payload.get("trial"))
                continue
            n = running.pop(group)
            deadlines.pop(group, None)
            idle.append(group)
            idle_since[group] = t_recv
            self._record(n, TrialResult.from_dict(payload))
            finished.add(n)
            if payload.get("misuse") and not summary.stopped:
                where = self.cfg.objective.function or self.cfg.objective.model
                summary.stopped = f"{self.cfg.source or self.cfg.path}: objective: {where}: " + \
                    (payload.get("error") or "").splitlines()[0]
                summary.exit_code = 2
                stopping = True
                continue
            failures = self._failure_limit()
            if failures and not stopping:
                stopping = True
                summary.stopped = failures
                summary.exit_code = 1
                log.error("%s; waiting for %d running trials", failures, len(running))
            if not stopping and self.reached_target():
                stopping = True
                log.info("target %s reached by trial %d; waiting for %d running trials", self.cfg.search.target, n,
                         len(running))
                summary.target_reached = True
        self.transport.shutdown()
        self.searcher.pause(False)
        if self.run_dir is not None:
            self.run_dir.sync()
        self._table(force=True)
        summary.best = self.best()
        summary.target_reached = summary.target_reached or self.reached_target()
        summary.wall_s = time.monotonic() - t0
        return summary

    def _failure_limit(self) -> str | None:
        """The reason to stop once `search.max_failures` trials failed, naming the commonest error."""
        limit = self.cfg.search.max_failures
        if limit is None or self._failed < limit:
            return None
        failed = [t for t in self.trials.values() if t.status == TrialStatus.FAILED]
        errors: dict[str, int] = {}
        for t in failed:
            head = (t.error or "unknown error").splitlines()[0][:200]
            errors[head] = errors.get(head, 0) + 1
        common, count = max(errors.items(), key=lambda kv: kv[1])
        return (f"search stopped: {len(failed)} trials failed (search.max_failures: {limit}); the most common error "
                f"({count} of {len(failed)}): {common}")

    def _record(self, n: int, result: TrialResult) -> None:
        rec = self.trials[n]
        was_finished = rec.status.is_finished()
        try:
            rec.status = TrialStatus(result.status)
        except ValueError:
            rec.status = TrialStatus.FAILED
        rec.objective = result.objective if rec.status == TrialStatus.COMPLETED else None
        rec.metrics = dict(result.metrics or {})
        rec.epochs = result.epochs
        rec.error = result.error
        rec.start = result.start or rec.start
        rec.end = result.end or time.time()
        rec.wait_s = result.wait_s
        self._journal({"event": "finish", "trial": n, "status": rec.status.value, "objective": rec.objective,
                       "metrics": rec.metrics, "epochs": rec.epochs, "error": rec.error, "start": rec.start,
                       "end": rec.end, "wait_s": rec.wait_s, "dispatch_s": rec.dispatch_s})
        self.searcher.tell(n, rec.params, self.loss(rec))
        self._table_dirty = True
        if not was_finished:
            self._finished += 1
            self._failed += rec.status == TrialStatus.FAILED
        best = self.best()
        if self.loss(rec) is not None and (best is None or (self.loss(rec), n) < (self.loss(best), best.trial)):
            self._best = best = rec
        n_done = self._finished
        what = f"objective={rec.objective:.6g}" if rec.objective is not None else (rec.error or "").splitlines()[0][:120]
        best_txt = f"best {best.objective:.6g} (trial {best.trial})" if best else "no completed trial yet"
        log.info("trial %d %s %s [group %s, %.2f s] %d/%d, %s", n, rec.status.value, what, rec.group,
                 (rec.end or 0) - (rec.start or 0), n_done, self.cfg.search.trials, best_txt)


def dispatch_stats(seconds: list[float]) -> str:
    if not seconds:
        return "no trial dispatched"
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))]
    return f"{len(ms)} trials dispatched, {statistics.mean(ms):.2f} ms mean, {statistics.median(ms):.2f} ms p50, " \
           f"{p99:.2f} ms p99 coordinator time per dispatch"

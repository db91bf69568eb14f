"""The coordinator: hands candidates to idle groups, journals every trial, keeps the table.

Pure Python: it reaches the groups only through a `Transport` (MPI's, or one in this process),
so its logic runs and is tested in-process without MPI.
"""
from __future__ import annotations

import heapq
import logging
import math
import re
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from . import pareto
from ._log import TRIALS
from ._results_view import counted, first_few, format_hours, format_rate
from ._send_ahead import SendAhead
from .config import Config
from .journal import HEARTBEAT_EVERY_S, RunDir
from .scheduler import Decision, Scheduler
from .search import Searcher
from .trial import (NO_GROUP_LEFT, Report, Task, TrialRecord, TrialResult, TrialStatus, apply_event, finish_event,
                    reached_by_state, report_event, start_event)

log = logging.getLogger(__name__)
trial_log = logging.getLogger(TRIALS)  # one line a trial: the console shows a few a second (_log._Console)


class Transport(Protocol):
    """How the coordinator reaches its groups."""

    queues_tasks: bool  # a task sent to a busy group waits in its mailbox (what sending ahead needs)
    watch_s: float | None  # how often to look for lost groups (`lost_groups`); None: never

    @property
    def n_groups(self) -> int: ...

    def group_ranks(self, group: int) -> int:
        """The number of ranks of `group`."""

    def send_task(self, group: int, task: Task) -> None: ...

    def recv_message(self, timeout: float | None = None) -> tuple[int, TrialResult | Report] | None:
        """The next result or epoch report of any group, or None once `timeout` seconds passed without one."""

    def send_decision(self, group: int, decision: str) -> None:
        """The scheduler's word on a report that asked for one."""

    def listen(self, on_report: Callable[[int, Report], str | None]) -> None:
        """Where reports go that do not come through `recv_message` (groups in this process)."""

    def has_result(self) -> bool:
        """Whether a result is already waiting."""

    def shutdown(self) -> None:
        """Tell every group to stop once it finished what it holds."""

    def lost_groups(self) -> dict[int, tuple[str, float]]:
        """The groups whose ranks went silent (a node died), each with a line saying which and the
        seconds it has been silent; {} where groups cannot be lost (in this process)."""


@dataclass
class GroupState:
    """What the coordinator knows of one group."""

    running: int | None = None  # the trial it runs now
    began: float = 0.0  # when that trial began, as far as the coordinator knows
    deadline: float | None = None  # when it is declared lost (with a training.time_limit)
    ahead: tuple[int, float] | None = None  # its next trial and when it was sent, before it finished this one
    ghost: int | None = None  # a trial it runs whose result is ignored (another group ran it again)
    retired: bool = False  # past its deadline; it works again if it ever comes back
    idle_since: float | None = None  # when it became free; None while it runs a trial
    # while free: since when and until when (the latest look) the searcher held its trial back
    # for the model, and the seconds of such holds that ended; `ask_wait_s` and these are the
    # searcher's choice, not the coordinator's time
    held_since: float | None = None
    held_last: float = 0.0
    held_s: float = 0.0
    served: bool = False  # it got a trial from this coordinator (its first followed no result)


# while the searcher holds hand-outs, the coordinator looks again this often: a round is ready
# when it is, and the groups it holds wait for the coordinator's next look
HOLD_POLL_S = 0.002
# a hold keeps at most this many free groups waiting; further groups get a trial from the model
# as it is. Held groups are served one after another once the round is ready, while the round
# after it is computed on the same core: each one held more adds a hand-out to the last one's wait
HOLD_MAX_GROUPS = 1


@dataclass
class Summary:
    """How a search went (also what `mpiopt search` prints at the end)."""

    trials: dict[int, TrialRecord]
    best: TrialRecord | None
    dispatch_s: list[float] = field(default_factory=list)  # coordinator time per dispatched trial (<0: sent ahead)
    first_wave_s: list[float] = field(default_factory=list)  # each group's first trial: the start-up's time to it
    target_reached: bool = False
    retired: list[int] = field(default_factory=list)  # groups that never came back
    lost: list[int] = field(default_factory=list)  # those of them whose ranks went silent (a node died)
    stopped: str | None = None  # why the search stopped before its budget (max_failures, no groups left)
    exit_code: int = 0  # 1 when stopped, 2 when the objective broke its contract
    sent_ahead: int = 0  # trials sent to a group before it finished the one it was running
    # a new search that stopped on its objective's misuse with no trial completed (or paused with
    # its checkpoint): its run directory holds nothing worth keeping, and would refuse the fixed
    # objective's search whatever else ended (failed, pruned) before the misuse came to light
    discard: bool = False

    def statuses(self) -> list[str]:
        """Each trial's status once the search is over: one still running there (a retired
        group's) is interrupted, as `load_results` and `--resume` have it."""
        return [t.shown_status(live=False).value for t in self.trials.values()]


class Progress:
    """When to print the search's summary line, and what it says: at a tenth of the budget passed
    (but not within QUIET_S of the last line: a short search stays quiet), and at least every
    EVERY_S while results come in. The rate counts this run's results only.

    Under asha or hyperband (`per_trial`: the epochs a new trial trains on average, `Scheduler.
    epochs_to_go`) the budget is counted in epochs reported, and the time left from the epochs
    still to go: there most trials wait paused until promoted or the search ends, so finished
    trials lag the work done.
    """

    EVERY_S = 600.0
    QUIET_S = 60.0

    def __init__(self, budget: int, finished: int, clock: Callable[[], float] = time.monotonic,
                 per_trial: float | None = None, epochs: int = 0) -> None:
        self.budget = budget
        self.clock = clock
        self.per_trial = per_trial
        self.total = budget * per_trial if per_trial is not None else budget  # the budget's work
        self.t0 = self.last_at = clock()
        self.work0 = self._work(finished, epochs)
        self.last_mark = self._mark(self.work0)

    def _work(self, finished: int, epochs: int) -> float:
        return epochs if self.per_trial is not None else finished

    def _mark(self, work: float) -> int:
        return int(work * 10 // self.total) if self.total > 0 else 0

    def due(self, finished: int, epochs: int = 0) -> bool:
        now = self.clock()
        mark = self._mark(self._work(finished, epochs))
        since = now - self.last_at
        if (mark > self.last_mark and since >= self.QUIET_S) or since >= self.EVERY_S:
            self.last_mark, self.last_at = mark, now
            return True
        return False

    def line(self, finished: int, epochs: int = 0, epochs_left: float = 0.0) -> str:
        hours = (self.clock() - self.t0) / 3600.0
        work = self._work(finished, epochs)
        rate = (work - self.work0) / hours if hours > 0 else 0.0
        left = max(0.0, self.budget - finished if self.per_trial is None else epochs_left)
        eta = f"about {format_hours(left / rate)} left" if rate > 0 and left else "the budget is spent" if not left \
            else "time left unknown"
        trials = f"{finished}/{self.budget} trials ({finished / self.budget:.0%})"
        if self.per_trial is None:
            return f"{trials}, {format_rate(rate, 'trials')}, {eta}"
        return f"{trials}, {epochs} epochs trained, about {left:.0f} to go, {format_rate(rate, 'epochs')}, {eta}"


class Coordinator:
    """Event-driven scheduling: wait for any result, take it in, give that group its next trial."""

    TABLE_EVERY_S = 0.5  # results.csv is rewritten at most this often while trials pour in
    TABLE_SHARE = 0.05  # and at most this share of the time: a rewrite grows with the table

    def __init__(self, cfg: Config, searcher: Searcher, transport: Transport, run_dir: RunDir | None = None,
                 trials: dict[int, TrialRecord] | None = None, clock=time.perf_counter,
                 send_ahead: SendAhead | None = None, scheduler: Scheduler | None = None,
                 history: Iterable[dict[str, Any]] = ()) -> None:
        self.cfg = cfg
        self._clock = clock  # every interval of the loop (a simulated one in tests)
        self.searcher = searcher
        self.transport = transport
        self.run_dir = run_dir
        self.send_ahead = send_ahead if send_ahead is not None else SendAhead.from_env()
        self.trials: dict[int, TrialRecord] = dict(trials or {})
        self.sign = 1.0 if cfg.objective.direction == "minimize" else -1.0
        self.groups = [GroupState() for _ in range(transport.n_groups)]
        self.summary = Summary(self.trials, None)
        self._limit = cfg.training.get("time_limit")
        self._grace = cfg.search.grace_period
        self._table_dirty = False
        self._table_at = -1e9
        self._table_s = 0.0  # how long the last rewrite took
        self._best: TrialRecord | None = None
        self._best_known = False
        # search.max_failures counts this run's failures: a --resume follows a fix of their cause
        self._failed_before = {n for n, t in self.trials.items() if t.status == TrialStatus.FAILED}
        self._failed = 0
        self._finished = sum(1 for t in self.trials.values() if t.status.is_finished())
        self._finished_trials: set[int] = set()
        self._rerun: deque[int] = deque()  # interrupted trials, run again before new ones
        self._orphans: set[int] = set()  # re-run trials the searcher still counts as pending
        self._idle: deque[int] = deque()
        self._starts: list[tuple[float, int, int]] = []  # heap of (began, group, trial): who is due to be sent ahead
        self._n_running = 0
        self._n_ahead = 0
        self._next_trial = 0
        self._stopping = False
        self._failures_stopped = False  # the search stopped on search.max_failures
        self._new_search = not self.trials  # no journal to resume from
        self._misused: set[int] = set()  # trials whose objective broke its contract
        self._can_send_ahead = False
        self._last_ask_wait = 0.0  # the last hand-out's `ask_wait_s`: not the coordinator's time
        self._holding = False  # the searcher held a free group's trial back at the last look
        self._last_recv = self._clock()  # when the latest message came in
        self._session_marked = False  # whether this run has written its `session` record
        self.scheduler = scheduler if scheduler is not None else Scheduler(epochs=int(cfg.training["epochs"]))
        self._rungs = frozenset(self.scheduler.rung_epochs())
        self._best_so_far: dict[int, float | None] = {}  # per trial: its best reported loss
        self._warned_unjudged = False
        self._warned_steps: set[str] = set()  # the kinds of steps not judged, warned of once a search
        self._beat_at = -math.inf  # time.monotonic() of the last heartbeat
        self._watch_at = -math.inf  # time.monotonic() of the next look for lost groups
        self._epochs = 0  # (trial, epoch) pairs reported, the journal's included
        self._reached: dict[int, int] = {}  # per trial: the highest epoch it reported
        # per trial the scheduler stopped, until its result: the report's (epoch, metrics, time);
        # likewise the latest report it paused (a group cut off there leaves the trial paused there)
        self._stop_reports: dict[int, tuple[int, dict[str, float], float]] = {}
        self._pause_reports: dict[int, tuple[int, dict[str, float], float]] = {}
        self._paused = {n for n, t in self.trials.items() if t.status == TrialStatus.PAUSED}
        self._replay_scheduler(history)
        self._progress = Progress(cfg.search.trials, self._finished, per_trial=self.scheduler.epochs_to_go(),
                                  epochs=self._epochs)
        transport.listen(self.on_report)

    # -- helpers -----------------------------------------------------------------------------
    def loss(self, rec: TrialRecord) -> float | None:
        if rec.status != TrialStatus.COMPLETED or rec.objective is None or not math.isfinite(rec.objective):
            return None
        return self.sign * rec.objective

    def search_loss(self, rec: TrialRecord) -> float | tuple[float, ...] | None:
        """What the searcher is told of a trial: its loss, or in a Pareto search one loss a goal."""
        if not self.cfg.objective.pareto:
            return self.loss(rec)
        if rec.status != TrialStatus.COMPLETED:
            return None
        return pareto.losses(self.cfg.objective.pareto, rec.metrics, rec.duration_s)

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
        if self.run_dir is None:
            return
        if not self._session_marked:
            # where this run's stretch of the search begins (its first record): the timeline
            # counts the groups' time from here to the run's last record, not the gap before
            # a --resume; not at the start, where a search stopped before its first trial must
            # leave an empty journal (to start again without --resume)
            self._session_marked = True
            self.run_dir.append({"event": "session", "time": time.time(), "groups": len(self.groups)}, sync=False)
        self.run_dir.append(event, sync=False)

    def _table(self, force: bool = False) -> None:
        """Rewrite results.csv if it is behind, not more often than TABLE_EVERY_S (the journal is
        written at once; the table is a view of it and is complete when the search ends)."""
        if self.run_dir is None or not self._table_dirty:
            return
        now = time.monotonic()
        if not force and now - self._table_at < max(self.TABLE_EVERY_S, self._table_s / self.TABLE_SHARE):
            return
        self.run_dir.write_results(self.trials.values(), self.cfg.space.names, live=True,
                                   goals=self.cfg.objective.pareto)
        self._table_dirty = False
        self._table_at = time.monotonic()
        self._table_s = self._table_at - now

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> Summary:
        """Run the search to its budget, its target or a stop; every result is journaled first."""
        try:
            return self._run()
        except KeyboardInterrupt:  # Ctrl-C, or a batch system's SIGTERM: `mpiopt status` tells it from a kill
            if self.run_dir is not None:
                self.run_dir.heartbeat("interrupted")
            raise

    def _run(self) -> Summary:
        self._begin_search()
        while True:
            self._beat()
            self._hand_out_to_idle()
            due_at = self._send_ahead()
            if not self.transport.has_result():
                self._catch_up()
            if self._n_running == 0:
                self._note_if_no_group_is_left()
                if not (self.summary.retired or self.summary.stopped):  # a stopped search is resumed once fixed
                    self._prune_paused()
                break
            got = self.transport.recv_message(timeout=self._wait_s(due_at))
            t_recv = self._last_recv = self._clock()
            self._retire_lost()
            if got is None:  # a group is past its trial's time limit and grace period, or one is due
                self._retire_silent()
            elif isinstance(got[1], Report):
                self._answer(*got)  # quick: the background thread, if any, goes on
            else:
                self.searcher.pause(True)  # results are coming in, trials go out: the thread steps aside
                self._take_in(*got, t_recv)
        return self._end_search()

    def _begin_search(self) -> None:
        """Tell the searcher what a resumed search finished, queue what it left unfinished."""
        self._finished_trials = {n for n, t in self.trials.items() if t.status.is_finished()}
        self._pause_the_paused()
        stopped = {n for n, t in self.trials.items()
                   if t.status == TrialStatus.RUNNING and self._stopped_at_a_report(n)}
        self._rerun = deque(sorted(n for n in self.trials if n not in self._finished_trials and n not in self._paused
                                   and n not in stopped))
        for n in sorted(self._finished_trials):
            t = self.trials[n]
            self.searcher.tell(n, t.params, self.search_loss(t))
            self._drop_checkpoint(n)  # one a kill left between the result's record and its deletion
        for n in sorted(self._paused):  # their points are known, and proposed again only by a promotion
            self.searcher.set_aside(n, self.trials[n].params)
        kept = f"{counted(len(self._finished_trials), 'finished trial')} kept"
        if self._failed_before and self.cfg.search.max_failures is not None:
            kept += (f" ({len(self._failed_before)} of them failed; search.max_failures counts the failures "
                     "from now on)")
        if self._paused:
            kept += f", {counted(len(self._paused), 'paused trial')} waiting for a promotion"
        if self._rerun:
            log.info("resuming: %s, %s to run again (%s)",
                     kept, counted(len(self._rerun), "interrupted trial"), ", ".join(map(str, self._rerun)))
        elif self._finished_trials or self._paused:
            log.info("resuming: %s", kept)
        for n in sorted(stopped):
            self._prune_cut_off(n)
        self._note_paused_sizes_missing()
        self._next_trial = max(self.trials) + 1 if self.trials else 0
        self._idle = deque(range(self.transport.n_groups))  # free groups, in the order they became free
        self._stopping = self.reached_target()
        if self._stopping:
            log.info("the target %s was already reached", self.cfg.search.target)
        self._can_send_ahead = self.transport.queues_tasks and self.send_ahead.enabled
        for g in self._idle:
            self.groups[g].idle_since = self._clock()
        # a burst (more results already waiting): the searcher hands out without polishing
        self.searcher.watch_backlog(self.transport.has_result)

    def _pause_the_paused(self) -> None:
        """A trial the scheduler paused whose group was cut off before it reported back: its
        checkpoint at the rung was written before the report, so it waits for a promotion."""
        for n in self.scheduler.paused():
            rec = self.trials.get(n)
            if rec is not None and rec.status == TrialStatus.RUNNING:
                self._pause_cut_off(n)

    def _pause_cut_off(self, n: int) -> None:
        """Paused where its report was, with that epoch's metrics, its stretch ending there."""
        rec = self.trials[n]
        epoch, metrics, at = self._pause_reports.get(n, (self.scheduler.rung(n), rec.metrics, time.time()))
        self._pause(n, TrialResult(status=TrialStatus.PAUSED, metrics=metrics, epochs=epoch, start=rec.start, end=at))

    def _paused_at_its_rung(self, n: int) -> bool:
        """Whether the scheduler paused this running trial at a rung (its checkpoint there is
        written before the report): a group cut off after that leaves it paused, not to run again."""
        return n in self.scheduler.paused()

    def _settle_cut_off(self, n: int) -> str | None:
        """A running trial whose group was cut off: paused, or pruned, where the scheduler's last
        decision left it (what is said of it), or None: it runs again."""
        if self._paused_at_its_rung(n):
            self._pause_cut_off(n)
            return f"trial {n} stays paused at its rung"
        if self._stopped_at_a_report(n):
            self._prune_cut_off(n)
            return f"trial {n} is pruned where the scheduler stopped it"
        return None

    def _stopped_at_a_report(self, n: int) -> bool:
        """Whether the scheduler stopped this running trial: a group cut off before its result
        came in leaves it pruned where it was stopped, not to run again."""
        return n in self._stop_reports

    def _prune_cut_off(self, n: int) -> None:
        epoch, metrics, at = self._stop_reports[n]
        self._prune(n, TrialResult(status=TrialStatus.PRUNED, metrics=metrics, epochs=epoch,
                                   start=self.trials[n].start, end=at))

    def _prune(self, n: int, result: TrialResult) -> None:
        """A trial pruned for good, and its checkpoint gone (recorded first: a crash in between
        leaves a pruned trial, not a lost one)."""
        self._record(n, result)
        self._finished_trials.add(n)
        self._drop_checkpoint(n)

    def _drop_checkpoint(self, n: int) -> None:
        """A finished trial's checkpoint goes once the journal holds its result (the group leaves
        it: a kill before the record continues the trial from it); a failed or diverged trial
        keeps it, to look into. Only a model's trials have one: a function's thousands of results
        make no file-system calls here (slow on a parallel one)."""
        kept = self.trials[n].status in (TrialStatus.FAILED, TrialStatus.DIVERGED)
        if self.run_dir is not None and self.cfg.objective.kind == "model" and not kept:
            self.run_dir.drop_checkpoint(n)

    def _room(self) -> bool:
        """Whether the budget allows another trial beside the finished, running and sent-ahead ones."""
        return len(self._finished_trials) + self._n_running + self._n_ahead + len(self._paused) < self.cfg.search.trials

    def _hand_out_to_idle(self) -> None:
        """Give every free group its next trial (a promotion, or a new one while the budget lasts
        and the searcher does not hold new trials back for its model)."""
        left: deque[int] = deque()  # free groups with nothing to run now
        held = 0
        while self._idle and not self._stopping:
            # a searcher that waits for a model with the latest results (long trials) serves a
            # burst best once all of it is in: one model for every group of the burst. The probe
            # comes first on purpose: it also drives MPI's progress, so a result in flight is
            # matched while this hand-out works and is found waiting after it.
            if self.transport.has_result() and self.searcher.prefers_fresh():
                break
            t_ready = self._clock()
            group = self._idle.popleft()
            why_not = self._nothing_for(group, held)
            self._note_hold(self.groups[group], why_not == "model")
            if why_not == "budget":  # it waits for work, not for the coordinator: its wait starts with the next message
                self.groups[group].idle_since, self.groups[group].held_s = None, 0.0
            if why_not is not None:
                held += why_not == "model"
                left.append(group)
                continue
            n = self._hand_out(group)
            self._note_dispatch(group, n, t_ready)
        self._idle.extendleft(reversed(left))
        self._holding = held > 0

    def _note_hold(self, state: GroupState, held: bool) -> None:
        """Whether the searcher holds this free group's trial back now: a hold lasts from the
        first look that held it to the last (what follows the last is the coordinator's time)."""
        now = self._clock()
        if held:
            state.held_since = now if state.held_since is None else state.held_since
            state.held_last = now
        elif state.held_since is not None:
            state.held_s += state.held_last - state.held_since
            state.held_since = None

    def _extend_holds(self, waited: float) -> None:
        """`ask` just waited `waited` s for the model (no group was running to answer meanwhile):
        the other free groups, held already or not yet looked at, waited for the same model, not
        for the coordinator."""
        now = self._clock()
        for g in self._idle:
            state = self.groups[g]
            if state.held_since is None:
                state.held_since = now - waited
        for state in self.groups:
            if state.held_since is not None:
                state.held_last = now

    def _nothing_for(self, group: int, held: int) -> str | None:
        """Why a free group gets no trial now, with `held` others held back already: "budget"
        (none left, no promotion fits it), "model" (the searcher holds new trials back); None:
        it gets one."""
        if self._promotion_for(group) is not None or self._rerun:
            return None
        if not self._room():
            return "budget"
        return "model" if self._model_holds(held) else None

    def _note_dispatch(self, group: int, n: int, t_ready: float) -> None:
        """The group runs trial `n` from now; the coordinator's part of its wait is recorded:
        from its result (or from `t_ready`) to the send, less the searcher's holds and waits."""
        sent = self._clock()
        state = self.groups[group]
        if state.idle_since is None:  # it had nothing to do until the latest message brought work
            state.idle_since = self._last_recv
        dispatch = sent - state.idle_since - state.held_s - self._last_ask_wait
        state.idle_since, state.held_s = None, 0.0
        self.trials[n].dispatch_s = dispatch
        self._start_running(group, n, sent)
        (self.summary.dispatch_s if state.served else self.summary.first_wave_s).append(dispatch)
        state.served = True

    def _send_ahead(self) -> float | None:
        """Send the next trial to every group whose running trial is about to end (a burst of
        results then finds each group with its next trial in hand); when the next one is due."""
        lead = None
        if self._can_send_ahead and not self._stopping:
            lead = self.send_ahead.lead(self._n_running, self.searcher.prefers_fresh())
        if lead is None:
            return None
        typical = self.send_ahead.typical()
        while self._starts and self._room():
            at, group, n = self._starts[0]
            state = self.groups[group]
            if state.running != n or state.ahead is not None or state.ghost is not None:
                heapq.heappop(self._starts)  # stale: that trial is over, or the group has its next one
                continue
            if at + typical - lead > self._clock():
                return at + typical - lead
            if self._model_holds(0):
                return None
            if self._holding:
                return self._clock()  # free groups held for the model until now go first
            heapq.heappop(self._starts)
            self._send_next(group)
        return None

    def _send_next(self, group: int) -> None:
        """Send a running group its next trial, which it starts when it ends the one it runs."""
        m = self._hand_out(group)
        self.groups[group].ahead = (m, self._clock())
        self._n_ahead += 1
        self.summary.sent_ahead += 1

    def _send_ahead_on_decision(self, group: int, n: int) -> None:
        """Trial `n` was told to stop or pause at a rung, so it ends now: its group gets its next
        trial right behind the decision, wherever sending ahead is worth it."""
        state = self.groups[group]
        if (not self._can_send_ahead or self._stopping or state.running != n or state.ahead is not None
                or state.ghost is not None
                or self.send_ahead.lead(self._n_running, self.searcher.prefers_fresh()) is None
                or self._nothing_for(group, 0) is not None):
            return
        self._send_next(group)

    def _model_holds(self, held: int) -> bool:
        """Whether the searcher holds another new trial back for its model now, with `held`
        free groups held back already. Only while a group runs (its messages are answered
        meanwhile; with none running, `ask` waits), and at most `HOLD_MAX_GROUPS` groups."""
        return self._n_running > 0 and self.searcher.holds_hand_outs(held < HOLD_MAX_GROUPS)

    def _catch_up(self) -> None:
        """Nothing is waiting: the journal goes to disk (in a helper thread), the table is brought
        up to date, and the searcher's background work resumes."""
        if self.run_dir is not None:
            self.run_dir.sync_soon()
        self._table()
        self.searcher.pause(False)

    def _note_if_no_group_is_left(self) -> None:
        retired = any(state.retired for state in self.groups)
        if retired and not self._idle and len(self._finished_trials) < self.cfg.search.trials and not self._stopping:
            self.summary.stopped = self._why_no_group_is_left()
            self.summary.exit_code = 1

    def _why_no_group_is_left(self) -> str:
        """Every group retired: lost with their nodes, past their trials' time limits, or both."""
        lost = set(self.summary.lost)
        late = [g for g in set(self.summary.retired) if g not in lost]
        if not late:
            return f"{NO_GROUP_LEFT} lost with its node (their ranks went silent)"
        if not lost:
            return f"{NO_GROUP_LEFT} retired (none came back from a trial past its time limit)"
        return (f"{NO_GROUP_LEFT} retired: {len(lost)} lost with their nodes, {len(late)} past a trial's time limit "
                "(none came back)")

    def _wait_s(self, due_at: float | None) -> float | None:
        """How long to wait for a result: until the next deadline, send-ahead, look while a group is
        held, heartbeat or look for lost groups, whichever is nearest; with none of those, for ever."""
        now = self._clock()
        waits = []
        if self._limit:  # deadlines come only from a time limit: no walk of thousands of groups without one
            waits = [s.deadline - now for s in self.groups if s.running is not None and s.deadline is not None]
        if due_at is not None:
            waits.append(due_at - now)
        if self._holding:
            waits.append(HOLD_POLL_S)
        if self.run_dir is not None:
            waits.append(self._beat_at + HEARTBEAT_EVERY_S - time.monotonic())
        if self.transport.watch_s is not None:
            waits.append(self.transport.watch_s)
        return max(0.0, min(waits)) if waits else None

    def _start_running(self, group: int, n: int, at: float) -> None:
        state = self.groups[group]
        state.running, state.began = n, at
        self._n_running += 1
        heapq.heappush(self._starts, (at, group, n))
        if self._limit:
            trial_limit = self.cfg.trial_training(self.trials[n].params).get("time_limit") or self._limit
            state.deadline = self._clock() + float(trial_limit) + self._grace

    def _stop_running(self, state: GroupState) -> int:
        n = state.running
        state.running, state.deadline = None, None
        self._n_running -= 1
        return n

    def _take_ahead(self, state: GroupState) -> tuple[int, float]:
        m, sent = state.ahead
        state.ahead = None
        self._n_ahead -= 1
        return m, sent

    def _free(self, group: int, at: float) -> None:
        self._idle.append(group)
        self.groups[group].idle_since = at

    def _retire_silent(self) -> None:
        """Every group past its trial's deadline is retired: its trial times out, and the trial it
        holds ahead goes to another group (if it comes back, it runs it too; that result is ignored)."""
        now = self._clock()
        late = [g for g, s in enumerate(self.groups) if s.running is not None and s.deadline is not None
                and s.deadline <= now]
        for group in sorted(late, key=lambda g: (self.groups[g].began, g)):
            state = self.groups[group]
            n = self._stop_running(state)
            state.retired = True
            self.summary.retired.append(group)
            if state.ghost == n:
                log.warning("group %d did not come back from trial %d (run by another group too): retired", group, n)
            elif (settled := self._settle_cut_off(n)) is not None:
                log.warning("group %d did not come back from trial %d: retired; %s", group, n, settled)
            else:
                self._record(n, TrialResult(
                    trial=n, status=TrialStatus.TIMEOUT, start=self.trials[n].start or 0.0, end=time.time(),
                    error=f"group {group} did not report back within training.time_limit + search.grace_period "
                          f"({float(self._limit):g} + {self._grace:g} s); the group is retired"))
                self._finished_trials.add(n)
                log.warning("group %d did not come back from trial %d: retired; %d group(s) left", group, n,
                            sum(not s.retired for s in self.groups))
            state.ghost = None
            if state.ahead is not None:
                m, _ = self._take_ahead(state)
                self._rerun.appendleft(m)
                self._orphans.add(m)
                state.ghost = m

    def _retire_lost(self) -> None:
        """Every group whose ranks went silent (its node died) is retired, and the trials it held
        run again on live groups, before any new trial; if the group comes back, it works again.
        Looked for every `watch_s`, not on every message: the look walks every group."""
        now = time.monotonic()
        if self.transport.watch_s is None or now < self._watch_at:
            return
        self._watch_at = now + self.transport.watch_s
        for group, (why, silent_s) in sorted(self.transport.lost_groups().items()):
            state = self.groups[group]
            if state.retired:
                continue
            state.retired = True
            self.summary.retired.append(group)
            self.summary.lost.append(group)
            # the timeline leaves its time out from when it went silent
            self._journal({"event": "lost", "group": group, "time": time.time(), "silent_s": round(silent_s, 3)})
            running = self._stop_running(state) if state.running is not None else None
            settled = self._settle_cut_off(running) if running is not None else None
            again = [running] if running is not None and settled is None else []
            if state.ahead is not None:
                again.append(self._take_ahead(state)[0])
            for n in reversed(again):
                self._rerun.appendleft(n)
                self._orphans.add(n)
            if group in self._idle:
                self._idle.remove(group)
            left = sum(not s.retired for s in self.groups)
            what = ([settled] if settled else []) + ([_runs_again(again, left)] if again else [])
            log.warning("group %d lost: %s; %s; %d group(s) left", group, why, "; ".join(what) or "it held no trial",
                        left)

    def _take_in(self, group: int, result: TrialResult, t_recv: float) -> None:
        """A group's result: the group goes on (with a trial sent ahead, or idle), the trial is
        recorded unless another group ran it too, and the search stops where it must."""
        state = self.groups[group]
        if state.retired:
            self._welcome_back(group, result, t_recv)
            return
        if state.running is None:  # cannot happen with an MPI transport (FIFO per group); never crash on it
            log.warning("group %d reported trial %s while it had none: ignored", group, result.trial)
            return
        began = state.began
        n = self._stop_running(state)
        took = _reported_duration(result)  # on the group's clock: no wait for the coordinator in it
        self.send_ahead.durations.append(took if took is not None else t_recv - began)
        if state.ahead is not None:  # the group has already started its next trial: when it ended this one
            m, sent = self._take_ahead(state)
            self.trials[m].dispatch_s = sent - t_recv  # negative: sent before the result came
            self.trials[m].start = time.time()
            self.summary.dispatch_s.append(sent - t_recv)
            self._start_running(group, m, min(t_recv, max(sent, began + took)) if took is not None else t_recv)
        else:
            self._free(group, t_recv)
        if state.ghost == n:
            state.ghost = None
            log.info("group %d finished trial %d, which another group ran again after this one was retired: "
                     "this result is ignored", group, n)
            return
        if n in self._finished_trials:  # never record a trial twice
            return
        if result.status == TrialStatus.PAUSED:
            self._pause(n, result)
            return
        self._record(n, result)
        self._finished_trials.add(n)
        self._drop_checkpoint(n)
        self.send_ahead.intakes.append(self._clock() - t_recv)
        self._stop_if_due(n, result)

    def _welcome_back(self, group: int, result: TrialResult, t_recv: float) -> None:
        """A retired group came back after all: its trial stays a timeout, and it works again."""
        state = self.groups[group]
        state.retired = False
        self.summary.retired.remove(group)
        if group in self.summary.lost:
            self.summary.lost.remove(group)
            self._journal({"event": "back", "group": group, "time": time.time()})
        log.warning("group %d came back after it was retired (its late result for trial %s is ignored)",
                    group, result.trial)
        if state.ghost is not None:  # it goes on with the trial it held, which another group runs too
            self._start_running(group, state.ghost, t_recv)
        else:
            self._free(group, t_recv)

    def _stop_if_due(self, n: int, result: TrialResult) -> None:
        """Stop handing out trials on an objective's misuse, too many failures, or the target."""
        if result.misuse:
            self._misused.add(n)
        if self._stopping:
            return
        if result.misuse and not self.summary.stopped:
            where = self.cfg.objective.misuse_where(result.misuse_field)
            self.summary.stopped = f"{self.cfg.source or self.cfg.path}: {where}: " + _first_line(result.error)
            self.summary.exit_code = 2
            self._stopping = True
            return
        failures = self._failure_limit()
        if failures:
            self._stopping = self._failures_stopped = True
            self.summary.stopped = failures
            self.summary.exit_code = 1
            log.error("%s%s", failures, self._waiting_for())
        elif self.reached_target():
            self._stopping = True
            log.info("target %s reached by trial %d%s", self.cfg.search.target, n, self._waiting_for())
            self.summary.target_reached = True

    def _waiting_for(self) -> str:
        """What a stopping search still waits for, as the end of its line (nothing: "")."""
        running = self._n_running + self._n_ahead  # a trial sent ahead runs too, once its group is free
        return f"; waiting for {running} running trial{'s' * (running != 1)}" if running else ""

    def _end_search(self) -> Summary:
        self.transport.shutdown()
        self.searcher.pause(False)
        if self.run_dir is not None:
            self.run_dir.sync()
        self._table(force=True)
        summary = self.summary
        summary.best = self.best()
        summary.target_reached = summary.target_reached or self.reached_target()
        self._verdict(summary)
        if self.run_dir is not None:
            self.run_dir.heartbeat("ended", stopped=summary.stopped or self._target_line(summary))
        return summary

    def _target_line(self, summary: Summary) -> str | None:
        """Why a search that reached its target ended before its budget, for `mpiopt status`."""
        if not summary.target_reached or summary.best is None:
            return None
        return f"search.target {self.cfg.search.target:g} reached (best: trial {summary.best.trial})"

    def _hand_out(self, group: int) -> int:
        """Choose the next trial (an interrupted one first), journal it and send it to `group`."""
        t0 = self._clock()
        waited = 0.0
        promoted = self._promotion_for(group)
        if promoted is not None:
            n, params = promoted, self.trials[promoted].params
            self.scheduler.promote(n)
            self._paused.discard(n)
            self.searcher.add_pending(n, params)  # it runs again
            trial_log.info("trial %d promoted: goes on from epoch %s [group %s]", n, self.trials[n].epochs, group)
        elif self._rerun:
            n = self._rerun.popleft()
            params = self.trials[n].params
            if n in self._orphans:  # still pending in the searcher: it was handed out before
                self._orphans.discard(n)
            else:
                self.searcher.add_pending(n, params)
        else:
            n = self._next_trial
            self._next_trial += 1
            params = self.searcher.ask(n)
            waited = self.searcher.ask_wait_s
            if waited > 0:
                self._extend_holds(waited)
            self.scheduler.start(n)
        task = Task(n, params, str(self.run_dir.trial_dir(n)) if self.run_dir is not None else None,
                    decide_at=tuple(self.scheduler.decision_epochs(n)),
                    reported=(self.trials[n].epochs or 0) if n in self.trials else 0)
        # journaled before the task goes out (a crash after the send must not lose the trial);
        # the dispatch time is measured at the send and kept in memory and in the table
        event = start_event(task, group, self.transport.group_ranks(group), time.time(),
                            promoted=promoted is not None)
        self._journal(event)
        apply_event(self.trials, event)
        self.transport.send_task(group, task)
        # the coordinator's own work: a searcher's deliberate wait for a fresher model (bounded by
        # the searcher) is not what sending ahead should make up for
        self.send_ahead.hand_outs.append(max(0.0, self._clock() - t0 - waited))
        self._last_ask_wait = waited
        log.debug("trial %d -> group %d: %s", n, group, params)
        return n

    # -- the scheduler -------------------------------------------------------------------------
    def on_report(self, group: int, report: Report) -> str | None:
        """A running trial's epoch: judged by the scheduler, told to the searcher at a rung, and
        journaled (with a pause, if any) before the decision (`continue`, `pause`, `stop`) goes
        back to a group that waits for one."""
        self._warn_of_rungs_skipped(report.trial, self._reached.get(report.trial, 0), report.epoch)
        now = time.time()
        decision = self._take_report(report.trial, report.epoch, report.metrics, now)
        rec = self.trials.get(report.trial)  # its rung, as _take_report just set it
        event = report_event(report, now, decision=decision.value,
                             rung=rec.rung if rec is not None else None)
        self._journal(event)
        apply_event(self.trials, event)
        return decision.value if report.decide else None

    def _answer(self, group: int, report: Report) -> None:
        decision = self.on_report(group, report)
        if decision is not None:
            self.transport.send_decision(group, decision)
        if decision in (Decision.STOP.value, Decision.PAUSE.value):
            self._send_ahead_on_decision(group, report.trial)

    def _take_report(self, n: int, epoch: int, metrics: dict[str, float], at: float) -> Decision:
        """The scheduler's decision on a trial's best figure of merit so far (as a loss), which a
        searcher that learns from rungs is told at a rung; live and in the replay of a journal."""
        value = metrics.get(self.cfg.objective.metric)
        loss = self.sign * value if isinstance(value, (int, float)) and math.isfinite(value) else None
        best = self._best_so_far.get(n)
        if loss is not None and (best is None or loss < best):
            best = loss
        self._best_so_far[n] = best
        decision = self.scheduler.report(n, epoch, best)
        if decision is Decision.STOP and n not in self._stop_reports:
            self._stop_reports[n] = (epoch, dict(metrics), at)
        if decision is Decision.PAUSE:
            self._pause_reports[n] = (epoch, dict(metrics), at)
        # an epoch trained again after a crash (from the last checkpoint) is counted once, as in
        # mpiopt status: epochs come in order within a trial, so a new one is past the reached
        if epoch > self._reached.get(n, 0):
            self._epochs += 1
            self._reached[n] = epoch
        rec = self.trials.get(n)
        if rec is not None:
            rec.rung = self.scheduler.rung(n)
            if epoch in self._rungs:
                self.searcher.tell_rung(n, rec.params, epoch, best)
        return decision

    def _promotion_for(self, group: int) -> int | None:
        """A paused trial the scheduler promotes now that this group can continue: one of the
        group's size (trials at a rung compare best trained alike), or of a size no live group has
        (a resume on another layout, a lost node), which would otherwise never go on. The
        checkpoint holds the master's state; the shards follow the group's size."""
        if not self._paused:
            return None
        ranks = self.transport.group_ranks(group)
        sizes = None
        for n in self.scheduler.promotable(closing=not self._room()):
            if n not in self._paused:
                continue
            size = self.trials[n].ranks
            if size is None or size == ranks:
                return n
            sizes = self._live_sizes() if sizes is None else sizes
            if size not in sizes:
                return n
        return None

    def _live_sizes(self) -> set[int]:
        return {self.transport.group_ranks(g) for g, state in enumerate(self.groups) if not state.retired}

    def _note_paused_sizes_missing(self) -> None:
        """A resume on another layout: paused trials of a size no group has go on on other sizes."""
        sizes = self._live_sizes()
        missing = sorted({self.trials[n].ranks for n in self._paused} - sizes - {None})
        if missing:
            which = sorted(n for n in self._paused if self.trials[n].ranks in missing)
            log.warning("%s (%s) trained on groups of %s, which this job does not have: a promotion continues "
                        "%s on groups of %s (run with the same groups to keep them alike)",
                        counted(len(which), "paused trial"), _listed(which), _sizes_text(missing),
                        "them" if len(which) != 1 else "it", _sizes_text(sorted(sizes)))

    def _pause(self, n: int, result: TrialResult) -> None:
        """A trial stopped at a rung with its checkpoint: it waits for a promotion."""
        rec = self.trials[n]
        self._pause_reports.pop(n, None)
        rec.rung = self.scheduler.rung(n)
        event = finish_event(result, rec, time.time())
        self._journal(event)
        apply_event(self.trials, event)
        self._paused.add(n)
        self.searcher.drop_pending(n)  # as after a resume: a paused trial is not running
        self._table_dirty = True
        trial_log.info("trial %d paused at epoch %s [group %s]", n, rec.epochs, rec.group)
        self._log_progress()

    def _prune_paused(self) -> None:
        """The search is over: a trial still paused will never be promoted, so it is pruned."""
        for n in sorted(self._paused):
            rec = self.trials[n]
            self._prune(n, TrialResult(status=TrialStatus.PRUNED, metrics=rec.metrics, epochs=rec.epochs,
                                       start=rec.start, end=rec.end, resumed_s=rec.resumed_s, wait_s=rec.wait_s))
        self._paused.clear()

    def _replay_scheduler(self, events: Iterable[dict[str, Any]]) -> None:
        """Bring the scheduler (and a searcher that learns from rungs) to where the journal left
        them, through the calls the live search made, in its order."""
        for e in events:
            kind, n = e.get("event"), e.get("trial")
            if not isinstance(n, int):
                continue
            if kind == "start":
                if e.get("promoted"):
                    if n in self.scheduler.paused():
                        self.scheduler.promote(n)
                else:
                    self.scheduler.start(n)
            elif kind == "report" and isinstance(e.get("epoch"), int):
                self._take_report(n, e["epoch"], e.get("metrics") or {}, e.get("time") or 0.0)
            elif kind == "finish":
                self._pause_reports.pop(n, None)
                if e.get("status") != TrialStatus.PAUSED.value:
                    self.scheduler.finished(n, cut_short=TrialStatus.parse(e.get("status")).is_cut_short())
                    self._stop_reports.pop(n, None)

    def _failure_limit(self) -> str | None:
        """The reason to stop once `search.max_failures` trials failed, naming the commonest error."""
        limit = self.cfg.search.max_failures
        if limit is None or self._failed < limit:
            return None
        failed = [t for n, t in self.trials.items() if t.status == TrialStatus.FAILED and n not in self._failed_before]
        again = " since the resume" if self._failed_before else ""
        return (f"search stopped: {len(failed)} trials failed{again} (search.max_failures: {limit}); "
                f"{commonest_error(failed)}")

    def _verdict(self, summary: Summary) -> None:
        """A search that finished its budget still fails (exit 1) where it lost a group or where
        no trial completed: the user must not take either for a good run."""
        summary.discard = summary.exit_code == 2 and self._new_search and not any(
            n not in self._misused and t.status in (TrialStatus.COMPLETED, TrialStatus.PAUSED)
            for n, t in self.trials.items())
        if self._failures_stopped:  # the trials that were running when it stopped have finished since
            summary.stopped = self._failure_limit()
        if summary.stopped:
            return
        if summary.retired:
            summary.stopped = _lost_line(summary)
            summary.exit_code = 1
            return
        finished = [t for t in self.trials.values() if t.status.is_finished()]
        if finished and not any(t.status == TrialStatus.COMPLETED for t in finished):
            summary.stopped = f"no trial completed ({len(finished)} did not); {commonest_error(finished)}"
            summary.exit_code = 1

    def _record(self, n: int, result: TrialResult) -> None:
        rec = self.trials[n]
        self._stop_reports.pop(n, None)
        self._pause_reports.pop(n, None)
        was_finished = rec.status.is_finished()
        if result.detail and self.run_dir is not None:
            self.run_dir.write_error(n, result.detail)
        rec.rung = self.scheduler.rung(n)
        event = finish_event(result, rec, time.time())
        self._journal(event)
        apply_event(self.trials, event)
        self.scheduler.finished(n, cut_short=rec.status.is_cut_short())
        self.searcher.tell(n, rec.params, self.search_loss(rec))
        self._table_dirty = True
        self._warn_if_unjudged(n, rec)
        self._warn_of_steps_not_judged(n, result)
        if not was_finished:
            self._finished += 1
            self._failed += rec.status == TrialStatus.FAILED
        best = self.best()
        if self.loss(rec) is not None and (best is None or (self.loss(rec), n) < (self.loss(best), best.trial)):
            self._best = best = rec
        what = (f" {self.cfg.objective.metric}={rec.objective:.6g}" if rec.objective is not None
                else f" at epoch {rec.epochs}" if rec.status == TrialStatus.PRUNED else f": {_first_line(rec.error)}")
        best_txt = _best_text(best)
        trial_log.info("trial %d %s%s [group %s, %.2f s] %d/%d, %s", n, rec.status.value, what, rec.group,
                       rec.duration_s or 0.0, self._finished, self.cfg.search.trials, best_txt)
        self._log_progress()

    def _log_progress(self) -> None:
        if self._progress.due(self._finished, self._epochs):
            line = self._progress.line(self._finished, self._epochs, self._epochs_left() or 0.0)
            log.info("progress: %s, %d running, %s", line, self._n_running, _best_text(self.best()))

    def _epochs_left(self) -> float | None:
        """What the rest of the budget trains on average under a ladder (`Scheduler.epochs_left`)."""
        return self.scheduler.epochs_left(max(0, self.cfg.search.trials - len(self.trials)),
                                          **reached_by_state(self.trials, self._reached, self._paused))

    def _beat(self) -> None:
        """Every HEARTBEAT_EVERY_S, tell `mpiopt status` the search is alive (a file, not the lock)."""
        now = time.monotonic()
        if self.run_dir is not None and now - self._beat_at >= HEARTBEAT_EVERY_S:
            self._beat_at = now
            self.run_dir.heartbeat("running")


    def _warn_if_unjudged(self, n: int, rec: TrialRecord) -> None:
        """Once a search: a trial completed under a scheduler without a single report, which the
        scheduler therefore never judged (a function that takes `trial` but never reports)."""
        if self._warned_unjudged or self.scheduler.name == "none" or rec.status != TrialStatus.COMPLETED \
                or n in self._best_so_far:
            return
        self._warned_unjudged = True
        where = self.cfg.objective.function or self.cfg.objective.model
        log.warning("trial %d completed without reporting a step, so search.scheduler %s could not judge it: "
                    "%s must call trial.report(step, ...) as it goes", n, self.scheduler.name, where)

    def _warn_of_rungs_skipped(self, n: int, last: int, step: int) -> None:
        """Once a search: a function whose steps jump over a decision epoch (steps 2, 4, ... past
        rungs 1, 3 and 9), where the scheduler never judges it: it judges the steps reported."""
        if "skipped" in self._warned_steps or self.cfg.objective.kind != "function":
            return
        decisions = self.scheduler.decision_epochs(n)
        skipped = [d for d in decisions if last < d < step]
        if not skipped:
            return
        self._warned_steps.add("skipped")
        log.warning("trial %d reported step %d %s, past step %s where search.scheduler %s judges a trial: it "
                    "judges only the steps reported, so %s must report every step (or at least steps %s)",
                    n, step, f"after step {last}" if last else "first", ", ".join(map(str, skipped)),
                    self.scheduler.name, self.cfg.objective.function,
                    ", ".join(map(str, decisions)) if len(decisions) <= 8 else f"{decisions[0]} to {decisions[-1]}")

    def _warn_of_steps_not_judged(self, n: int, result: TrialResult) -> None:
        """Once a search each: a function that reported steps after the scheduler stopped it (it
        did not ask `should_stop()`), or past training.epochs, the top rung; neither was judged."""
        fn = self.cfg.objective.function
        if result.reported_after_stop is not None and "after stop" not in self._warned_steps:
            self._warned_steps.add("after stop")
            log.warning("trial %d reported up to step %d after the scheduler stopped it at step %s: %s must call "
                        "trial.should_stop() after each report and return when it says True (steps after a stop "
                        "are not judged)", n, result.reported_after_stop, result.epochs, fn)
        if result.reported_past_top is not None and "past top" not in self._warned_steps:
            self._warned_steps.add("past top")
            log.warning("trial %d reported up to step %d, past training.epochs (%s), the scheduler's top rung: "
                        "steps after it are not judged", n, result.reported_past_top, self.cfg.training["epochs"])
        if result.not_numbers and "not numbers" not in self._warned_steps:
            self._warned_steps.add("not numbers")
            log.warning("trial %d: %s returned %s, which %s no number: left out of the results table (it keeps "
                        "numbers only)", n, fn, ", ".join(map(repr, result.not_numbers)),
                        "is" if len(result.not_numbers) == 1 else "are")


def _runs_again(trials: list[int], groups_left: int) -> str:
    """What becomes of a lost group's trials: `trial 7 runs again on another group`, `trials 7, 9
    run again ...`, or, with no group left, on --resume."""
    named = f"trials {', '.join(map(str, trials))} run" if len(trials) > 1 else f"trial {trials[0]} runs"
    return f"{named} again on {'another group' if groups_left else '--resume'}"


def _lost_line(summary: Summary) -> str:
    """Why a search that finished its budget still fails: the groups it lost, and how."""
    parts = []
    silent = [g for g in summary.retired if g in summary.lost]
    stuck = [g for g in summary.retired if g not in summary.lost]
    if silent:
        parts.append(f"group{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} lost "
                     f"{'their' if len(silent) > 1 else 'its'} ranks (a node died?) and "
                     f"{'their' if len(silent) > 1 else 'its'} trials ran again on other groups")
    if stuck:
        parts.append(f"group{'s' if len(stuck) > 1 else ''} {', '.join(map(str, stuck))} never came back from a "
                     f"trial and {'were' if len(stuck) > 1 else 'was'} lost")
    paused = sum(t.status == TrialStatus.PAUSED for t in summary.trials.values())
    if paused:  # kept, not pruned: what the lost groups' trials reach on --resume may promote them
        parts.append(f"{counted(paused, 'trial')} left paused, which --resume promotes or prunes")
    return "; ".join(parts) + "; the finished trials are in the journal"


def commonest_error(trials: list[TrialRecord]) -> str:
    """`the most common error (k of n): <its line>` over trials that did not complete; a trial
    a scheduler pruned went wrong in no way of its own, so it counts only where all were pruned.
    Errors that differ only in their numbers (`units=76 is too many`, `x=-3.4 ...`) are one, and
    the line then says that its numbers vary from trial to trial."""
    erring = [t for t in trials if t.status != TrialStatus.PRUNED]
    if not erring:
        return "the scheduler pruned every one"
    errors: dict[str, list[str]] = {}
    for t in erring:
        head = (t.error or f"{t.status.value}, no error text").splitlines()[0][:300]
        errors.setdefault(_NUMBER.sub("#", head), []).append(head)
    lines = max(errors.values(), key=len)
    pruned = len(trials) - len(erring)
    among = f"{len(erring)}" + (f"; {pruned} pruned" if pruned else "")
    vary = "; its numbers vary" if len(set(lines)) > 1 else ""
    return f"the most common error ({len(lines)} of {among}{vary}): {lines[0]}"


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _first_line(text: str | None) -> str:
    return text.splitlines()[0] if text else "(no error text)"


def _reported_duration(result: TrialResult) -> float | None:
    """A trial's length as its group measured it (start to result), or None."""
    start, end = result.start, result.end
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and math.isfinite(end - start) \
            and end >= start:
        return float(end - start)
    return None


def _best_text(best: TrialRecord | None) -> str:
    return f"best {best.objective:.6g} (trial {best.trial})" if best else "no completed trial yet"


def dispatch_stats(seconds: list[float], first_wave: list[float] = ()) -> str:
    """One line about the hand-outs: the groups' first trials (the start-up), those sent ahead,
    and the coordinator's time for those sent after a result (the group waited)."""
    if not seconds and not first_wave:
        return "no trial dispatched"
    ms = [s * 1000 for s in seconds if s >= 0]
    parts = [f"{len(first_wave)} in the first wave (the last {max(first_wave) * 1000:.1f} ms after the start)"
             ] if first_wave else []
    if len(seconds) > len(ms):
        parts.append(f"{len(seconds) - len(ms)} sent ahead, before the group finished")
    parts.append(f"{len(ms)} after a result")
    n = len(seconds) + len(first_wave)
    line = f"{n} trial{'s' if n != 1 else ''} dispatched ({', '.join(parts)})"
    if not ms:
        return line
    p99 = statistics.quantiles(ms, n=100, method="inclusive")[98] if len(ms) > 1 else ms[0]
    return f"{line}: {statistics.mean(ms):.2f} ms mean, {statistics.median(ms):.2f} ms p50, " \
           f"{p99:.2f} ms p99 coordinator time per dispatch after a result"


def _sizes_text(sizes: list[int]) -> str:
    """'1 rank', '2 and 3 ranks'."""
    return f"{' and '.join(map(str, sizes))} rank{'s' * (sizes != [1])}"


def _listed(numbers: list[int], most: int = 10) -> str:
    """'trial 3', 'trials 3, 5, 8', or the first `most` and how many more."""
    return f"trial{'s' * (len(numbers) != 1)} {first_few(numbers, most)}"

"""The coordinator's logic, in-process, with a fake transport that simulates groups of different speeds."""
from __future__ import annotations

import dataclasses
import heapq
import math
import time

import pytest

from mpiopt.config import load_config
from mpiopt._send_ahead import SendAhead
from mpiopt.coordinator import HOLD_MAX_GROUPS, Coordinator, commonest_error
from mpiopt.journal import RunDir
from mpiopt.search import RandomSearch, make_searcher
from mpiopt.trial import TrialRecord, TrialResult, TrialStatus


def branin(p):
    x, y = p["x"], p["y"]
    b, c, t = 5.1 / (4 * math.pi**2), 5.0 / math.pi, 1.0 / (8 * math.pi)
    return (y - b * x**2 + c * x - 6.0) ** 2 + 10.0 * (1 - t) * math.cos(x) + 10.0


class SimTransport:
    """Groups with fixed trial durations on a simulated clock; results arrive in finishing order."""

    queues_tasks = False
    watch_s = None  # simulated groups are never lost

    def lost_groups(self):
        return {}

    def __init__(self, durations, fn=branin):
        self.durations = durations
        self.fn = fn
        self.clock = 0.0
        self.heap = []
        self.log = []  # ("send", group, trial) / ("recv", group, trial)
        self.stopped = False

    @property
    def n_groups(self):
        return len(self.durations)

    def group_ranks(self, group):
        return 1

    def send_task(self, group, task):
        assert not any(g == group for _, _, g, _ in self.heap), "a busy group got a second task"
        self.log.append(("send", group, task.trial))
        heapq.heappush(self.heap, (self.clock + self.durations[group], task.trial, group, task))

    def recv_message(self, timeout=None):
        if math.isinf(self.heap[0][0]):  # only stuck groups are left: nothing arrives in time
            assert timeout is not None, "the coordinator would wait forever"
            time.sleep(timeout)
            return None
        self.clock, n, group, task = heapq.heappop(self.heap)
        self.log.append(("recv", group, n))
        try:
            value = self.fn(task.params)
        except Exception as exc:
            return group, TrialResult(trial=n, status=TrialStatus.FAILED, error=f"{type(exc).__name__}: {exc}",
                                      start=1.0, end=2.0)
        if isinstance(value, float) and not math.isfinite(value):
            return group, TrialResult(trial=n, status=TrialStatus.DIVERGED, metrics={"objective": None}, start=1.0,
                                      end=2.0)
        return group, TrialResult(trial=n, objective=value, metrics={"objective": value}, start=1.0, end=2.0)

    def has_result(self):
        return False

    def send_decision(self, group, decision):
        raise AssertionError("no report asks for a decision here")

    def listen(self, on_report):
        pass

    def shutdown(self):
        self.stopped = True


@pytest.fixture
def cfg(write_yaml):
    def make(search="{initial_points: 5, trials: 20, seed: 0, acquisition: EI}"):
        return load_config(write_yaml(f"""
            objective: {{function: objectives.py:branin}}
            parameters:
              x: {{type: real, low: -5.0, high: 10.0}}
              y: {{type: real, low: 0.0, high: 15.0}}
            search: {search}
        """))
    return make


def run(cfg, transport, run_dir=None, trials=None):
    return Coordinator(cfg, make_searcher(cfg.space, cfg.search), transport, run_dir, trials).run()


def test_budget_is_exact_and_numbers_unique(cfg):
    t = SimTransport([1.0, 1.3, 2.1, 0.7])
    s = run(cfg(), t)
    assert sorted(s.trials) == list(range(20))
    assert all(r.status == TrialStatus.COMPLETED for r in s.trials.values())
    assert t.stopped
    assert s.best.objective == min(r.objective for r in s.trials.values())


def test_finished_group_is_served_at_once_and_fast_groups_do_more(cfg):
    t = SimTransport([0.1, 5.0])
    s = run(cfg(), t)
    # after each result (but the last ones), the very next event sends that same group a trial
    for i, (kind, group, _) in enumerate(t.log[:-2]):
        if kind == "recv" and t.log[i + 1][0] == "send":
            assert t.log[i + 1][1] == group
    per_group = [sum(1 for r in s.trials.values() if r.group == g) for g in (0, 1)]
    assert per_group[0] > 4 * per_group[1]


def test_parallel_groups_never_get_the_same_point(cfg):
    t = SimTransport([1.0] * 8)
    s = run(cfg(), t)
    points = [(r.params["x"], r.params["y"]) for r in s.trials.values()]
    assert len(set(points)) == len(points) == 20


def test_target_stops_dispatching(cfg):
    t = SimTransport([1.0, 1.0])
    s = run(cfg("{initial_points: 5, trials: 200, seed: 0, target: 5.0}"), t)
    assert s.target_reached
    assert len(s.trials) < 200
    assert s.best.objective <= 5.0


def test_failures_do_not_stop_the_search(cfg):
    def moody(p):
        if p["x"] < 0:
            raise RuntimeError("negative x")
        if p["x"] < 1:
            return float("nan")
        return branin(p)

    s = run(cfg(), SimTransport([1.0, 1.5, 0.5], fn=moody))
    statuses = {r.status for r in s.trials.values()}
    assert len(s.trials) == 20
    assert TrialStatus.COMPLETED in statuses and TrialStatus.FAILED in statuses
    failed = [r for r in s.trials.values() if r.status == TrialStatus.FAILED]
    assert all("negative x" in r.error for r in failed)
    assert all(r.objective is None for r in s.trials.values() if r.status != TrialStatus.COMPLETED)
    assert s.best.params["x"] >= 1


def test_resume_reruns_interrupted_trials_first_and_reaches_the_budget(cfg, tmp_path):
    c = cfg()
    old = {
        0: TrialRecord(0, {"x": 1.0, "y": 2.0}, TrialStatus.COMPLETED, objective=5.0, start=1, end=2),
        1: TrialRecord(1, {"x": 2.0, "y": 3.0}, TrialStatus.RUNNING, start=1),
        2: TrialRecord(2, {"x": 3.0, "y": 4.0}, TrialStatus.FAILED, error="boom", start=1, end=2),
        3: TrialRecord(3, {"x": 4.0, "y": 5.0}, TrialStatus.RUNNING, start=1),
    }
    t = SimTransport([1.0, 1.0])
    s = run(c, t, trials=old)
    sends = [n for kind, _, n in t.log if kind == "send"]
    assert sends[:2] == [1, 3]  # the interrupted trials, same numbers
    assert s.trials[1].params == {"x": 2.0, "y": 3.0} and s.trials[3].params == {"x": 4.0, "y": 5.0}
    assert s.trials[0].objective == 5.0 and s.trials[2].status == TrialStatus.FAILED  # kept, not re-run
    assert 0 not in sends and 2 not in sends
    assert sorted(s.trials) == list(range(20))
    assert len(sends) == 18


def test_journal_replays_to_the_same_trials(cfg, tmp_path):
    c = cfg()
    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text="a: 1\n")
    s = run(c, SimTransport([1.0, 0.4, 0.9]), run_dir=rd)
    replayed, problems = rd.load()
    rd.close()
    assert problems == []
    assert {n: (r.status, r.params, r.objective) for n, r in replayed.items()} == \
           {n: (r.status, r.params, r.objective) for n, r in s.trials.items()}
    assert (tmp_path / "run" / "results.csv").read_text().count("\n") == 21


def test_maximize_picks_the_largest(cfg, write_yaml):
    c = load_config(write_yaml("""
        objective: {function: objectives.py:branin, maximize: objective}
        parameters: {x: {type: real, low: -5.0, high: 10.0}, y: {type: real, low: 0.0, high: 15.0}}
        search: {initial_points: 3, trials: 8, seed: 0}
    """))
    s = run(c, SimTransport([1.0]))
    assert s.best.objective == max(r.objective for r in s.trials.values())


def test_max_failures_stops_the_search_naming_the_commonest_error(cfg):
    def broken(p):
        if p["x"] < 8:
            raise ValueError("layer sizes do not match")
        raise KeyError("rare")

    s = run(cfg("{initial_points: 5, trials: 50, seed: 0, max_failures: 6}"), SimTransport([1.0, 1.0], fn=broken))
    # the one still running when the limit was hit is waited for, and the line counts it too
    failed = sum(t.status == TrialStatus.FAILED for t in s.trials.values())
    assert 6 <= failed <= len(s.trials) <= 7
    assert s.stopped.startswith(f"search stopped: {failed} trials failed (search.max_failures: 6)")
    assert "ValueError: layer sizes do not match" in s.stopped


def test_a_search_in_which_no_trial_completed_fails_naming_the_commonest_error(cfg):
    def broken(params):
        if params["x"] > 8:
            raise RuntimeError("a rarer error")
        raise ValueError("layer sizes do not match")

    s = run(cfg("{initial_points: 5, trials: 8, seed: 0}"), SimTransport([1.0, 1.0], fn=broken))
    assert len(s.trials) == 8 and s.exit_code == 1
    assert s.stopped.startswith("no trial completed (8 did not); the most common error (")
    assert s.stopped.endswith("ValueError: layer sizes do not match")

    s = run(cfg("{initial_points: 5, trials: 8, seed: 0}"), SimTransport([1.0, 1.0]))
    assert s.stopped is None and s.exit_code == 0


def test_the_commonest_error_leaves_out_trials_a_scheduler_pruned():
    def rec(n, status, error=None):
        return TrialRecord(trial=n, params={}, status=status, error=error)

    pruned = [rec(0, TrialStatus.PRUNED), rec(1, TrialStatus.PRUNED)]
    diverged = rec(2, TrialStatus.DIVERGED, "loss is nan at step 2")
    assert commonest_error([*pruned, diverged]) == "the most common error (1 of 1; 2 pruned): loss is nan at step 2"
    assert commonest_error(pruned) == "the scheduler pruned every one"
    # errors that differ only in their numbers are one error
    failed = [rec(3 + i, TrialStatus.FAILED, f"ValueError: units={u} is too many") for i, u in enumerate((76, 90))]
    timeout = rec(5, TrialStatus.TIMEOUT, "stopped by training.time_limit after 7 epochs")
    assert commonest_error([*failed, timeout]) == \
        "the most common error (2 of 3; its numbers vary): ValueError: units=76 is too many"
    # signed and exponent numbers too; the same line repeated is not said to vary
    signed = [rec(6 + i, TrialStatus.FAILED, f"RuntimeError: bad x={x}")
              for i, x in enumerate(("-3.4", "0.19", "2e-3"))]
    assert commonest_error([*signed, timeout]) == \
        "the most common error (3 of 4; its numbers vary): RuntimeError: bad x=-3.4"
    assert commonest_error([rec(9, TrialStatus.FAILED, "E 1"), rec(10, TrialStatus.FAILED, "E 1"), timeout]) == \
        "the most common error (2 of 3): E 1"


def test_a_search_that_lost_a_group_says_its_paused_trials_wait_for_a_resume():
    from mpiopt.coordinator import Summary, _lost_line

    trials = {n: TrialRecord(trial=n, params={}, status=s) for n, s in
              enumerate([TrialStatus.COMPLETED, TrialStatus.PAUSED, TrialStatus.PAUSED, TrialStatus.PRUNED])}
    line = _lost_line(Summary(trials=trials, best=None, retired=[1], lost=[1]))
    assert line == ("group 1 lost its ranks (a node died?) and its trials ran again on other groups; 2 trials left "
                    "paused, which --resume promotes or prunes; the finished trials are in the journal")


def test_a_group_that_never_comes_back_is_retired(cfg, write_yaml):
    c = load_config(write_yaml("""
        objective: {function: objectives.py:branin}
        parameters: {x: {type: real, low: -5.0, high: 10.0}, y: {type: real, low: 0.0, high: 15.0}}
        search: {initial_points: 3, trials: 6, seed: 0, grace_period: 0.05}
        training: {time_limit: 0.05}
    """))
    s = run(c, SimTransport([1.0, math.inf]))
    assert s.retired == [1]
    # the budget is met, but a search that lost a group does not pass for a good run (exit 1)
    assert len(s.trials) == 6 and s.exit_code == 1
    assert s.stopped == "group 1 never came back from a trial and was lost; the finished trials are in the journal"
    lost = [t for t in s.trials.values() if t.group == 1]
    assert len(lost) == 1 and lost[0].status == TrialStatus.TIMEOUT
    assert "did not report back" in lost[0].error and "retired" in lost[0].error
    assert sum(t.status == TrialStatus.COMPLETED for t in s.trials.values()) == 5

    s = run(c, SimTransport([math.inf, math.inf]))
    assert sorted(s.retired) == [0, 1] and "every group was retired" in s.stopped
    assert len(s.trials) == 2


def test_latencies_are_recorded_and_the_first_wave_is_counted_apart(cfg, tmp_path):
    from mpiopt.analysis import load_results, timeline
    from mpiopt.journal import RunDir

    class Waiting(SimTransport):  # groups that report how long they waited for each trial
        def recv_message(self, timeout=None):
            group, result = super().recv_message(timeout)
            first = sum(1 for k, g, _ in self.log if k == "send" and g == group) == 1
            return group, dataclasses.replace(result, wait_s=None if first else 0.004,
                                              start=self.clock - self.durations[group], end=self.clock)

    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text="name: t\n")
    s = run(cfg(), Waiting([1.0, 1.5, 0.5]), rd)
    rd.close()
    assert len(s.first_wave_s) == 3 and len(s.dispatch_s) == 17 and all(d >= 0 for d in s.dispatch_s)
    df = load_results(tmp_path / "run")
    assert df.dispatch_ms.notna().all()
    assert df.wait_ms.isna().sum() == 3 and (df.wait_ms.dropna() == 4.0).all()  # a first trial per group
    _, summary = timeline(df)
    assert summary["wait_p50_ms"] == 4.0 and "first_wave_ms" in summary and "dispatch_p99_ms" in summary
    best = min(df.objective)
    assert s.best.objective == best  # kept up to date result by result


class MailboxSim:
    """Groups with a mailbox, as over MPI: a task sent to a busy group waits there, in order, and the
    group starts it the moment it finishes. Time is simulated and is also the coordinator's clock.

    `duration(group, k)` is how long the group's k-th trial takes (inf: it never comes back).
    """

    queues_tasks = True
    watch_s = None  # simulated groups are never lost

    def lost_groups(self):
        return {}

    def __init__(self, n_groups, duration):
        self.n = n_groups
        self.duration = duration
        self.clock = 0.0
        self.heap = []  # (end, seq, group, task, start)
        self.busy = [False] * n_groups
        self.mailbox = [[] for _ in range(n_groups)]
        self.count = [0] * n_groups
        self.log = []  # ("send" | "run" | "recv", group, trial, clock)
        self.seq = 0
        self.stopped = False

    @property
    def n_groups(self):
        return self.n

    def group_ranks(self, group):
        return 1

    def _start(self, group, task):
        d = self.duration(group, self.count[group])
        self.count[group] += 1
        self.busy[group] = True
        self.seq += 1
        self.log.append(("run", group, task.trial, self.clock))
        heapq.heappush(self.heap, (self.clock + d, self.seq, group, task, self.clock))

    def send_task(self, group, task):
        self.log.append(("send", group, task.trial, self.clock))
        if self.busy[group]:
            assert not self.mailbox[group], "a group got a second task ahead"
            self.mailbox[group].append(task)
        else:
            self._start(group, task)

    def has_result(self):
        return bool(self.heap) and self.heap[0][0] <= self.clock

    def recv_message(self, timeout=None):
        nxt = self.heap[0][0] if self.heap else math.inf
        if timeout is not None and nxt > self.clock + timeout:
            self.clock += timeout
            return None
        assert math.isfinite(nxt), "the coordinator would wait forever"
        end, _, group, task, start = heapq.heappop(self.heap)
        self.clock = max(self.clock, end)
        self.busy[group] = False
        self.log.append(("recv", group, task.trial, self.clock))
        if self.mailbox[group]:
            self._start(group, self.mailbox[group].pop(0))
        y = branin(task.params)
        return group, TrialResult(trial=task.trial, objective=y, metrics={"objective": y}, start=1e9 + start,
                                  end=1e9 + end, wait_s=0.0)

    def send_decision(self, group, decision):
        raise AssertionError("no report asks for a decision here")

    def listen(self, on_report):
        pass

    def shutdown(self):
        self.stopped = True


def slow_asks(searcher, sim, seconds):
    """`searcher`, each of whose hand-outs takes `seconds` of `sim`'s clock (the coordinator's own
    time, not a deliberate wait)."""
    ask = searcher.ask

    def slow_ask(n):
        sim.clock += seconds
        return ask(n)

    searcher.ask = slow_ask
    return searcher


def run_sim(c, sim, worth=-1.0):
    """The search on `sim`; by default sending ahead whatever the coordinator's speed."""
    co = Coordinator(c, make_searcher(c.space, c.search), sim, clock=lambda: sim.clock,
                     send_ahead=SendAhead(worth=worth))
    return co.run()


def test_groups_get_their_next_trial_before_they_finish(cfg):
    sim = MailboxSim(3, lambda g, k: 1.0 + 0.005 * g)
    s = run_sim(cfg("{initial_points: 5, trials: 30, seed: 0}"), sim)
    assert sorted(s.trials) == list(range(30)) and all(t.status == TrialStatus.COMPLETED for t in s.trials.values())
    sends = [e for e in sim.log if e[0] == "send"]
    assert len(sends) == 30 and sim.stopped
    # after the first results, every hand-out went out before the group finished its trial: the
    # group started it the instant it finished (no idle time), and at most a quarter-trial early
    assert s.sent_ahead >= 24
    ahead = [t for t in s.trials.values() if t.dispatch_s is not None and t.dispatch_s < 0]
    assert len(ahead) == s.sent_ahead
    assert all(-t.dispatch_s <= SendAhead().share * 1.2 + 1e-9 for t in ahead)
    runs = {(g, n): clock for kind, g, n, clock in sim.log if kind == "run"}
    recvs = {g: [] for g in range(3)}
    for kind, g, _, clock in sim.log:
        if kind == "recv":
            recvs[g].append(clock)
    for t in ahead:  # it ran as soon as the group's previous trial ended
        assert runs[(t.group, t.trial)] in recvs[t.group]


def test_sending_ahead_only_where_it_pays(cfg):
    # a coordinator that serves every group in far less than 1% of a trial sends nothing ahead: one
    # group searching alone must see each result before choosing the next point
    sim = MailboxSim(1, lambda g, k: 1.0)
    s = run_sim(cfg("{initial_points: 3, trials: 8, seed: 0}"), sim, worth=SendAhead().worth)
    assert s.sent_ahead == 0 and len(s.trials) == 8
    sim = MailboxSim(2, lambda g, k: 0.01)  # trials of 10 ms: not sent ahead either
    s = run_sim(cfg("{initial_points: 3, trials: 12, seed: 0}"), sim)
    assert s.sent_ahead == 0 and len(s.trials) == 12


def test_a_searchers_deliberate_wait_does_not_count_as_the_coordinators_work(cfg):
    """With long trials a hand-out may wait on purpose for a model that knows the latest result
    (bounded by the searcher); sending ahead, which exists to hide the coordinator's own work,
    must not start because of it: a trial sent ahead would not know that result either."""
    c = cfg("{initial_points: 3, trials: 12, seed: 0}")
    sim = MailboxSim(3, lambda g, k: 1.0 + 0.01 * g)
    searcher = make_searcher(c.space, c.search)
    ask = searcher.ask

    def waiting_ask(n):
        sim.clock += 0.2  # a fifth of a trial, waited for a round, per hand-out
        searcher.ask_wait_s = 0.2
        return ask(n)

    searcher.ask = waiting_ask
    s = Coordinator(c, searcher, sim, clock=lambda: sim.clock).run()
    assert len(s.trials) == 12 and s.sent_ahead == 0
    # the same time spent by the coordinator itself (no deliberate wait reported): sent ahead
    sim = MailboxSim(3, lambda g, k: 1.0 + 0.01 * g)
    searcher = slow_asks(make_searcher(c.space, c.search), sim, 0.2)
    s = Coordinator(c, searcher, sim, clock=lambda: sim.clock).run()
    assert len(s.trials) == 12 and s.sent_ahead > 0


@pytest.mark.parametrize("fresh", [True, False])
def test_a_searcher_that_waits_for_fresh_models_gets_a_whole_burst_of_results_first(cfg, fresh):
    """Groups with trials of equal length finish together. When the searcher will wait for a model
    that knows the latest results (long trials), the coordinator takes in every result already
    waiting before it hands out: one model serves the whole burst, instead of one per group."""
    c = cfg("{initial_points: 3, trials: 15, seed: 0}")
    sim = MailboxSim(3, lambda g, k: 1.0)
    searcher = make_searcher(c.space, c.search)
    searcher.prefers_fresh = lambda: fresh
    s = Coordinator(c, searcher, sim, clock=lambda: sim.clock).run()
    assert sorted(s.trials) == list(range(15)) and all(t.status == TrialStatus.COMPLETED for t in s.trials.values())
    kinds = "".join(kind[0] for kind, *_ in sim.log if kind in ("send", "recv"))
    assert kinds.startswith("sss")
    if fresh:  # each burst of three results is taken in whole, then three hand-outs
        assert kinds == "sss" + "rrrsss" * 4 + "rrr"
    else:  # each result is answered before the next is taken in
        assert "rsrsrs" in kinds


def test_nothing_is_sent_ahead_to_a_searcher_that_waits_for_fresh_models(cfg):
    # a trial sent ahead cannot know the result its group is about to report, which is what such a
    # searcher waits for (the two rules' ranges of trial lengths do not overlap with the defaults)
    c = cfg("{initial_points: 3, trials: 12, seed: 0}")
    for fresh in (True, False):
        sim = MailboxSim(3, lambda g, k: 1.0 + 0.01 * g)
        searcher = make_searcher(c.space, c.search)
        searcher.prefers_fresh = lambda fresh=fresh: fresh
        # sending ahead would pay whatever the speed
        s = Coordinator(c, searcher, sim, clock=lambda sim=sim: sim.clock, send_ahead=SendAhead(worth=-1.0)).run()
        assert len(s.trials) == 12 and (s.sent_ahead == 0) == fresh


def test_a_trial_held_by_a_lost_group_runs_elsewhere_once(cfg, write_yaml):
    c = load_config(write_yaml("""
        objective: {function: objectives.py:branin}
        parameters: {x: {type: real, low: -5.0, high: 10.0}, y: {type: real, low: 0.0, high: 15.0}}
        search: {initial_points: 3, trials: 12, seed: 0, grace_period: 0.5}
        training: {time_limit: 1.5}
    """))
    # group 1's third trial never ends: it holds the trial sent ahead to it, which must run elsewhere
    sim = MailboxSim(2, lambda g, k: math.inf if (g, k) == (1, 2) else 1.0)
    s = run_sim(c, sim)
    assert s.retired == [1]
    assert sorted(s.trials) == list(range(12))
    timeouts = [t for t in s.trials.values() if t.status == TrialStatus.TIMEOUT]
    assert len(timeouts) == 1 and timeouts[0].group == 1
    held = [n for kind, g, n, _ in sim.log if kind == "send" and g == 1][-1]
    assert held != timeouts[0].trial and sim.mailbox[1] and sim.mailbox[1][0].trial == held
    assert s.trials[held].status == TrialStatus.COMPLETED and s.trials[held].group == 0
    assert sum(t.status == TrialStatus.COMPLETED for t in s.trials.values()) == 11


def test_a_late_group_runs_the_trial_it_held_and_that_result_is_ignored(cfg, write_yaml):
    c = load_config(write_yaml("""
        objective: {function: objectives.py:branin}
        parameters: {x: {type: real, low: -5.0, high: 10.0}, y: {type: real, low: 0.0, high: 15.0}}
        search: {initial_points: 3, trials: 16, seed: 0, grace_period: 0.5}
        training: {time_limit: 1.5}
    """))
    # group 1's second trial takes 3 s (retired at 2 s); it comes back, runs the trial it held, then works again
    sim = MailboxSim(2, lambda g, k: 3.0 if (g, k) == (1, 1) else 1.0)
    s = run_sim(c, sim)
    assert s.retired == [] and s.stopped is None
    assert sorted(s.trials) == list(range(16))
    recv = [(g, n) for kind, g, n, _ in sim.log if kind == "recv"]
    twice = [n for n in {n for _, n in recv} if sum(1 for _, m in recv if m == n) == 2]
    assert len(twice) == 1  # the held trial ran on both groups, and was recorded once, from group 0
    assert s.trials[twice[0]].group == 0 and s.trials[twice[0]].status == TrialStatus.COMPLETED
    assert sum(t.status == TrialStatus.TIMEOUT for t in s.trials.values()) == 1
    late = [n for kind, g, n, _ in sim.log if kind == "run" and g == 1]
    assert len(late) > 3  # group 1 got new trials after it came back


def test_a_target_reached_with_trials_sent_ahead_runs_them_and_records_them(cfg):
    sim = MailboxSim(4, lambda g, k: 1.0 + 0.002 * g)
    c = cfg("{initial_points: 5, trials: 60, seed: 0, target: 5.0}")
    s = run_sim(c, sim)
    assert s.target_reached and len(s.trials) < 60 and s.sent_ahead > 0
    # every trial sent (ahead or not) ran and was recorded; nothing was left in a mailbox
    sent = [n for kind, _, n, _ in sim.log if kind == "send"]
    assert sorted(sent) == sorted(s.trials) and not any(sim.mailbox)
    assert all(t.status == TrialStatus.COMPLETED for t in s.trials.values())


def test_trials_sent_ahead_when_the_search_dies_run_again_on_resume(cfg, tmp_path):
    from mpiopt.journal import read_journal, replay

    class Killed(Exception):
        pass

    class Dying(MailboxSim):  # the job dies while some groups hold a trial sent ahead
        def recv_message(self, timeout=None):
            if sum(1 for k, *_ in self.log if k == "recv") >= 12 and any(self.mailbox):
                raise Killed
            return super().recv_message(timeout)

    c = cfg("{initial_points: 5, trials: 30, seed: 0}")
    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text="name: t\n")
    sim = Dying(3, lambda g, k: 1.0 + 0.002 * g)
    with pytest.raises(Killed):
        Coordinator(c, make_searcher(c.space, c.search), sim, rd, clock=lambda: sim.clock,
                    send_ahead=SendAhead(worth=-1.0)).run()
    held = {box[0].trial: box[0].params for box in sim.mailbox if box}
    assert held
    rd.close()
    events, _ = read_journal(tmp_path / "run" / "trials.jsonl")
    before = replay(events)
    assert all(before[n].status == TrialStatus.RUNNING and before[n].params == p for n, p in held.items())
    done_before = {n: t.objective for n, t in before.items() if t.status == TrialStatus.COMPLETED}

    rd = RunDir(tmp_path / "run")
    rd.open(resume=True, config_text="name: t\n")
    again = MailboxSim(3, lambda g, k: 1.0)
    s = Coordinator(c, make_searcher(c.space, c.search), again, rd, before, clock=lambda: again.clock).run()
    rd.close()
    assert sorted(s.trials) == list(range(30)) and all(t.status == TrialStatus.COMPLETED for t in s.trials.values())
    rerun = [n for kind, _, n, _ in again.log if kind == "send"]
    assert set(held) <= set(rerun) and not set(done_before) & set(rerun)
    assert all(s.trials[n].params == p for n, p in held.items())
    assert all(s.trials[n].objective == y for n, y in done_before.items())
    events, _ = read_journal(tmp_path / "run" / "trials.jsonl")
    finishes = [e["trial"] for e in events if e.get("event") == "finish"]
    assert sorted(finishes) == list(range(30))  # each trial finished once, across both runs


class HoldingSearch(RandomSearch):
    """Holds new trials back (as a searcher waiting for a model round would) until `until` on the
    transport's clock, and records each look's `may_hold`."""

    def __init__(self, space, transport, until):
        super().__init__(space, seed=0)
        self.transport, self.until = transport, until
        self.looks: list[tuple[float, bool]] = []

    def holds_hand_outs(self, may_hold):
        self.looks.append((self.transport.clock, may_hold))
        return may_hold and self.transport.clock < self.until


def test_a_searcher_holds_at_most_a_few_groups_and_its_hold_is_not_dispatch_time(cfg):
    t = SimTransport([1.0] * 8)
    searcher = HoldingSearch(cfg().space, t, until=1.5)
    s = Coordinator(cfg(), searcher, t, clock=lambda: t.clock).run()
    assert sorted(s.trials) == list(range(20))
    first_wave = [may for at, may in searcher.looks if at == 0.0]
    # the first group runs (none ran: nothing to answer while holding), the next HOLD_MAX_GROUPS
    # are held, the rest go ahead
    held_groups = range(1, 1 + HOLD_MAX_GROUPS)
    assert first_wave == [True] * HOLD_MAX_GROUPS + [False] * (7 - HOLD_MAX_GROUPS)
    started_at_0 = [r for r in s.trials.values() if r.trial < 8 - HOLD_MAX_GROUPS]
    assert {r.group for r in started_at_0}.isdisjoint(held_groups) and all(r.dispatch_s == 0.0 for r in started_at_0)
    # the held groups: free from 0, held at the looks at 0 and 1.0, given a trial at 2.0 (the next
    # message after the hold): 1.0 of their 2.0 was the searcher's hold
    first_of_held = [min((r for r in s.trials.values() if r.group == g), key=lambda r: r.trial) for g in held_groups]
    assert [r.dispatch_s for r in first_of_held] == [1.0] * HOLD_MAX_GROUPS


class FirstRoundSearch(RandomSearch):
    """From 0.5 on the transport's clock until `until`, holds every hand-out for its model, as a
    searcher with very short trials does whatever the coordinator's hold limit; an `ask` made
    meanwhile (no group running, so the coordinator asks) waits until `until`."""

    def __init__(self, space, transport, until):
        super().__init__(space, seed=0)
        self.transport, self.until = transport, until

    def _waiting(self):
        return 0.5 <= self.transport.clock < self.until

    def holds_hand_outs(self, may_hold):
        return self._waiting()

    def ask(self, trial):
        self.ask_wait_s = 0.0
        if self._waiting():
            self.ask_wait_s = self.until - self.transport.clock
            self.transport.clock = self.until
        return super().ask(trial)


def test_while_ask_waits_for_the_model_the_other_free_groups_are_held_not_kept_waiting(cfg):
    t = SimTransport([1.0] * 4)
    s = Coordinator(cfg("{trials: 8, seed: 0}"), FirstRoundSearch(cfg().space, t, until=2.0), t,
                    clock=lambda: t.clock).run()
    # at 1.0 all four groups are free: three held, the last one's ask waits until 2.0, and then
    # the others are served at once: none of their wait was the coordinator's
    second_wave = [s.trials[n] for n in range(4, 8)]
    assert all(r.start is not None for r in second_wave)
    assert [r.dispatch_s for r in second_wave] == pytest.approx([0.0] * 4)


def sends_ahead_while_a_group_waits(sim) -> list[tuple[int, int, float]]:
    """The trials sent ahead (to a busy group) while another group sat free without a trial, from
    MailboxSim's log: (group, trial, clock) of each."""
    free, busy, out = set(range(sim.n)), set(), []
    for kind, group, trial, clock in sim.log:
        if kind == "send" and group in busy and free:
            out.append((group, trial, clock))
        elif kind == "run":
            free.discard(group)
            busy.add(group)
        elif kind == "recv":
            busy.discard(group)
            free.add(group)
    return out


def test_groups_held_for_the_model_get_their_trials_before_any_is_sent_ahead(cfg):
    """The model's round can get ready while the coordinator serves free groups: the groups it held
    back until then are waiting, and are served before running groups get a trial ahead."""
    c = cfg("{initial_points: 3, trials: 60, seed: 0}")
    sim = MailboxSim(8, lambda g, k: 1.0 + 0.01 * g)
    # a hand-out takes 30 ms, and the round gets ready while group 0, back first at 1.03, is
    # served: groups 1-4 were held
    searcher = slow_asks(HoldingSearch(c.space, sim, until=1.045), sim, 0.03)
    s = Coordinator(c, searcher, sim, clock=lambda: sim.clock, send_ahead=SendAhead(worth=-1.0)).run()
    assert sorted(s.trials) == list(range(60)) and s.sent_ahead > 0
    assert any(at < 1.045 and may for at, may in searcher.looks)  # groups were held back
    assert sends_ahead_while_a_group_waits(sim) == []


def test_groups_that_finish_together_find_their_next_trial_waiting(cfg):
    """Equal trial lengths: the groups finish together, and their results arrive while the
    coordinator is still sending the burst's trials ahead. It goes on sending, instead of taking
    in the results first, so that each group waits for the hand-outs before its own only."""
    c = cfg("{initial_points: 3, trials: 48, seed: 0}")
    sim = MailboxSim(8, lambda g, k: 1.0)
    searcher = slow_asks(RandomSearch(c.space, seed=0), sim, 0.01)  # the burst's sends ahead overlap its results
    s = Coordinator(c, searcher, sim, clock=lambda: sim.clock, send_ahead=SendAhead(worth=-1.0)).run()
    assert sorted(s.trials) == list(range(48))
    # the first wave goes out with no result; once the first result gives a trial's length, nearly
    # every trial is sent ahead (taking in each waiting result first sends 32: none of the second wave)
    assert s.sent_ahead >= 48 - 8 - 2


def test_dispatch_stats_count_the_first_wave_and_the_trials_sent_ahead_apart_from_the_latency():
    from mpiopt.coordinator import dispatch_stats

    line = dispatch_stats([-0.2, -0.1, 0.002, 0.004], first_wave=[0.03, 0.05])
    assert line.startswith("6 trials dispatched (2 in the first wave (the last 50.0 ms after the start), "
                           "2 sent ahead, before the group finished, 2 after a result): 3.00 ms mean")
    assert dispatch_stats([], first_wave=[0.01]) == \
        "1 trial dispatched (1 in the first wave (the last 10.0 ms after the start), 0 after a result)"
    assert dispatch_stats([]) == "no trial dispatched"


def test_a_lost_groups_trials_are_said_to_run_again_where_they_will():
    from mpiopt.coordinator import _runs_again

    assert _runs_again([7], 2) == "trial 7 runs again on another group"
    assert _runs_again([14, 23], 1) == "trials 14, 23 run again on another group"
    assert _runs_again([11], 0) == "trial 11 runs again on --resume"

"""Searches under a scheduler, in one process: pause and promote, pruning, a kill and --resume.

`CurveGroups` stands in for groups that train: each trial reports one epoch after another (a
learning curve that falls towards the trial's Branin value), waits for the scheduler at its
decision epochs, and goes on from the epoch it paused at when it is promoted, as a checkpoint
would let it.
"""
from __future__ import annotations

import json
import math
import re
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import mpiopt

from test_coordinator import branin

from mpiopt.analysis import best_trials, judged_column, timeline
from mpiopt.config import load_config
from mpiopt.coordinator import Coordinator
from mpiopt.journal import RunDir, replay
from mpiopt.scheduler import make_scheduler
from mpiopt.search import RungModel, make_searcher
from mpiopt.status import status_text
from mpiopt.trial import Report, TrialResult, TrialStatus

EPOCHS = 9
CONFIG = "name: t\n"


class Killed(Exception):
    """The job is killed (kill -9): the coordinator dies mid-search."""


class CurveGroups:
    """Groups in this process whose trials report a learning curve epoch by epoch."""

    queues_tasks = False

    def __init__(self, n_groups: int, kill_after: int | None = None, done_epochs: dict[int, int] | None = None,
                 fail_from: int | None = None, kill_at_pause: int | None = None, saved_before_kill: bool = False,
                 ranks: list[int] | None = None, lose_at_pause: int | None = None, kill_at_stop: int | None = None,
                 lose_at_stop: int | None = None):
        self.n = n_groups
        self.ranks = ranks or [1] * n_groups
        self.lose_at_pause = lose_at_pause  # the pause decision whose group's node dies before it reports back
        self.lost = {}
        self.watch_s = None if lose_at_pause is None and lose_at_stop is None else 0.0
        self.fail_from = fail_from  # trials numbered from here on fail in their second epoch
        self.queue = []
        self.on_report = None
        self.kill_after = kill_after  # reports until the kill
        self.reports = 0
        self.done = dict(done_epochs or {})  # trial -> epochs trained (its checkpoint)
        self.kill_at_pause = kill_at_pause  # the pause decision whose group is killed before it reports back
        self.pauses = 0
        self.saved_before_kill = saved_before_kill  # the kill comes after the epoch's checkpoint, before its report
        self.kill_at_stop, self.lose_at_stop = kill_at_stop, lose_at_stop  # as at a pause, at the stop decision
        self.stops = 0

    @property
    def n_groups(self):
        return self.n

    def group_ranks(self, group):
        return self.ranks[group]

    def lost_groups(self):
        return {group: (why, 8.0) for group, why in self.lost.items()}

    def send_task(self, group, task):
        self.queue.append((group, task))

    def has_result(self):
        return False

    def listen(self, on_report):
        self.on_report = on_report

    def send_decision(self, group, decision):
        raise AssertionError("decisions come back from the report's call in one process")

    def recv_message(self, timeout=None):
        group, task = self.queue.pop(0)
        final = branin(task.params)
        # an epoch takes 1 s: a stretch 1-2 s on the group's clock, and the epochs before it carried over
        carried = {"start": 1.0, "end": 2.0, "resumed_s": float(self.done.get(task.trial, 0)) or None,
                   "wait_s": 0.004}
        checkpoint = self.done.get(task.trial, 0)
        # as training does, a checkpoint's epochs past those the search recorded are reported again
        for epoch in range(min(task.reported, checkpoint) + 1, EPOCHS + 1):
            trained = epoch > checkpoint
            if trained and self.fail_from is not None and task.trial >= self.fail_from and epoch == 2:
                return group, TrialResult(trial=task.trial, status=TrialStatus.FAILED, error="OSError: disk gone",
                                          epochs=1, start=1.0, end=2.0)
            if trained:
                self.reports += 1
            if trained and self.kill_after is not None and self.reports > self.kill_after:
                if self.saved_before_kill:
                    self.done[task.trial] = epoch
                raise Killed
            value = final + 30.0 / epoch
            self.done[task.trial] = max(epoch, checkpoint)
            decision = self.on_report(group, Report(task.trial, epoch, {"objective": value},
                                                    decide=epoch in task.decide_at))
            if decision == "pause":
                self.pauses += 1
                if self.pauses == self.kill_at_pause:
                    raise Killed
                if self.pauses == self.lose_at_pause:  # the other groups' results come in meanwhile
                    self.lost[group] = "its node died"
                    return self.recv_message(timeout)
                return group, TrialResult(trial=task.trial, status=TrialStatus.PAUSED, epochs=epoch,
                                          metrics={"objective": value}, **carried)
            if decision == "stop":
                self.stops += 1
                if self.stops == self.kill_at_stop:
                    raise Killed
                if self.stops == self.lose_at_stop:
                    self.lost[group] = "its node died"
                    return self.recv_message(timeout)
                return group, TrialResult(trial=task.trial, status=TrialStatus.PRUNED, epochs=epoch,
                                          metrics={"objective": value}, **carried)
        return group, TrialResult(trial=task.trial, objective=value, metrics={"objective": value}, epochs=EPOCHS,
                                  **carried)

    def shutdown(self):
        pass


@pytest.fixture
def cfg(write_yaml):
    return load_config(write_yaml(f"""
        objective: {{function: objectives.py:branin}}
        parameters: {{x: {{type: real, low: -5.0, high: 10.0}}, y: {{type: real, low: 0.0, high: 15.0}}}}
        search: {{initial_points: 4, trials: 24, seed: 1, scheduler: asha}}
        training: {{epochs: {EPOCHS}}}
    """), resolve=False)  # the groups here are simulated: branin is never called


def scheduler(name="asha"):
    return make_scheduler(name, epochs=EPOCHS, min_epochs=1, reduction_factor=3, pausable=True)


def searcher(cfg):
    """As `mpiopt search` builds it for a scheduler (cli._make_searcher)."""
    return RungModel(lambda: make_searcher(cfg.space, cfg.search), cfg.space, top=EPOCHS, enough=4)


def run(cfg, path, groups, *, resume=False, name="asha", sched=None):
    rd = RunDir(path)
    rd.open(resume=resume, config_text=CONFIG)
    trials, _ = rd.load()
    coordinator = Coordinator(cfg, searcher(cfg), groups, rd, trials, scheduler=sched or scheduler(name),
                              history=rd.events()[0])
    try:
        return coordinator, coordinator.run()
    finally:
        rd.close()


def journal(path):
    return [json.loads(line) for line in (path / "trials.jsonl").read_text().splitlines()]


def test_asha_pauses_promotes_and_prunes_within_the_budget(cfg, tmp_path):
    coordinator, summary = run(cfg, tmp_path / "run", CurveGroups(3))
    statuses = [t.status for t in summary.trials.values()]
    assert len(statuses) == 24 and set(statuses) == {TrialStatus.COMPLETED, TrialStatus.PRUNED}
    events = journal(tmp_path / "run")
    assert any(e.get("status") == "paused" for e in events) and any(e.get("promoted") for e in events)
    for t in summary.trials.values():
        if t.status == TrialStatus.COMPLETED:
            assert t.epochs == EPOCHS and t.rung == EPOCHS
        else:  # stopped at a rung below the top, and judged there
            assert t.rung in (1, 3) and t.epochs == t.rung
    # each epoch of each trial was trained once: promoted trials went on from their rung
    reported = [(e["trial"], e["epoch"]) for e in events if e["event"] == "report"]
    assert len(reported) == len(set(reported))
    # the time trained counts every stretch: those pruned at the end, unpromoted from a higher rung, too
    promoted = {e["trial"] for e in events if e.get("promoted")}
    for t in summary.trials.values():
        assert t.duration_s == 1.0 + (t.resumed_s or 0.0) and (t.trial not in promoted or t.resumed_s), t
        assert t.wait_s == 0.004, t  # the group's wait for its last stretch, kept by a prune at the end
    assert "rung 3" in coordinator.searcher.report() or "rung 9" in coordinator.searcher.report()


def test_a_trials_checkpoint_goes_once_the_journal_holds_its_result(cfg, tmp_path):
    # the group leaves it in place: a kill before the result's record continues the trial from it,
    # where it ended, instead of training it again from the start. A failed trial keeps its own.
    class CheckpointingGroups(CurveGroups):
        def send_task(self, group, task):
            for folder in (Path(task.trial_dir), Path(task.trial_dir) / "fold_2"):  # a k-fold fold's too
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "checkpoint.npz").write_bytes(b"weights")
            super().send_task(group, task)

    def kept():
        return {int(p.parts[-2 if p.parent.name.isdigit() else -3])
                for p in (tmp_path / "run" / "trials").rglob("checkpoint.npz")}

    cfg = replace(cfg, objective=replace(cfg.objective, kind="model"))  # only a model's trials have checkpoints
    _, summary = run(cfg.with_search(trials=12), tmp_path / "run", CheckpointingGroups(3, fail_from=6))
    failed = {n for n, t in summary.trials.items() if t.status == TrialStatus.FAILED}
    assert failed and kept() == failed
    assert {t.status for n, t in summary.trials.items() if n not in failed} == {TrialStatus.COMPLETED,
                                                                                   TrialStatus.PRUNED}
    # a kill between a result's record and the deletion leaves one: the next run sweeps it
    done = min(n for n in summary.trials if n not in failed)
    (tmp_path / "run" / "trials" / str(done) / "checkpoint.npz").write_bytes(b"weights")
    run(cfg.with_search(trials=13), tmp_path / "run", CheckpointingGroups(3, fail_from=6), resume=True)
    assert done not in kept()


@pytest.mark.parametrize("trials, groups", [(4, 1), (5, 2), (12, 4)])
def test_a_small_budget_still_trains_its_best_trials_to_the_end(cfg, tmp_path, trials, groups):
    # too few trials for floor(n / 3) to promote anyone to the top: once the budget is spent, every
    # rung promotes its best ceil(n / 3), so the search ends with a fully trained best trial
    _, summary = run(cfg.with_search(trials=trials), tmp_path / "run", CurveGroups(groups))
    done = [t for t in summary.trials.values() if t.status == TrialStatus.COMPLETED]
    assert done and all(t.epochs == EPOCHS for t in done)
    assert len(done) <= math.ceil(trials / 3)
    best_at_1 = min(summary.trials.values(), key=lambda t: branin(t.params))
    assert best_at_1 in done  # the curves keep their order: the best at rung 1 is the best at the top


def test_a_killed_scheduled_search_replays_and_resumes_without_losing_or_repeating(cfg, tmp_path, caplog):
    path = tmp_path / "run"
    groups = CurveGroups(3, kill_after=50)
    live = scheduler()
    with pytest.raises(Killed):
        run(cfg, path, groups, sched=live)
    before = journal(path)
    assert live.paused(), "the kill came while trials were paused"
    # replaying the journal gives the scheduler the state the live search had when it was killed
    rd = RunDir(path)
    rd.open(resume=True, config_text=CONFIG)
    trials, _ = rd.load()
    rd.close()
    again, model = scheduler(), searcher(cfg)
    resumed = Coordinator(cfg, model, CurveGroups(3), None, trials, scheduler=again, history=before)
    assert again.paused() == live.paused() and again.promotable() == live.promotable()
    resumed._begin_search()  # the searcher knows the paused trials' points, to propose none again
    paused = set(live.paused())
    assert set(model.aside) == paused  # and its model, fitted on one rung, has each as a result there or aside
    assert paused <= set(model.inner.aside) | set(model.inner.observed)
    for n in trials:
        assert again.rung(n) == live.rung(n)
    for e in (1, 3, 9):
        assert again.rung_results(e) == live.rung_results(e)
    # what `mpiopt results` and `mpiopt status` show is what --resume will do: paused trials
    # (including one whose group was cut off before it reported its pause) and interrupted ones
    shown = {n: t.shown_status(live=False) for n, t in trials.items()}
    assert {n for n, s in shown.items() if s == TrialStatus.PAUSED} == set(live.paused())
    assert all(s != TrialStatus.RUNNING for s in shown.values())
    # and the journal alone (what the table of a killed search shows) says the rung each was
    # judged at, paused or cut off training on past it
    table = replay(before)
    assert all(table[n].rung == live.rung(n) for n in trials)
    assert any(s == TrialStatus.INTERRUPTED and table[n].rung for n, s in shown.items())

    with caplog.at_level("INFO", logger="mpiopt"):
        _, summary = run(cfg, path, CurveGroups(3, done_epochs=groups.done), resume=True)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resuming:")]
    assert said and f"{len(live.paused())} paused trials waiting for a promotion" in said[0]
    assert len(summary.trials) == 24 and all(t.status.is_finished() for t in summary.trials.values())
    events = journal(path)
    reported = [(e["trial"], e["epoch"]) for e in events if e["event"] == "report"]
    # at most the epoch cut off by the kill is reported twice (re-trained from the checkpoint)
    assert len(reported) - len(set(reported)) <= 3
    promotions = [(e["trial"], e.get("group")) for e in events if e.get("promoted")]
    by_trial = {}
    for n, _ in promotions:
        by_trial[n] = by_trial.get(n, 0) + 1
    assert max(by_trial.values()) <= 2  # rungs 1 and 3 below the top: never promoted twice from one
    # and no new trial is handed the point of one that waits paused, before the kill or after
    points = {n: (e["params"]["x"], e["params"]["y"]) for e in events if e["event"] == "start" for n in [e["trial"]]}
    assert len(set(points.values())) == len(points) == 24


@pytest.mark.parametrize("kill_after", [50, 51, 52, 53])
def test_a_kill_between_a_checkpoint_and_its_report_leaves_no_epoch_unjudged(cfg, tmp_path, kill_after):
    path = tmp_path / "run"
    groups = CurveGroups(3, kill_after=kill_after, saved_before_kill=True)
    with pytest.raises(Killed):
        run(cfg, path, groups)
    recorded = {}
    for e in journal(path):
        if e["event"] == "report":
            recorded[e["trial"]] = max(recorded.get(e["trial"], 0), e["epoch"])
    assert any(groups.done[n] > recorded.get(n, 0) for n in groups.done), "a checkpoint is ahead of the journal"
    run(cfg, path, CurveGroups(3, done_epochs=groups.done), resume=True)
    reports = [(e["trial"], e["epoch"]) for e in journal(path) if e["event"] == "report"]
    assert len(reports) == len(set(reports))  # nothing judged twice (a promotion reports on from its rung)
    epochs = {}
    for n, e in reports:
        epochs.setdefault(n, set()).add(e)
    for n, seen in epochs.items():  # every trial's curve whole, so each rung it reached was judged
        assert seen == set(range(1, max(seen) + 1)), (n, sorted(seen))


def test_an_epoch_trained_again_after_a_kill_counts_once_in_the_epochs_trained(cfg, tmp_path):
    path = tmp_path / "run"
    groups = CurveGroups(3, kill_after=50)
    with pytest.raises(Killed):
        run(cfg, path, groups)
    events = journal(path)
    ended = {e["trial"] for e in events if e["event"] == "finish"}
    cut_off = {e["trial"] for e in events if e["event"] == "report"} - ended
    assert cut_off, "the kill came while trials were training"
    # their checkpoints are an epoch behind their last report: that epoch is trained again
    checkpoints = {n: e - 1 if n in cut_off else e for n, e in groups.done.items()}
    coordinator, _ = run(cfg, path, CurveGroups(3, done_epochs=checkpoints), resume=True)
    reports = [(e["trial"], e["epoch"]) for e in journal(path) if e["event"] == "report"]
    assert len(reports) - len(set(reports)) >= len(cut_off)
    assert coordinator._epochs == len(set(reports))


def test_a_trial_paused_as_the_search_is_killed_shows_as_paused_as_resume_keeps_it(cfg, tmp_path, caplog):
    path = tmp_path / "run"
    live = scheduler()
    with pytest.raises(Killed):
        run(cfg, path, CurveGroups(3, kill_at_pause=4), sched=live)
    rd = RunDir(path)
    rd.open(resume=True, config_text=CONFIG)
    trials, _ = rd.load()
    rd.close()
    cut_off = [n for n in live.paused() if trials[n].status == TrialStatus.RUNNING]
    assert len(cut_off) == 1  # the scheduler paused it and the journal says so; its group never did
    shown = {n: t.shown_status(live=False) for n, t in trials.items()}
    assert {n for n, s in shown.items() if s == TrialStatus.PAUSED} == set(live.paused())
    interrupted = {n for n, s in shown.items() if s == TrialStatus.INTERRUPTED}
    beat = path / "heartbeat.json"  # as a killed coordinator leaves it: long silent
    beat.write_text(json.dumps({**json.loads(beat.read_text()), "time": 0.0}))
    gone = subprocess.Popen(["true"])  # and its lock names a process that is gone
    gone.wait()
    (path / ".lock").write_text(f"pid {gone.pid} on {socket.gethostname()} since 2026-01-01T00:00:00+00:00\n")
    counts = status_text(str(path)).splitlines()[1]
    assert f"{len(interrupted)} interrupted (run again on --resume), {len(live.paused())} paused" in counts

    pause_report = next(e for e in reversed(journal(path)) if e.get("trial") == cut_off[0] and e["event"] == "report")
    assert pause_report["decision"] == "pause"

    with caplog.at_level("INFO", logger="mpiopt"):
        run(cfg, path, CurveGroups(3), resume=True)
    said = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("resuming:"))
    assert f"{len(live.paused())} paused trials waiting for a promotion" in said
    assert f"{len(interrupted)} interrupted trials to run again" in said
    # it is paused with that epoch's metrics, and its stretch ends there, not at the resume
    paused = next(e for e in journal(path) if e.get("trial") == cut_off[0] and e.get("status") == "paused")
    assert paused["metrics"] == pause_report["metrics"] and paused["metrics"]
    assert paused["end"] == pause_report["time"] and paused["epochs"] == pause_report["epoch"]


def test_a_trial_paused_as_its_group_is_lost_stays_paused_and_is_not_run_again(cfg, tmp_path, caplog):
    path = tmp_path / "run"
    live = scheduler()
    with caplog.at_level("WARNING", logger="mpiopt"):
        _, summary = run(cfg, path, CurveGroups(3, lose_at_pause=4), sched=live)
    assert len(summary.lost) == 1
    said = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    cut = int(re.search(r"trial (\d+) stays paused at its rung", said[0]).group(1))
    events = [e for e in journal(path) if e.get("trial") == cut]
    paused_at = next(i for i, e in enumerate(events) if e.get("status") == "paused")
    # it ran on only when the rungs promoted it, from its rung's checkpoint
    assert all(e.get("promoted") for e in events[paused_at:] if e["event"] == "start")
    assert all(e["epoch"] > events[paused_at]["epochs"] for e in events[paused_at:] if e["event"] == "report")
    # the journal says when the group was lost: the timeline counts it only while it lived
    stretches = mpiopt.load_timeline(path)
    assert list(stretches.attrs["lost"]) == summary.lost and timeline(stretches)[1]["lost"] == summary.lost


def test_a_trial_stopped_as_the_search_is_killed_is_pruned_on_resume_not_run_again(cfg, tmp_path, caplog):
    path = tmp_path / "run"
    with pytest.raises(Killed):
        run(cfg, path, CurveGroups(3, kill_at_stop=2), name="median")
    before = journal(path)
    ended = {e["trial"] for e in before if e["event"] == "finish"}
    stopped, epoch = next((e["trial"], e["epoch"]) for e in reversed(before) if e["event"] == "report")
    assert stopped not in ended  # the rule stopped it at this report; its group never said so
    # the journal alone says so: what a killed search's table and status show is what --resume does
    assert [e.get("decision") for e in before if e["event"] == "report" and e["trial"] == stopped][-1] == "stop"
    assert replay(before)[stopped].shown_status(live=False) == TrialStatus.PRUNED

    with caplog.at_level("INFO", logger="mpiopt"):
        _, summary = run(cfg, path, CurveGroups(3), resume=True, name="median")
    said = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("resuming:"))
    again = re.search(r"to run again \(([\d, ]+)\)", said)
    assert again is None or stopped not in {int(n) for n in again.group(1).split(", ")}
    rec = summary.trials[stopped]
    assert (rec.status, rec.epochs) == (TrialStatus.PRUNED, epoch)
    after = journal(path)[len(before):]
    assert not [e for e in after if e.get("trial") == stopped and e["event"] in ("start", "report")]
    assert any(r.getMessage().startswith(f"trial {stopped} pruned at epoch {epoch} ") for r in caplog.records)


def test_a_trial_stopped_as_its_group_is_lost_is_pruned_not_run_again(cfg, tmp_path, caplog):
    path = tmp_path / "run"
    with caplog.at_level("WARNING", logger="mpiopt"):
        _, summary = run(cfg, path, CurveGroups(3, lose_at_stop=2), name="median")
    said = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    cut = int(re.search(r"trial (\d+) is pruned where the scheduler stopped it", said[0]).group(1))
    starts = [e for e in journal(path) if e.get("trial") == cut and e["event"] == "start"]
    assert len(starts) == 1 and summary.trials[cut].status == TrialStatus.PRUNED


def test_a_resume_on_other_group_sizes_continues_the_paused_trials_of_sizes_gone(cfg, tmp_path, caplog):
    path = tmp_path / "run"
    groups = CurveGroups(2, kill_after=40, ranks=[3, 1])  # -hosts a:2,b:3 in groups of 2
    with pytest.raises(Killed):
        run(cfg, path, groups)
    paused = {e["trial"] for e in journal(path) if e.get("status") == "paused"}
    assert paused
    with caplog.at_level("INFO", logger="mpiopt"):
        run(cfg, path, CurveGroups(2, done_epochs=groups.done, ranks=[2, 2]), resume=True)  # --np 5
    said = [m for m in (re.fullmatch(r"\d+ paused trials? \(trials? ([\d, ]+)(?: and \d+ more)?\) trained on groups "
                                     r"of 1 and 3 ranks, "
                                     r"which this job does not have: a promotion continues (it|them) on groups "
                                     r"of 2 ranks "
                                     r"\(run with the same groups to keep them alike\)", r.getMessage())
                        for r in caplog.records) if m]
    assert len(said) == 1 and {int(n) for n in said[0].group(1).split(", ")} <= paused
    promoted = {e["trial"] for e in journal(path) if e.get("promoted") and e["ranks"] == 2} & paused
    assert promoted, "the rungs' best paused trials go on (they were pruned at the end, all of them)"


def test_reaching_the_target_ends_a_scheduled_search_with_nothing_left_paused(cfg, tmp_path):
    # branin + 30 / epoch: a trial trained to the end is within 3.4 of Branin's minimum 0.4
    coordinator, summary = run(cfg.with_search(target=10.0), tmp_path / "run", CurveGroups(3))
    assert coordinator.reached_target() and len(summary.trials) < 24
    statuses = {t.status for t in summary.trials.values()}
    assert statuses <= {TrialStatus.COMPLETED, TrialStatus.PRUNED} and TrialStatus.PRUNED in statuses
    assert coordinator.scheduler.paused() == []
    # mpiopt status says why it ended before its budget, and trains nothing more
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump({"search": {"trials": 24, "scheduler": "asha"},
                                                                  "training": {"epochs": EPOCHS}}))
    text = status_text(str(tmp_path / "run"))
    assert re.search(rf": ended .* ago: search.target 10 reached \(best: trial {summary.best.trial}\)$",
                     text.splitlines()[0]), text
    assert "to go" not in text and "left" not in text


def test_max_failures_stops_a_scheduled_search_keeping_the_paused_and_a_resume_counts_anew(cfg, tmp_path, caplog):
    path = tmp_path / "run"
    coordinator, summary = run(cfg.with_search(max_failures=3), path, CurveGroups(2, fail_from=6))
    by_status = {}
    for t in summary.trials.values():
        by_status.setdefault(t.status, []).append(t.trial)
    assert len(by_status[TrialStatus.FAILED]) >= 3 and TrialStatus.RUNNING not in by_status  # running ones finish
    # the line counts the failures of the trials that were running at the stop, as the table does
    failed = len(by_status[TrialStatus.FAILED])
    assert summary.stopped.startswith(f"search stopped: {failed} trials failed")
    assert "OSError: disk gone" in summary.stopped
    assert json.loads((path / "heartbeat.json").read_text())["stopped"] == summary.stopped  # what status says
    # a stop is not the search's end: its paused trials wait for the --resume that follows a fix
    paused = coordinator.scheduler.paused()
    assert paused and sorted(paused) == sorted(by_status[TrialStatus.PAUSED])
    assert TrialStatus.PRUNED not in by_status

    with caplog.at_level("INFO", logger="mpiopt"):
        coordinator, summary = run(cfg.with_search(max_failures=3), path, CurveGroups(2), resume=True)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resuming:")]
    assert f"({failed} of them failed; search.max_failures counts the failures from now on)" in said[0], said
    assert summary.stopped is None and summary.exit_code == 0
    assert len(summary.trials) == 24 and all(t.status.is_finished() for t in summary.trials.values())
    assert any(summary.trials[n].status == TrialStatus.COMPLETED or summary.trials[n].epochs > 1 for n in paused)


def test_a_function_that_never_reports_gets_one_warning(cfg, tmp_path, caplog):
    class Silent(CurveGroups):
        def recv_message(self, timeout=None):
            group, task = self.queue.pop(0)
            value = branin(task.params)
            return group, TrialResult(trial=task.trial, objective=value, metrics={"objective": value},
                                      start=1.0, end=2.0)

    with caplog.at_level("WARNING", logger="mpiopt"):
        _, summary = run(cfg.with_search(trials=6), tmp_path / "run", Silent(2))
    assert {t.status for t in summary.trials.values()} == {TrialStatus.COMPLETED}
    warnings = [r.getMessage() for r in caplog.records if "without reporting a step" in r.getMessage()]
    assert len(warnings) == 1 and "objectives.py:branin must call trial.report(step, ...)" in warnings[0]


def test_a_function_whose_steps_skip_the_rungs_gets_one_warning(cfg, tmp_path, caplog):
    class EvenSteps(CurveGroups):
        def recv_message(self, timeout=None):
            group, task = self.queue.pop(0)
            value = branin(task.params)
            for step in (2, 4, 6, 8):
                self.on_report(group, Report(task.trial, step, {"objective": value}, decide=step in task.decide_at))
            return group, TrialResult(trial=task.trial, objective=value, metrics={"objective": value}, epochs=8,
                                      start=1.0, end=2.0)

    with caplog.at_level("WARNING", logger="mpiopt"):
        run(cfg.with_search(trials=4), tmp_path / "run", EvenSteps(2))
    warnings = [r.getMessage() for r in caplog.records if "judges only the steps reported" in r.getMessage()]
    assert warnings == ["trial 0 reported step 2 first, past step 1 where search.scheduler asha judges a trial: it "
                        "judges only the steps reported, so objectives.py:branin must report every step (or at "
                        "least steps 1, 3)"]


def test_the_median_rule_prunes_trials_worse_than_the_median(cfg, tmp_path):
    _, summary = run(cfg, tmp_path / "run", CurveGroups(2), name="median")
    pruned = [t for t in summary.trials.values() if t.status == TrialStatus.PRUNED]
    assert pruned and all(t.epochs < EPOCHS for t in pruned)
    assert not any(e.get("status") == "paused" for e in journal(tmp_path / "run"))
    assert all(math.isfinite(t.objective) for t in summary.trials.values() if t.status == TrialStatus.COMPLETED)


def test_load_history_and_the_rung_column(cfg, tmp_path):
    import mpiopt

    run(cfg, tmp_path / "run", CurveGroups(2))
    rd = RunDir(tmp_path / "run")
    rd.write_results(rd.load()[0].values(), ["x", "y"], live=False)
    history = mpiopt.load_history(tmp_path / "run")
    assert list(history.columns[:2]) == ["trial", "epoch"] and "objective" in history
    assert history.groupby("trial").epoch.max().max() == EPOCHS
    df = mpiopt.load_results(tmp_path / "run")
    assert set(df.status) == {"completed", "pruned"} and df.rung.notna().all()
    # the function reports its figure of merit as `objective`, the column empty unless a trial
    # completed: what it reported at the rung where it was judged has a column of its own
    at_rung = history.set_index(["trial", "epoch"]).objective
    pruned = df[df.status == "pruned"].set_index("trial")
    assert pruned.objective.isna().all() and len(pruned)
    assert pruned.reported_objective.to_dict() == {n: at_rung[n, rung] for n, rung in pruned.rung.items()}
    completed = df[df.status == "completed"]
    assert (completed.reported_objective == completed.objective).all()
    # the best first: completed trials, then the rest by the rung each reached and the value judged there
    ranked = best_trials(df, "minimize")
    assert judged_column(df) == "reported_objective"
    assert list(ranked.status) == sorted(df.status, key=lambda s: s != "completed")
    rest = ranked[ranked.status != "completed"]
    judged = list(zip(rest.rung, rest.reported_objective, strict=True))
    assert judged == sorted(judged, key=lambda r: (-r[0], r[1]))
    shown = subprocess.run([sys.executable, "-m", "mpiopt", "results", str(tmp_path / "run")], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    assert shown[1].split()[:4] == ["trial", "status", "objective", "reported_objective"]


@pytest.mark.parametrize("search, training, message", [
    ("scheduler: asha, min_epochs: 9", "epochs: 9", r"search\.min_epochs: 9 is not below training\.epochs \(9\)"),
    ("scheduler: hyperband, reduction_factor: 1", "epochs: 9", r"search\.reduction_factor: expected an integer >= 2"),
    ("scheduler: median", "epochs: 9", r"search\.scheduler: objectives\.py:branin takes no `trial` argument"),
    ("scheduler: fifo", "epochs: 9", r"search\.scheduler"),
    ("min_epochs: 3", "epochs: 9",
     r"search\.min_epochs: 3 has no effect with scheduler: none \(it is read by asha, hyperband and median\)"),
    ("scheduler: median, reduction_factor: 4", "epochs: 9",
     r"search\.reduction_factor: 4 has no effect with scheduler: median \(it is read by asha and hyperband\)"),
    ("population: 30", "epochs: 9",
     r"search\.population: 30 has no effect with algorithm: bayesian \(it is read by evolution\)"),
    ("algorithm: random, sample: 3", "epochs: 9",
     r"search\.sample: 3 has no effect with algorithm: random \(it is read by evolution\)"),
    ("trials: 3", "epochs: 9", r"training\.epochs: has no effect on a `function` objective without search\.scheduler"),
    ("scheduler: none", "tensorboard: true",
     r"training\.tensorboard: shapes a `model` objective's training, and has no effect on a `function`; "
     r"a function's trials read group_size, ranks_per_gpu, time_limit$"),
    ("scheduler: none", "early_stopping: {monitor: objective}", r"training\.early_stopping: shapes a `model`"),
])
def test_bad_scheduler_settings_are_one_line_errors(write_yaml, search, training, message):
    from mpiopt._errors import ConfigError

    with pytest.raises(ConfigError, match=message) as info:
        load_config(write_yaml(f"""
            objective: {{function: objectives.py:branin}}
            parameters: {{x: {{type: real, low: -5.0, high: 10.0}}, y: {{type: real, low: 0.0, high: 15.0}}}}
            search: {{{search}}}
            training: {{{training}}}
        """))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("scheduler, what", [("asha", "rungs climb"), ("hyperband", "rungs climb"),
                                              ("median", "rule judges each epoch up")])
def test_epochs_searched_under_a_scheduler_is_refused(write_yaml, scheduler, what):
    from mpiopt._errors import ConfigError

    text = """
        objective: {model: m.py:build, data: m.py:load}
        parameters: {epochs: {type: integer, low: 3, high: 9}, units: {type: integer, low: 2, high: 8}}
        search: {scheduler: %s}
    """
    with pytest.raises(ConfigError, match=rf"parameters\.epochs: the {scheduler} scheduler's {what} to "
                       r"training\.epochs \(10\), so epochs cannot be searched as well") as info:
        load_config(write_yaml(text % scheduler), resolve=False)
    assert "\n" not in str(info.value)
    assert load_config(write_yaml(text % "none"), resolve=False).space.names == ["epochs", "units"]


def test_status_tells_the_time_left_of_an_asha_search_from_its_epochs(cfg, tmp_path):
    path, full = tmp_path / "cut", tmp_path / "full"
    run(cfg, full, CurveGroups(3))
    with pytest.raises(Killed):  # the same search, killed after its first 30 epochs
        run(cfg, path, CurveGroups(3, kill_after=30))
    for where in (path, full):
        (where / "config.yaml").write_text(yaml.safe_dump(cfg.with_search(scheduler="asha").resolved()))
    beat = {"state": "running", "time": time.time(), "host": "elsewhere", "pid": 1}
    (path / "heartbeat.json").write_text(json.dumps(beat))
    first = min(e["time"] for e in journal(path) if e["event"] == "start")
    lines = status_text(str(path), now=first + 60).splitlines()
    # one trial of 24 finished: no time left is told from that, but from the epochs, 30 in the
    # minute since the first start
    told = [line for line in lines if "left" in line]
    assert len(told) == 1, lines
    to_go, seconds = re.fullmatch(r"epochs: 30 trained, about (\d+) to go, 30 epochs/min; about (\d+) s left",
                                  told[0]).groups()
    assert abs(int(seconds) - int(to_go) * 2) <= 1
    # the same search run to its end trained as many as that, within a quarter
    trained = len({(e["trial"], e["epoch"]) for e in journal(full) if e["event"] == "report"})
    assert abs(int(to_go) - (trained - 30)) <= 0.25 * (trained - 30), (to_go, trained)
    (full / "heartbeat.json").write_text(json.dumps({**beat, "state": "ended"}))
    # an ended search trains no more; its epoch rate is told once it ran a second or more
    began = min(e["time"] for e in journal(full) if e["event"] == "start")
    assert f"epochs: {trained} trained, {trained} epochs/min" in status_text(str(full), now=began + 60).splitlines()
    assert f"epochs: {trained} trained" in status_text(str(full), now=began + 0.5).splitlines()

"""The run directory: append-only journal, replay, torn lines, locking, the results table."""
from __future__ import annotations

import csv
import errno
import io
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from mpiopt._errors import ConfigError
from mpiopt.journal import RunDir, differences, iso, is_live, read_journal, replay, result_rows, stretch_rows
from mpiopt.trial import TrialStatus

CONFIG = "name: t\nobjective: {function: f.py:f}\nparameters: {x: {type: real, low: 0, high: 1}}\n"


def start(n, x, t=100.0):
    return {"event": "start", "trial": n, "params": {"x": x}, "group": 0, "ranks": 1, "time": t}


def finish(n, status="completed", obj=1.0, t=101.0):
    return {"event": "finish", "trial": n, "status": status, "objective": obj, "metrics": {"objective": obj},
            "epochs": None, "error": None, "start": t - 1, "end": t}


def test_append_replay_and_results(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text=CONFIG)
    for e in [start(0, 0.1), start(1, 0.2), finish(0, obj=0.5), start(2, 0.3), finish(1, "failed", None)]:
        rd.append(e)
    trials, problems = rd.load()
    assert problems == []
    assert [t.status for t in trials.values()] == [TrialStatus.COMPLETED, TrialStatus.FAILED, TrialStatus.RUNNING]
    assert trials[0].objective == 0.5 and trials[2].params == {"x": 0.3}
    rd.write_results(trials.values(), ["x"], live=False)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run" / "results.csv").read_text())))
    assert [r["status"] for r in rows] == ["completed", "failed", "interrupted"]
    assert rows[0]["params_x"] == "0.1" and rows[0]["duration_s"] == "1.0"
    assert rows[1]["objective"] == ""
    rd.close()


def report(n, epoch, paused=False):
    event = {"event": "report", "trial": n, "epoch": epoch, "metrics": {"objective": 1.0}, "time": 100.0 + epoch}
    return {**event, "decision": "pause"} if paused else event


def test_a_running_trial_the_scheduler_had_paused_shows_as_paused_once_the_search_stopped():
    events = [start(0, 0.1), report(0, 1, paused=True),  # paused at rung 1, its group cut off
              start(1, 0.2), report(1, 1),  # interrupted mid-training
              start(2, 0.3), report(2, 1, paused=True), finish(2, "paused", None),
              start(2, 0.3), report(2, 2)]  # paused, reported, then promoted and running again
    trials = replay(events)

    def shown(live):
        return [r["status"] for r in result_rows(trials.values(), ["x"], live=live)[1]]

    assert shown(live=False) == ["paused", "interrupted", "interrupted"]
    assert shown(live=True) == ["running", "running", "running"]
    # how far each got, and the rung the cut-off one was paused at, though no result says so
    rows = {r["trial"]: r for r in result_rows(trials.values(), ["x"], live=False)[1]}
    assert [(rows[n]["epochs"], rows[n]["rung"]) for n in (0, 1, 2)] == [(1, 1), (1, None), (2, 1)]
    # one that passed rung 1 and was cut off training on: its reports carry the rung it passed
    passed = replay([start(3, 0.4), {**report(3, 1), "rung": 1}, {**report(3, 2), "rung": 1}])
    assert [(r["status"], r["epochs"], r["rung"]) for r in result_rows(passed.values(), ["x"], live=False)[1]] == \
        [("interrupted", 2, 1)]


def test_a_trial_left_without_its_result_shows_the_metrics_of_its_best_report():
    def told(n, epoch, accuracy, **more):
        metrics = {"loss": epoch / 10, "val_accuracy": accuracy}
        return {"event": "report", "trial": n, "epoch": epoch, "metrics": metrics, "time": 100.0 + epoch, **more}

    paused = {**finish(2, "paused", None), "metrics": {"loss": 0.1, "val_accuracy": 0.9, "params": 10}, "epochs": 1}
    events = [start(0, 0.1), told(0, 1, 0.6), told(0, 2, 0.8), told(0, 3, 0.7),  # killed as it trained on
              start(1, 0.2), told(1, 1, 0.5), told(1, 2, 0.6, decision="pause"),  # its paused result cut off
              start(2, 0.3), told(2, 1, 0.9, decision="pause"), paused, start(2, 0.3), told(2, 2, 0.85),  # promoted
              start(3, 0.4), told(3, 1, 0.7), start(3, 0.4), told(3, 2, 0.6)]  # run again after a kill
    trials = replay(events)
    merit = ("val_accuracy", "maximize")
    rows = result_rows(trials.values(), ["x"], live=False, merit=merit)[1]
    assert [(r["status"], r["epochs"], r["val_accuracy"], r["loss"], r["params"]) for r in rows] == [
        ("interrupted", 3, 0.8, 0.2, None), ("paused", 2, 0.6, 0.2, None), ("interrupted", 2, 0.9, 0.1, 10),
        ("interrupted", 2, 0.7, 0.1, None)]
    # while the search runs, a running trial's row waits for its result
    assert [r["val_accuracy"] for r in result_rows(trials.values(), ["x"], live=True, merit=merit)[1]] == \
        [None, None, 0.9, None]


def test_a_trial_resumed_from_its_checkpoint_counts_its_earlier_training(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text=CONFIG)
    rd.append(start(0, 0.1))
    rd.append({**finish(0, obj=0.5), "resumed_s": 3.5})
    trials, _ = rd.load()
    assert trials[0].resumed_s == 3.5 and trials[0].duration_s == 4.5
    rd.write_results(trials.values(), ["x"], live=False)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run" / "results.csv").read_text())))
    assert rows[0]["duration_s"] == "4.5"
    rd.close()


def test_a_paused_and_promoted_trial_is_a_stretch_of_training_each_time_a_group_takes_it_on():
    def on(group, event):
        return {**event, "group": group}

    events = [on(0, start(0, 0.1, t=100.0)), on(1, start(1, 0.2, t=100.0)),
              {**finish(0, "paused", None, t=110.0), "epochs": 1, "start": 99.0},  # group 0 trained it 99-110
              on(0, start(2, 0.3, t=110.0)),
              {**finish(1, "paused", None, t=118.0), "epochs": 1},
              on(1, start(0, 0.1, t=119.0)),  # promoted: group 1 goes on from 119 to 140
              {**finish(0, obj=0.5, t=140.0), "epochs": 3, "start": 119.0, "resumed_s": 11.0},
              {**finish(1, "pruned", None, t=118.0), "epochs": 1}]  # pruned at the end, never promoted
    rows = stretch_rows(events, live=True)
    assert [(r["trial"], r["group"], r["status"], r["epochs"]) for r in rows] == [
        (0, 0, "paused", 1), (1, 1, "pruned", 1), (0, 1, "completed", 3), (2, 0, "running", None)]
    assert [r["end"] == "" for r in rows] == [False, False, False, True]
    promoted = replay(events[:6])[0]  # while it trains again, it shows what its last result reached
    assert (promoted.status, promoted.epochs, promoted.group) == (TrialStatus.RUNNING, 1, 1)
    # the results table: one row a trial, from its first start to its last end, training 11 + 21 s
    row = result_rows(replay(events).values(), ["x"])[1][0]
    assert (row["start"], row["end"], row["duration_s"]) == (rows[0]["start"], rows[2]["end"], 32.0)


def test_a_trial_sent_ahead_and_cut_off_starts_where_its_groups_previous_one_ended():
    def report(n, epoch, t):
        return {"event": "report", "trial": n, "epoch": epoch, "metrics": {"objective": 1.0}, "time": t}

    # trial 1 is sent ahead to group 0 at 105, which ends trial 0 at 108; the kill comes at 112
    events = [{**start(0, 0.1, t=100.0), "group": 0}, {**start(1, 0.2, t=105.0), "group": 0},
              {**finish(0, obj=0.5, t=108.0), "epochs": 1, "start": 100.0}, report(1, 1, 111.0)]
    rows = stretch_rows(events, live=False)
    assert [(r["trial"], r["start"], r["end"]) for r in rows] == [(0, iso(100.0), iso(108.0)),
                                                                  (1, iso(108.0), iso(111.0))]


def test_a_stretch_cut_off_by_a_kill_ends_at_its_last_report():
    def report(n, epoch, t):
        return {"event": "report", "trial": n, "epoch": epoch, "metrics": {"objective": 1.0}, "time": t}

    # killed while trial 0 trained (epochs 1 and 2 reported) and trial 1 had just started; resumed,
    # trial 0 is run again from its checkpoint and completes, trial 1 is not handed out again yet
    events = [start(0, 0.1, t=100.0), report(0, 1, 104.0), report(0, 2, 108.0), start(1, 0.2, t=109.0),
              start(0, 0.1, t=200.0), report(0, 3, 204.0), {**finish(0, obj=0.5, t=205.0), "epochs": 3}]
    rows = stretch_rows(events, live=False)
    got = [(r["trial"], r["status"], r["epochs"], r["start"], r["end"]) for r in rows]
    assert got == [(0, "interrupted", 2, iso(100.0), iso(108.0)), (0, "completed", 3, iso(204.0), iso(205.0)),
                   (1, "interrupted", None, iso(109.0), iso(109.0))]
    # while a search is live, its open stretch is running, without an end
    assert stretch_rows(events[:4], live=True)[-1]["end"] == ""
    # the results table: trial 0 from its first hand-out, before the kill, to its end
    row = result_rows(replay(events).values(), ["x"])[1][0]
    assert (row["start"], row["end"]) == (iso(100.0), iso(205.0))


@pytest.mark.parametrize("value", [
    1.5, float("nan"), float("-inf"), np.float64(0.25), np.float64("nan"), np.float32(0.5), np.float32("inf"),
    np.int64(3), np.bool_(True), TrialStatus.PAUSED, [np.float32(1.0), (2, float("nan"))], "text", None, True,
])
def test_a_journal_line_is_the_event_made_json_safe(value):
    # plain events skip `clean` on the way to JSON; every line must still be exactly clean's
    from mpiopt.journal import _line
    from mpiopt.trial import clean

    event = {"event": "report", "trial": 1, "metrics": {"val": value, "nested": {"v": [value]}}, "status": value}
    expected = json.dumps(clean(event), separators=(",", ":"), allow_nan=False).encode() + b"\n"
    assert _line(event) == expected


def test_a_result_that_does_not_say_its_epochs_keeps_how_far_its_reports_got():
    # a function that reported step 1 and then raised: the table says it got to epoch 1
    report = {"event": "report", "trial": 0, "epoch": 1, "metrics": {"objective": 2.0}, "time": 100.5}
    failed = {**finish(0, status="failed", obj=None), "error": "ValueError: no"}
    assert replay([start(0, 0.1), report, failed])[0].epochs == 1
    assert replay([start(0, 0.1), report, {**failed, "epochs": 3}])[0].epochs == 3  # a result's own word stands


def test_torn_and_corrupt_lines_are_skipped(tmp_path):
    path = tmp_path / "trials.jsonl"
    good = [json.dumps(e) for e in (start(0, 0.1), finish(0), start(1, 0.2))]
    path.write_text("\n".join([good[0], "{not json", good[1], good[2]]) + "\n" + '{"event": "fini')
    events, problems = read_journal(path)
    assert len(events) == 3
    assert len(problems) == 2
    assert "line 2" in problems[0] and "corrupt" in problems[0]
    assert "torn last line" in problems[1]
    trials = replay(events)
    assert trials[0].status == TrialStatus.COMPLETED and trials[1].status == TrialStatus.RUNNING


def test_resume_cuts_the_torn_tail_and_keeps_it(tmp_path):
    rd = RunDir(tmp_path)
    rd.open(resume=False, config_text=CONFIG)
    rd.append(start(0, 0.1))
    rd.close()
    with open(tmp_path / "trials.jsonl", "ab") as f:
        f.write(b'{"event":"finish","tri')
    rd = RunDir(tmp_path)
    rd.open(resume=True, config_text=CONFIG)
    rd.append(finish(0))
    events, problems = read_journal(tmp_path / "trials.jsonl")
    assert problems == [] and len(events) == 2
    assert (tmp_path / "trials.jsonl.torn").read_bytes() == b'{"event":"finish","tri\n'
    rd.close()


def test_resume_keeps_a_whole_last_record_that_lost_only_its_newline(tmp_path):
    # readers take it (it is a whole JSON record), so the resumed search must too: cutting it
    # would run a finished trial again
    rd = RunDir(tmp_path)
    rd.open(resume=False, config_text=CONFIG)
    rd.append(start(0, 0.1))
    rd.append(finish(0))
    rd.close()
    path = tmp_path / "trials.jsonl"
    path.write_bytes(path.read_bytes()[:-1])
    before, _ = read_journal(path)
    rd = RunDir(tmp_path)
    rd.open(resume=True, config_text=CONFIG)
    rd.append(start(1, 0.2))
    rd.close()
    events, problems = read_journal(path)
    assert problems == [] and events == [*before, json.loads(json.dumps(start(1, 0.2)))]
    assert not (tmp_path / "trials.jsonl.torn").exists()


def test_the_heartbeat_says_when_this_search_opened_the_directory(tmp_path):
    # `mpiopt status` tells the trials a --resume has started from those a killed run left
    import time

    from mpiopt.status import liveness

    before = time.time()
    rd = RunDir(tmp_path)
    rd.open(resume=False, config_text=CONFIG)
    rd.heartbeat("running")
    since = liveness(tmp_path, time.time()).since
    assert since is not None and before <= since <= time.time()
    rd.close()


def test_rerun_and_stray_events(tmp_path):
    events = [start(0, 0.1), start(0, 0.1, t=200.0), finish(0, t=201.0), start(0, 0.9)]
    trials = replay(events)
    assert trials[0].status == TrialStatus.COMPLETED and trials[0].params == {"x": 0.1}
    assert trials[0].end == 201.0


def test_refusals(tmp_path):
    rd = RunDir(tmp_path / "r")
    with pytest.raises(ConfigError, match="--resume: no search to resume"):
        rd.open(resume=True, config_text=CONFIG)
    rd.open(resume=False, config_text=CONFIG)
    rd.append(start(0, 0.1))
    for resume in (True, False):  # without --resume too: advising it would not help
        with pytest.raises(ConfigError, match="another search is running"):
            RunDir(tmp_path / "r").open(resume=resume, config_text=CONFIG)
    assert is_live(tmp_path / "r")
    rd.close()
    assert not is_live(tmp_path / "r")
    with pytest.raises(ConfigError, match="already holds a search; pass --resume"):
        RunDir(tmp_path / "r").open(resume=False, config_text=CONFIG)
    other = CONFIG.replace("high: 1", "high: 2")
    with pytest.raises(ConfigError, match="`parameters` differs"):
        RunDir(tmp_path / "r").open(resume=True, config_text=other)


def test_a_new_search_never_overwrites_files_of_its_names_without_a_journal(tmp_path):
    # the user's own config.yaml and results.csv in --out, or a search's whose journal was deleted
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.yaml").write_text("lr: 0.1\n")
    (tmp_path / "mine" / "results.csv").write_text("a,b\n1,2\n")
    (tmp_path / "mine" / "notes.txt").write_text("")
    with pytest.raises(ConfigError, match=r"^.*mine: holds config.yaml, results.csv but no trials.jsonl: a new search "
                                          r"would overwrite them; choose another --out$"):
        RunDir(tmp_path / "mine").open(resume=False, config_text=CONFIG)
    assert (tmp_path / "mine" / "config.yaml").read_text() == "lr: 0.1\n"
    with pytest.raises(ConfigError, match=r"--resume: no search to resume here \(no trials.jsonl\)"):
        RunDir(tmp_path / "mine").open(resume=True, config_text=CONFIG)  # nor is it a search stopped at its start
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["config.yaml", "notes.txt", "results.csv"]
    (tmp_path / "mine" / "config.yaml").unlink()
    (tmp_path / "mine" / "results.csv").unlink()
    rd = RunDir(tmp_path / "mine")
    rd.open(resume=False, config_text=CONFIG)  # other files are no search's: left alone
    rd.close()
    (tmp_path / "trained").mkdir()  # `mpiopt train --out trained`: load_model would take a search's best
    (tmp_path / "trained" / "train.yaml").write_text("name: t\n")
    with pytest.raises(ConfigError, match=r"trained: holds train.yaml, the record of an `mpiopt train` run: a search "
                                          r"would mix its files with it; choose another --out$"):
        RunDir(tmp_path / "trained").open(resume=False, config_text=CONFIG)
    assert [p.name for p in (tmp_path / "trained").iterdir()] == ["train.yaml"]
    assert (tmp_path / "mine" / "notes.txt").exists()


def test_without_its_config_yaml_a_resume_checks_the_space_against_the_journal(tmp_path):
    rd = RunDir(tmp_path / "r")
    rd.open(resume=False, config_text=CONFIG)
    rd.append(start(0, 0.1))
    rd.append(finish(0))
    rd.close()
    (tmp_path / "r" / "config.yaml").unlink()
    with_z = CONFIG.replace("}}\n", "}, z: {type: real, low: 0, high: 1}}\n")
    with pytest.raises(ConfigError, match=r"config.yaml is missing or unreadable, and the trials in trials.jsonl are "
                                          r"of another space \(none was given z, which this space has\)"):
        RunDir(tmp_path / "r").open(resume=True, config_text=with_z)
    for unreadable in ("{{{ not yaml", "garbage\n"):  # not YAML; YAML but no mapping
        (tmp_path / "r" / "config.yaml").write_text(unreadable)
        with pytest.raises(ConfigError, match=r"\(they were given x, which this space lacks\)"):
            RunDir(tmp_path / "r").open(resume=True, config_text=CONFIG.replace("x:", "w:"))
    with pytest.raises(ConfigError, match=r"\(trial 0's x=0.1 is not in this space's x\)"):
        RunDir(tmp_path / "r").open(resume=True, config_text=CONFIG.replace("high: 1", "high: 0.05"))
    rd = RunDir(tmp_path / "r")
    rd.open(resume=True, config_text=CONFIG)
    rd.close()
    # a parameter with a condition may never have been given
    conditional = CONFIG.replace("}}\n", "}, k: {choices: [a, b]}, z: {type: real, low: 0, high: 1, when: {k: a}}}\n")
    rd = RunDir(tmp_path / "c")
    rd.open(resume=False, config_text=conditional)
    rd.append({**start(0, 0.1), "params": {"x": 0.1, "k": "b"}})
    rd.close()
    (tmp_path / "c" / "config.yaml").unlink()
    rd = RunDir(tmp_path / "c")
    rd.open(resume=True, config_text=conditional)
    rd.close()


def test_resume_starts_a_search_stopped_before_its_first_trial(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"--resume: no search to resume here \(no trials.jsonl\)"):
        RunDir(tmp_path / "empty").open(resume=True, config_text=CONFIG)  # a mistyped --out, likely
    (tmp_path / "empty" / "trials.jsonl").write_text("")
    with pytest.raises(ConfigError, match=r"--resume: no search to resume here \(no trial recorded in trials.jsonl\)"):
        RunDir(tmp_path / "empty").open(resume=True, config_text=CONFIG)
    rd = RunDir(tmp_path / "r")
    rd.open(resume=False, config_text=CONFIG)
    rd.close()  # interrupted before any trial: its config.yaml and an empty journal
    assert not rd.holds_search()
    again = RunDir(tmp_path / "r")
    again.open(resume=True, config_text=CONFIG)
    again.append(start(0, 0.1))
    again.close()
    assert list(again.load()[0]) == [0]
    with pytest.raises(ConfigError, match="`parameters` differs"):  # still the same search only
        rd2 = RunDir(tmp_path / "r2")
        rd2.open(resume=False, config_text=CONFIG)
        rd2.close()
        RunDir(tmp_path / "r2").open(resume=True, config_text=CONFIG.replace("high: 1", "high: 2"))


def test_a_refused_resume_names_what_changed(tmp_path):
    rd = RunDir(tmp_path)
    rd.open(resume=False, config_text=CONFIG)
    rd.append(start(0, 0.1))
    rd.close()
    with pytest.raises(ConfigError, match=r"`parameters` differs from the search in .*config.yaml "
                                          r"\(parameters.x.high 1 -> 2\); resume with the same space"):
        RunDir(tmp_path).open(resume=True, config_text=CONFIG.replace("high: 1", "high: 2"))
    old = {"x": {"low": 0, "high": 1}, "act": {"choices": ["relu", "tanh"]}, "m": {"low": 0.0, "high": 0.9}}
    new = {"x": {"low": 0, "high": 2, "prior": "log-uniform"}, "act": {"choices": ["relu"]}, "lr": {"low": 0.1}}
    assert differences(old, new, "parameters") == [
        "parameters.x.high 1 -> 2", "parameters.x.prior added", "parameters.act.choices ['relu', 'tanh'] -> ['relu']"]
    assert differences(old, new, "parameters", limit=9)[3:] == ["parameters.m removed", "parameters.lr added"]
    assert differences(None, new, "parameters") == ["parameters added"]
    many = differences({"c": {"choices": list(range(100))}}, {"c": {"choices": list(range(101))}}, "parameters")
    assert many == ["parameters.c.choices [0, 1, 2, 3, 4, 5, 6, 7, ...] -> [0, 1, 2, 3, 4, 5, 6, 7, ...]"]


@pytest.mark.parametrize("old, new, refused", [
    ("scheduler: asha", "scheduler: median", "search.scheduler"),
    ("reduction_factor: 3", "reduction_factor: 4", "search.reduction_factor"),
    ("epochs: 9", "epochs: 27", "training.epochs"),
    ("trials: 9", "trials: 99", None)])
def test_resume_refuses_other_scheduler_settings_whose_rungs_the_journal_holds(tmp_path, old, new, refused):
    settings = "search: {trials: 9, scheduler: asha, min_epochs: 1, reduction_factor: 3}\ntraining: {epochs: 9}\n"
    rd = RunDir(tmp_path)
    rd.open(resume=False, config_text=CONFIG + settings)
    rd.append(start(0, 0.1))
    rd.close()
    edited = CONFIG + settings.replace(old, new)
    if refused is None:
        RunDir(tmp_path).open(resume=True, config_text=edited)
    else:
        with pytest.raises(ConfigError, match=f"--resume: `{refused}` differs from the search in .*same scheduler"):
            RunDir(tmp_path).open(resume=True, config_text=edited)


@pytest.mark.parametrize("error", [errno.ENOSYS, errno.ENOLCK])  # Lustre mounted noflock; NFS without its lock daemon
def test_a_file_system_without_locks_runs_the_search_and_warns_that_a_second_is_not_refused(tmp_path, monkeypatch,
                                                                                          caplog, error):
    def no_locks(fd, op):
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr("mpiopt.journal.fcntl.flock", no_locks)
    rd = RunDir(tmp_path / "r")
    rd.open(resume=False, config_text=CONFIG)
    rd.append(start(0, 0.1))
    assert f"takes no file locks ({os.strerror(error)}), so a second search started in this directory on another " \
           "machine might not be refused" in caplog.text
    # the lock file names its holder, a process of this machine that lives: a second search here is refused
    assert is_live(tmp_path / "r")
    with pytest.raises(ConfigError, match="another search is running"):
        RunDir(tmp_path / "r").open(resume=True, config_text=CONFIG)
    rd.close()
    assert not is_live(tmp_path / "r")  # it names no holder once the search let it go
    # a search of another machine that beats (a heartbeat of seconds ago) runs; one silent for a minute does not
    beat = {"state": "running", "host": "elsewhere", "pid": 1}
    (tmp_path / "r" / "heartbeat.json").write_text(json.dumps({**beat, "time": time.time() - 5}))
    assert is_live(tmp_path / "r")
    (tmp_path / "r" / "heartbeat.json").write_text(json.dumps({**beat, "time": time.time() - 60}))
    assert not is_live(tmp_path / "r")
    # a killed search of this machine: the process the lock file names is gone
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "r" / ".lock").write_text(f"pid {dead.stdout.strip()} on {socket.gethostname()} since now\n")
    assert not is_live(tmp_path / "r")
    RunDir(tmp_path / "r").open(resume=True, config_text=CONFIG)


def test_lock_of_a_killed_process_is_not_stale(tmp_path):
    code = ("import sys, os; from mpiopt.journal import RunDir; r = RunDir(sys.argv[1]); "
            "r.open(resume=False, config_text='a: 1\\n'); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    assert not is_live(tmp_path)
    rd = RunDir(tmp_path)
    rd.open(resume=False, config_text="a: 1\n")  # the dead process's lock does not block
    rd.close()


def test_unwritable_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot write here|not a directory"):
        RunDir(tmp_path / "file" / "sub").open(resume=False, config_text=CONFIG)


def test_result_columns_follow_spec():
    trials = replay([start(0, 0.1), finish(0)])
    cols, rows = result_rows(trials.values(), ["x"])
    for c in ("trial", "status", "objective", "params_x", "epochs", "start", "end", "duration_s", "group",
              "ranks", "error"):
        assert c in cols


def test_a_models_parameter_count_is_a_whole_number_after_its_metrics(tmp_path):
    import mpiopt
    from mpiopt.journal import RunDir

    done = {**finish(0), "metrics": {"val_loss": 0.5, "params": 23050.0, "loss": 0.4}}  # journaled as a metric
    cols, rows = result_rows(replay([start(0, 0.1), done]).values(), ["x"])
    assert cols[cols.index("params_x") + 1:cols.index("epochs")] == ["loss", "val_loss", "params"]  # as README lists
    assert rows[0]["params"] == 23050 and isinstance(rows[0]["params"], int)
    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text="name: t\n")
    for e in (start(0, 0.1), done):
        rd.append(e)
    rd.write_results(list(replay(rd.events()[0]).values()), ["x"])
    rd.close()
    assert ",23050," in (tmp_path / "run" / "results.csv").read_text()  # not 23050.0
    assert str(mpiopt.load_results(tmp_path / "run")["params"].dtype) == "Int64"


def test_full_file_system_is_refused_at_start(tmp_path, monkeypatch):
    import shutil as sh
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(sh, "disk_usage", lambda p: usage(10**9, 10**9 - 2**20, 2**20))
    with pytest.raises(ConfigError, match=r"the file system is full \(1.0 MiB free"):
        RunDir(tmp_path / "r" / "deeper").open(resume=False, config_text=CONFIG)
    assert list(tmp_path.iterdir()) == []  # no empty run directory left behind


def test_check_refuses_a_place_a_search_could_not_write_in(tmp_path, monkeypatch):
    import shutil as sh
    from collections import namedtuple

    from mpiopt.journal import refuse_an_unwritable_place

    refuse_an_unwritable_place(tmp_path / "new" / "run")  # room, and writable: nothing to say
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(sh, "disk_usage", lambda p: usage(10**9, 10**9 - 2**20, 2**20))
    with pytest.raises(ConfigError, match=r"run: the file system is full \(1.0 MiB free"):
        refuse_an_unwritable_place(tmp_path / "run")
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # what a read-only file system answers
    with pytest.raises(ConfigError, match=f"cannot write here: {tmp_path} is read-only or not writable by you"):
        refuse_an_unwritable_place(tmp_path / "new" / "run")
    assert list(tmp_path.iterdir()) == []  # check writes nothing


def test_a_write_that_fills_the_disk_names_its_file_and_leaves_no_part_behind(tmp_path):
    import errno

    from mpiopt._files import atomic_write

    def full(f):
        f.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "results.csv").write_text("old\n")
    with pytest.raises(OSError) as info:
        atomic_write(tmp_path / "results.csv", full)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "results.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]  # no .results.csv.tmpPID
    assert (tmp_path / "results.csv").read_text() == "old\n"
    (tmp_path / f".results.csv.tmp{os.getpid()}").mkdir()  # the temporary file cannot be made
    with pytest.raises(OSError) as info:
        atomic_write(tmp_path / "results.csv", b"new\n")
    assert info.value.filename == str(tmp_path / "results.csv")  # the file the user knows, not the temporary one
    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text=CONFIG)

    class FullDisk(io.BytesIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    rd._journal = FullDisk()
    with pytest.raises(OSError) as info:
        rd.append(start(0, 0.1))
    assert info.value.filename == str(tmp_path / "run" / "trials.jsonl")


def test_cached_table_matches_a_fresh_one_as_trials_finish(tmp_path):
    from mpiopt.journal import results_csv

    events = [start(0, 0.1), start(1, 0.2), finish(0, obj=0.5)]
    cache: dict = {}
    trials = replay(events)
    assert results_csv(trials.values(), ["x"], live=True, cache=cache) == results_csv(trials.values(), ["x"], live=True)
    events += [finish(1, obj=0.25), start(2, 0.3)]
    trials = replay(events)  # trial 1 finished since: its cached running line must not be reused
    cached = results_csv(trials.values(), ["x"], live=True, cache=cache)
    assert cached == results_csv(trials.values(), ["x"], live=True)
    rows = list(csv.DictReader(io.StringIO(cached.decode())))
    assert [r["status"] for r in rows] == ["completed", "completed", "running"] and rows[1]["objective"] == "0.25"
    events.append({**finish(2, obj=1.0), "metrics": {"objective": 1.0, "val_acc": 0.9}})  # a new column
    trials = replay(events)
    assert results_csv(trials.values(), ["x"], live=False, cache=cache) == results_csv(trials.values(), ["x"])


def test_group_commit_syncs_in_the_background_and_reports_its_error(tmp_path, monkeypatch):
    import os
    import time

    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text=CONFIG)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    rd.append(start(0, 0.1), sync=False)
    rd.sync_soon()
    deadline = time.monotonic() + 10
    while not synced and time.monotonic() < deadline:
        time.sleep(0.01)
    assert synced, "the helper thread never fsynced the journal"

    def failing(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing)
    rd.append(finish(0), sync=False)
    rd.sync_soon()
    deadline = time.monotonic() + 10
    while rd._sync_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(OSError, match="No space"):
        rd.sync_soon()  # the helper's error comes out of the next call
    monkeypatch.setattr(os, "fsync", real_fsync)
    rd.close()
    events, problems = read_journal(tmp_path / "run" / "trials.jsonl")
    assert problems == [] and [e["event"] for e in events] == ["start", "finish"]


def test_abandoning_a_refused_open_leaves_the_running_search_alone(tmp_path):
    running = RunDir(tmp_path / "run")
    running.open(resume=False, config_text=CONFIG)  # a search that has not journaled a trial yet
    second = RunDir(tmp_path / "run")
    with pytest.raises(ConfigError, match="another search is running"):
        second.open(resume=False, config_text=CONFIG)
    second.abandon()
    assert {p.name for p in (tmp_path / "run").iterdir()} >= {"trials.jsonl", "config.yaml", ".lock"}
    running.close()
    fresh = RunDir(tmp_path / "fresh" / "run")
    fresh.open(resume=False, config_text=CONFIG)
    fresh.abandon()
    assert not (tmp_path / "fresh").exists()  # what it made, it takes away


def test_a_new_journal_starts_with_its_format_version_and_a_newer_one_is_refused(tmp_path):
    from mpiopt.journal import FORMAT_VERSION

    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text=CONFIG)
    assert not rd.holds_search()  # no trial yet: the journal stays empty (a failed start leaves nothing)
    rd.append(start(0, 0.1))
    rd.append(finish(0))
    rd.close()
    path = tmp_path / "run" / "trials.jsonl"
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"event": "journal", "version": FORMAT_VERSION, "mpiopt": mpiopt_version()}
    events, problems = read_journal(path)
    assert problems == [] and [e["event"] for e in events] == ["start", "finish"]  # the header is not a trial's

    lines[0] = json.dumps({"event": "journal", "version": FORMAT_VERSION + 1, "mpiopt": "9.0"})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=f"journal format version {FORMAT_VERSION + 1} is newer than this mpiopt "
                                          f"reads \\({FORMAT_VERSION}\\); upgrade mpiopt"):
        read_journal(path)
    with pytest.raises(ConfigError, match="is newer than this mpiopt reads"):  # before MPI starts, on every rank
        RunDir(tmp_path / "run").check(resume=True, config_text=CONFIG)


def mpiopt_version():
    import mpiopt

    return mpiopt.__version__


def test_a_journal_written_before_format_versions_loads_and_resumes(tmp_path):
    """tests/fixtures/journal_v1: a search killed by SIGKILL at its 8th trial, written by mpiopt
    before journals carried a version (no header); it must load as it is and resume."""
    import shutil
    from pathlib import Path

    import mpiopt

    here = Path(__file__).resolve().parent
    shutil.copytree(here / "fixtures" / "journal_v1", tmp_path, dirs_exist_ok=True)
    shutil.copy(here / "spaces" / "slow_branin.py", tmp_path)
    journal = tmp_path / "run" / "trials.jsonl"
    first_line = journal.read_text().splitlines()[0]
    before = mpiopt.load_results(tmp_path / "run")
    assert list(before.trial) == list(range(8))
    assert list(before.status) == ["completed"] * 7 + ["interrupted"]
    p = subprocess.run([sys.executable, "-m", "mpiopt", "search", "space.yaml", "--out", "run", "--resume"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "MPIOPT_TEST_SLEEP": "0"})
    assert p.returncode == 0, p.stderr
    after = mpiopt.load_results(tmp_path / "run")
    assert list(after.trial) == list(range(10)) and set(after.status) == {"completed"}
    for col in ("objective", "params_x", "params_layers", "params_act"):
        assert list(after[col][:7]) == list(before[col][:7])
    assert after.params_x[7] == before.params_x[7]  # the interrupted trial ran again with its own values
    assert journal.read_text().splitlines()[0] == first_line  # appended to, never rewritten


def test_the_live_search_and_the_replay_of_its_journal_agree(tmp_path, write_yaml):
    """The coordinator and `replay` bring a trial up to date through the same function."""
    from test_coordinator import SimTransport, branin

    from mpiopt.config import load_config
    from mpiopt.coordinator import Coordinator
    from mpiopt.search import make_searcher

    def moody(p):
        if p["x"] < 0:
            raise RuntimeError("negative x")
        return float("nan") if p["x"] < 3 else branin(p)

    cfg = load_config(write_yaml("""
        objective: {function: objectives.py:branin}
        parameters: {x: {type: real, low: -5.0, high: 10.0}, y: {type: real, low: 0.0, high: 15.0}}
        search: {initial_points: 5, trials: 16, seed: 2}
    """))
    rd = RunDir(tmp_path / "run")
    rd.open(resume=False, config_text=CONFIG)
    live = Coordinator(cfg, make_searcher(cfg.space, cfg.search), SimTransport([1.0, 1.7, 0.4], fn=moody), rd).run()
    rd.close()
    replayed, problems = RunDir(tmp_path / "run").load()
    assert problems == [] and {t.status for t in replayed.values()} == {TrialStatus.COMPLETED, TrialStatus.FAILED,
                                                                        TrialStatus.DIVERGED}
    assert replayed == live.trials


def _interrupted_at(n: int, call) -> bool:
    """Run `call` with a KeyboardInterrupt raised at the n-th call or return of a Python function
    it runs on this thread, where CPython runs a signal's handler (on entering a function, and
    once a call returned); True if the interrupt was raised."""
    import sys

    seen = [0]

    def tracer(frame, event, arg):
        if event in ("call", "return"):
            seen[0] += 1
            if seen[0] == n:
                raise KeyboardInterrupt
        return tracer

    sys.settrace(tracer)
    try:
        call()
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(None)
    return False


def test_a_ctrl_c_anywhere_in_a_group_commit_never_stops_the_journal_from_closing(tmp_path):
    # a KeyboardInterrupt in a Condition's Python-level __enter__ once left its lock held: close()
    # then waited 60 s for a syncer that could not wake (a SIGTERM's search ended without its line)
    import threading

    for n in range(1, 300):
        rd = RunDir(tmp_path / f"run{n}")
        rd.open(resume=False, config_text=CONFIG)
        rd.append(start(0, 0.1), sync=False)
        rd.sync_soon()  # the syncer runs (starting a thread is the standard library's own affair)
        rd.append(finish(0), sync=False)
        hit = _interrupted_at(n, rd.sync_soon)
        closing = threading.Thread(target=rd.close, daemon=True)
        closing.start()
        closing.join(timeout=5)
        assert not closing.is_alive(), f"close() hangs after a KeyboardInterrupt at call or return {n} of sync_soon"
        events, problems = read_journal(tmp_path / f"run{n}" / "trials.jsonl")
        assert problems == [] and [e["event"] for e in events] == ["start", "finish"]
        if not hit:  # every call and return of sync_soon has been tried
            break
    assert not hit, "sync_soon made more than 300 calls"


def test_a_stretch_a_killed_run_left_open_ends_at_that_runs_last_record_or_heartbeat():
    def report(n, epoch, t):
        return {"event": "report", "trial": n, "epoch": epoch, "metrics": {"objective": 1.0}, "time": t}

    # run 1: trial 0 reports two epochs, trial 1 (a function: no reports) runs beside it; killed.
    # run 2 runs trial 0 again; trial 1 waits. Without the runs' ends trial 1 would last no time.
    events = [{"event": "session", "time": 99.0}, {**start(0, 0.1, t=100.0), "group": 0},
              {**start(1, 0.2, t=101.0), "group": 1}, report(0, 1, 104.0), report(0, 2, 108.0),
              {"event": "session", "time": 200.0}, {**start(0, 0.1, t=200.0), "group": 0},
              {**finish(0, obj=0.5, t=205.0), "epochs": 3}]
    rows = stretch_rows(events, live=False, last_beat=204.0)
    got = {(r["trial"], r["status"]): (r["start"], r["end"]) for r in rows}
    assert got[(1, "interrupted")] == (iso(101.0), iso(108.0)) and got[(0, "interrupted")][1] == iso(108.0)
    # the last run, killed: its open stretch runs until its last heartbeat
    rows = stretch_rows(events[:5], live=False, last_beat=130.0)
    assert [(r["trial"], r["end"]) for r in rows] == [(0, iso(130.0)), (1, iso(130.0))]
    assert stretch_rows(events[1:5], live=False, last_beat=130.0)[1]["end"] == iso(101.0)  # no runs marked


def test_a_heartbeat_ends_the_last_run_only_where_that_run_wrote_it():
    from mpiopt.analysis import _last_runs_beat

    events = [{"event": "session", "time": 100.0}, {"event": "start", "trial": 0, "time": 101.0}]
    assert _last_runs_beat({"time": 150.0, "since": 99.0}, events) == 150.0
    # a later --resume stopped before its session record beat last: not the killed run's time
    assert _last_runs_beat({"time": 900.0, "since": 800.0}, events) is None
    assert _last_runs_beat({"time": 150.0}, events) is None and _last_runs_beat(None, events) is None
    assert _last_runs_beat({"time": 150.0, "since": 99.0}, events[1:]) is None  # no runs marked

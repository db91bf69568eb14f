"""The command line as a user meets it (one process): exit codes, one-line errors, resume, results."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
import subprocess
import sys

import pytest

import mpiopt
from conftest import SPACES, run_cli
from mpiopt._errors import ConfigError

SPACE = """
name: cli-branin
objective: {function: objectives.py:branin}
parameters:
  x: {type: real, low: -5.0, high: 10.0}
  y: {type: real, low: 0.0, high: 15.0}
search: {initial_points: 4, trials: 8, seed: 0}
"""


def one_error_line(proc, *parts):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mpiopt: error: ")
    assert "Traceback" not in proc.stderr
    for p in parts:
        assert p in lines[0], lines[0]


def test_search_resume_and_results(write_yaml, tmp_path, monkeypatch, caplog):
    space = write_yaml(SPACE)
    p = run_cli(["search", space], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "best objective" in p.stdout
    out = tmp_path / "runs" / "cli-branin"
    for f in ("config.yaml", "trials.jsonl", "results.csv"):
        assert (out / f).exists()
    df = mpiopt.load_results(out)
    assert list(df.trial) == list(range(8)) and set(df.status) == {"completed"}
    assert {"params_x", "params_y", "objective", "start", "end", "duration_s", "group", "ranks"} <= set(df.columns)

    one_error_line(run_cli(["search", space], cwd=tmp_path), "already holds a search", "--resume")
    # a bigger budget continues the same search; nothing is run twice
    p = run_cli(["search", space, "--resume", "--trials", "11"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    df2 = mpiopt.load_results(out)
    assert list(df2.trial) == list(range(11))
    assert df2.objective[:8].tolist() == df.objective.tolist()
    # a budget below the trials already finished is refused, the journal and configuration (the
    # budget `mpiopt status` reads) left as they were
    kept = [(out / name).read_bytes() for name in ("trials.jsonl", "config.yaml")]
    one_error_line(run_cli(["search", space, "--resume", "--trials", "5"], cwd=tmp_path),
                   "--trials: 5 is fewer than the 11 trials already finished", "a budget of at least 11")
    assert [(out / name).read_bytes() for name in ("trials.jsonl", "config.yaml")] == kept
    assert "trials: 11" in kept[1].decode()
    # a plain --resume keeps the budget raised by --trials (the file says 8), and names what the
    # file changed since
    write_yaml(SPACE.replace("seed: 0", "seed: 3"))
    p = run_cli(["search", space, "--resume"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "budget: 11 trials, as the search last ran (the file says 8" in p.stderr
    assert "changed since the search last ran: search.seed 0 -> 3; the trials so far are kept" in p.stderr
    logged = (out / "search.log").read_text()  # the lines of the resume's start are in the run's log too
    assert "changed since the search last ran: search.seed 0 -> 3" in logged and "budget: 11 trials" in logged
    assert "changed since" not in run_cli(["search", space, "--resume", "--trials", "12"], cwd=tmp_path).stderr
    renamed = write_yaml(SPACE.replace("name: cli-branin", "name: other").replace("seed: 0", "seed: 3"), "renamed.yaml")
    p = run_cli(["search", renamed, "--out", "runs/cli-branin", "--resume"], cwd=tmp_path)
    assert "changed since the search last ran: name 'cli-branin' -> 'other'" in p.stderr
    assert len(mpiopt.load_results(out)) == 12 and "trials: 12" in (out / "config.yaml").read_text()
    p = run_cli(["search", space, "--resume"], cwd=tmp_path)  # nothing left: it says how to run more
    assert p.returncode == 0 and "the budget of 12 trials is spent (all 12 finished): nothing is left to run; " \
        "--resume --trials N runs more" in p.stderr
    write_yaml(SPACE.replace("seed: 0", "seed: 5"))  # a refused resume says nothing of what it would change
    one_error_line(run_cli(["search", space, "--resume", "--trials", "5"], cwd=tmp_path), "--trials: 5 is fewer")

    p = run_cli(["results", out, "--top", "3"], cwd=tmp_path)
    assert p.returncode == 0 and "12 trials (12 completed)" in p.stdout
    assert len(p.stdout.strip().splitlines()) == 5
    p = run_cli(["results", out, "--format", "json", "--top", "2"], cwd=tmp_path)
    rows = json.loads(p.stdout)
    assert len(rows) == 2 and rows[0]["objective"] == mpiopt.load_results(out).objective.min()
    p = run_cli(["results", out, "--format", "csv"], cwd=tmp_path)
    # every trial for a program (the table for people shows 10)
    assert p.stdout.startswith("trial,status,objective") and len(p.stdout.strip().splitlines()) == 13
    import io

    import pandas as pd

    printed, kept = (pd.read_csv(f, dtype=str).set_index("trial") for f in (io.StringIO(p.stdout), out / "results.csv"))
    assert (printed.start == kept.start[printed.index]).all()  # times written alike: ISO 8601, milliseconds

    # `mpiopt train --trial best`: the best trial's values again, into the search's folder
    best = mpiopt.load_results(out).sort_values("objective").iloc[0]
    p = run_cli(["train", space, "--trial", "best"], cwd=tmp_path)
    assert p.returncode == 0 and f"(trial {best.trial}: its values and seed)" in p.stderr, p.stderr
    assert f"objective = {best.objective:.6g}" in p.stdout, (p.stdout, best.objective)
    assert (out / f"train-trial-{best.trial}" / "train.yaml").exists()
    assert "the search trained it on" not in p.stderr  # one rank then, one now
    import yaml

    assert yaml.safe_load((out / f"train-trial-{best.trial}" / "train.yaml").read_text())["ranks"] == 1
    from mpiopt import _env
    from mpiopt.cli import _note_other_ranks

    for name in _env.RANK_VARIABLES + _env.SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PMI_SIZE", "3")  # `mpiexec -n 3 mpiopt train --trial best`
    with caplog.at_level(logging.WARNING):
        _note_other_ranks(out, int(best.trial))
    assert caplog.messages == [f"--trial {best.trial}: the search trained it on 1 rank, this on 3 ranks: its figure "
                               "of merit can differ (mpiexec -n 1 trains it as the search did)"]


def test_a_resume_without_trials_says_it_runs_the_files_budget_over_a_lowered_one(write_yaml, tmp_path):
    space = write_yaml(SPACE)
    assert run_cli(["search", space, "--trials", "3"], cwd=tmp_path).returncode == 0
    p = run_cli(["search", space, "--resume"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "budget: 8 trials, as the file says (the search last ran with 3: --trials 3 keeps that)" in p.stderr
    assert len(mpiopt.load_results(tmp_path / "runs" / "cli-branin")) == 8


def test_a_functions_values_that_are_no_numbers_are_warned_of_once(write_yaml, tmp_path):
    p = run_cli(["search", write_yaml(SPACE.replace("objectives.py:branin", "objectives.py:with_a_note"))],
                cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("returned 'note', 'where', which are no number: left out of the results table") == 1
    assert "note" not in mpiopt.load_results(tmp_path / "runs" / "cli-branin").columns


def test_groups_of_several_sizes_under_a_scheduler_are_noted(write_yaml):
    from mpiopt.cli import _plan_notes
    from mpiopt.config import load_config
    from mpiopt.transport import plan_groups

    text = """
        objective: {model: m.py:build, data: m.py:load}   # not imported: resolve=False
        parameters: {units: {type: integer, low: 2, high: 512}}
        search: {scheduler: %s}
        training: {group_size: 2}
    """
    cfg = load_config(write_yaml(text % "asha"), resolve=False)
    assert _plan_notes(cfg, plan_groups(6, 2)) == [
        "groups of 3 and 2 ranks: the asha rungs compare trials trained on groups of different sizes, and a paused "
        "trial goes on only on a group of its own size (mpiexec -n 5 makes groups of 2)"]
    assert _plan_notes(cfg, plan_groups(5, 2)) == []
    # across nodes (-hosts a:2,b:3) the rank count alone is no fix: the ranks on each node are
    across = _plan_notes(cfg, plan_groups(5, 2, nodes=[0, 0, 2, 2, 2]))
    assert across == ["groups of 3 and 1 ranks: the asha rungs compare trials trained on groups of different sizes, "
                      "and a paused trial goes on only on a group of its own size (a multiple of 2 ranks on each "
                      "node, one more on the coordinator's, make groups of 2)"]
    assert _plan_notes(load_config(write_yaml(text % "none"), resolve=False), plan_groups(6, 2)) == []
    # without a scheduler, ranks that make no group of the size asked for (leftovers join groups)
    three = load_config(write_yaml((text % "none").replace("group_size: 2", "group_size: 3")), resolve=False)
    assert _plan_notes(three, plan_groups(6, 3)) == [
        "training.group_size 3: no group has 3 ranks, the ranks make groups of 5 (mpiexec -n 4 makes groups of 3)"]
    assert _plan_notes(three, plan_groups(7, 3, nodes=[0, 0, 0, 3, 3, 3, 3])) == [  # -hosts a:3,b:4
        "training.group_size 3: no group has 3 ranks, the ranks make groups of 4 and 2 (a multiple of 3 ranks on "
        "each node, one more on the coordinator's, make groups of 3)"]
    assert _plan_notes(three, plan_groups(7, 3)) == []


def test_check_names_searched_training_keys_instead_of_their_defaults(write_yaml):
    from mpiopt.cli import _training_line
    from mpiopt.config import load_config

    cfg = load_config(write_yaml("""
        objective: {model: m.py:build, data: m.py:load}   # not imported: resolve=False
        parameters:
          learning_rate: {type: real, low: 1.0e-4, high: 0.1, prior: log-uniform}
          units: {type: integer, low: 2, high: 8}
          time_limit: {type: real, low: 10, high: 60}   # its default (no limit) is None
        training: {batch_size: 16}
    """), resolve=False)
    line = _training_line(cfg)
    assert "learning_rate searched" in line and "batch_size=16" in line and "learning_rate=" not in line
    assert "time_limit searched" in line


def test_a_resume_budget_counts_the_interrupted_trials_it_runs_again(write_yaml, tmp_path):
    from mpiopt.cli import _refuse_a_budget_already_spent
    from mpiopt.config import load_config
    from mpiopt.trial import TrialRecord, TrialStatus

    cfg = load_config(write_yaml(SPACE)).with_search(trials=4)
    trials = {n: TrialRecord(trial=n, params={}, status=TrialStatus.COMPLETED) for n in range(4)}
    trials[4] = TrialRecord(trial=4, params={})  # running when the search was killed
    with pytest.raises(ConfigError, match=r"search\.trials: 4 is fewer than the 5 trials already started in out "
                                          r"\(4 finished, 1 interrupted, which --resume runs again\); resume with "
                                          r"a budget of at least 5 \(--trials 5\)$"):
        _refuse_a_budget_already_spent(cfg, trials, Path("out"), budget_given=False)
    with pytest.raises(ConfigError, match=r"^--trials: 4 is fewer than the 5 trials .* of at least 5$"):
        _refuse_a_budget_already_spent(cfg, trials, Path("out"), budget_given=True)  # the flag's value, not the file's
    _refuse_a_budget_already_spent(cfg.with_search(trials=5), trials, Path("out"), budget_given=False)
    # a paused trial is started too: a promotion may continue it within the budget
    trials[5] = TrialRecord(trial=5, params={}, status=TrialStatus.PAUSED)
    with pytest.raises(ConfigError, match=r"^--trials: 5 is fewer than the 6 trials already started in out \(4 "
                                          r"finished, 1 interrupted, which --resume runs again, 1 paused\); resume "
                                          r"with a budget of at least 6$"):
        _refuse_a_budget_already_spent(cfg.with_search(trials=5), trials, Path("out"), budget_given=True)


def test_bad_inputs_exit_2_with_one_line(write_yaml, tmp_path):
    space = write_yaml(SPACE)
    one_error_line(run_cli(["search", tmp_path / "missing.yaml"], cwd=tmp_path), "missing.yaml", "no such file")
    one_error_line(run_cli(["search", write_yaml("a: [", "bad.yaml")], cwd=tmp_path), "bad.yaml", "invalid YAML")
    one_error_line(run_cli(["search", space, "--resume"], cwd=tmp_path), "no search to resume here (no such directory)")
    one_error_line(run_cli(["search", space, "--trials", "0"], cwd=tmp_path), "--trials")
    one_error_line(run_cli(["search", space, "--trials", "x"], cwd=tmp_path), "invalid int value")
    one_error_line(run_cli(["serch", space], cwd=tmp_path), "invalid choice")
    one_error_line(run_cli([], cwd=tmp_path), "missing COMMAND")
    one_error_line(run_cli(["results", tmp_path / "nowhere"], cwd=tmp_path), "no such run directory")
    one_error_line(run_cli(["results", tmp_path], cwd=tmp_path), "holds no search results")
    one_error_line(run_cli(["status", tmp_path / "nowhere"], cwd=tmp_path), "no such run directory")
    one_error_line(run_cli(["status", tmp_path], cwd=tmp_path), "holds no search (no trials.jsonl)")
    for command in ("status", "results", "report"):  # the space file given for the run directory
        one_error_line(run_cli([command, space], cwd=tmp_path), "space.yaml: is a file; expected a search's run "
                                                                "directory")
    one_error_line(run_cli(["train", space, "--set", "z=1"], cwd=tmp_path), "--set z", "not a parameter")
    one_error_line(run_cli(["train", space, "--set", "x=abc"], cwd=tmp_path), "--set x", "expected a finite number")
    one_error_line(run_cli(["train", space, "--set", "tensorboard=true"], cwd=tmp_path),
                   "--set tensorboard: a training key a `function` objective never reads")
    (tmp_path / "blocker").write_text("")
    one_error_line(run_cli(["search", space, "--out", tmp_path / "blocker" / "run"], cwd=tmp_path),
                   "cannot write here")
    one_error_line(run_cli(["check", write_yaml("objective: {function: objectives.py:nope}\nparameters: "
                                                "{x: {type: real, low: 0, high: 1}}\n", "c.yaml")], cwd=tmp_path),
                   "objective.function", "has no 'nope'")


def test_a_journal_that_is_no_file_is_one_line_for_every_command(write_yaml, tmp_path, capsys):
    from mpiopt.cli import main

    run = tmp_path / "run"
    (run / "trials.jsonl").mkdir(parents=True)
    space = str(write_yaml(SPACE))
    for argv in (["results", str(run)], ["status", str(run)], ["report", str(run)],
                 ["search", space, "--out", str(run), "--resume"], ["search", space, "--out", str(run)],
                 ["check", space, "--out", str(run)]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("mpiopt: error: ") and "trials.jsonl" in err[0] and \
            ("cannot read the journal" in err[0] or "is not a file" in err[0]), (argv, err)
    with pytest.raises(ConfigError, match="Is a directory"):  # the notebook's error for a bad folder
        mpiopt.load_results(run)


def test_results_of_an_empty_journal_and_the_notebook_of_a_missing_folder(tmp_path, capsys):
    from mpiopt.cli import main

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trials.jsonl").write_text("")  # a search stopped before its first trial
    assert main(["results", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{tmp_path / 'run'}: 0 trials; minimize objective"
    for load in (mpiopt.load_history, mpiopt.load_timeline, mpiopt.load_results):
        with pytest.raises(ConfigError, match="no such run directory"):
            load(tmp_path / "nowhere")


@pytest.mark.parametrize("var, value, expected", [
    ("MPIOPT_FRESH_SHARE", "abc", "expected a number >= 0, got 'abc'"),
    ("MPIOPT_SPIN", "-1", "expected a number from 0 to 1, got '-1'"),
    ("MPIOPT_MAX_BACKOFF", "1e9", "expected a number from 0 to 1, got '1e9'"),
    ("MPIOPT_PROGRESS_S", "-1", "expected a number >= 0, got '-1'"),
    ("MPIOPT_THREADS", "0", "expected a whole number >= 1"),
    ("MPIOPT_SEND_AHEAD", "yes", "expected one of 0, 1, always"),
    ("MPIOPT_LOG_LEVEL", "loud", "expected one of DEBUG"),
    ("MPIOPT_TF_LOGS", "yes", "expected one of 0, 1, got 'yes'"),
])
def test_a_bad_tuning_variable_is_one_line_and_exit_2(write_yaml, tmp_path, var, value, expected):
    one_error_line(run_cli(["check", write_yaml(SPACE)], cwd=tmp_path, env={var: value}),
                   f"environment: {var}: {expected}")


def test_tuning_variables_read_empty_as_unset_and_log_levels_in_any_case(monkeypatch):
    from mpiopt import _env
    from mpiopt._errors import ConfigError

    for name in _env.SETTINGS:
        monkeypatch.setenv(name, " ")
        assert _env.get(name) == _env.SETTINGS[name][1]
    monkeypatch.setenv("MPIOPT_LOG_LEVEL", "debug")
    monkeypatch.setenv("MPIOPT_FRESH_SHARE", "0.01")
    monkeypatch.setenv("MPIOPT_THREADS", "4")
    _env.check()
    assert (_env.get("MPIOPT_LOG_LEVEL"), _env.get("MPIOPT_FRESH_SHARE"), _env.get("MPIOPT_THREADS")) == \
        ("DEBUG", 0.01, 4)
    monkeypatch.setenv("MPIOPT_COLLECTIVE_SPIN", "inf")
    with pytest.raises(ConfigError, match="MPIOPT_COLLECTIVE_SPIN"):
        _env.check()
    monkeypatch.delenv("MPIOPT_COLLECTIVE_SPIN")
    monkeypatch.setenv("MPIOPT_COORDINATOR_SILENT_S", "2")  # shorter than a few pulses: refused
    with pytest.raises(ConfigError, match="MPIOPT_COORDINATOR_SILENT_S: expected a number >= 6"):
        _env.check()


def test_a_misspelt_tuning_variable_is_warned_of_with_the_name_meant(write_yaml, tmp_path):
    out = run_cli(["check", write_yaml(SPACE)], cwd=tmp_path,
                  env={"MPIOPT_THREAD": "4", "mpiopt_log_level": "debug", "MPIOPT_TEST_SLEEP": "1"})
    assert out.returncode == 0, out.stderr
    warned = [line.split("WARNING: ", 1)[1] for line in out.stderr.splitlines() if "is not a variable" in line]
    assert warned == ["MPIOPT_THREAD is not a variable mpiopt reads, so it sets nothing (did you mean MPIOPT_THREADS?)",
                      "mpiopt_log_level is not a variable mpiopt reads, so it sets nothing "
                      "(did you mean MPIOPT_LOG_LEVEL?)"]  # a harness's own MPIOPT_TEST_SLEEP is no near miss


def test_the_launcher_rank_and_size_are_read_before_mpi_starts(monkeypatch):
    from mpiopt import _env

    for name in _env.RANK_VARIABLES + _env.SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert (_env.launcher_rank(), _env.launcher_size()) == (0, 1)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("PMI_RANK", "")  # empty: passed over, as one that is not a number
    monkeypatch.setenv("PMI_SIZE", "x")
    assert (_env.launcher_rank(), _env.launcher_size()) == (3, 4)
    monkeypatch.setenv("PMI_RANK", "2")
    assert _env.launcher_rank() == 2
    for name in _env.RANK_VARIABLES + _env.SIZE_VARIABLES:  # srun over PMIx
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PMIX_RANK", "3")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "65")
    assert (_env.launcher_rank(), _env.launcher_size()) == (3, 65)


@pytest.mark.parametrize("command", ["search", "train", "check"])
def test_np_under_mpiexec_is_refused_by_every_command(monkeypatch, capsys, write_yaml, command):
    from mpiopt import _env
    from mpiopt.cli import main

    for name in _env.RANK_VARIABLES + _env.SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "3")  # as mpiexec -n 3 sets it: MPI itself is never started here
    space = write_yaml("objective: {function: objectives.py:branin}\nparameters: {x: {type: real, low: 0, high: 1}}\n")
    assert main([command, str(space), "--np", "9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["mpiopt: error: --np: already running under mpiexec; give the rank count to mpiexec only"]


def test_every_command_declares_the_options_main_reads():
    from mpiopt.cli import build_parser
    from mpiopt.launch import _without_np

    for argv in (["search", "s.yaml"], ["check", "s.yaml"], ["train", "s.yaml"], ["results", "d"]):
        args = build_parser().parse_args(argv)
        assert {"trials", "seed", "np", "top", "trace"} <= set(vars(args)), argv
    assert build_parser().parse_args(["results", "d"]).top is None  # given or not: --best refuses a --top
    assert build_parser().parse_args(["search", "s.yaml", "--np", "3"]).np == 3
    argv = ["search", "s.yaml", "--np", "3", "--np=4", "--seed", "1"]
    assert _without_np(argv) == ["search", "s.yaml", "--seed", "1"]


@pytest.mark.parametrize("argv,expected", [
    (["search", "s.yaml", "--trails", "5"], "--trails 5 (did you mean '--trials'?) (see `mpiopt search --help`)"),
    (["results", "d", "--formt=csv"], "--formt=csv (did you mean '--format'?) (see `mpiopt results --help`)"),
    (["results", "d", "--xyz"], "--xyz (see `mpiopt results --help`)"),
])
def test_a_misspelt_option_is_named(argv, expected):
    from mpiopt.cli import build_parser

    with pytest.raises(ConfigError) as info:
        build_parser().parse_args(argv)
    assert str(info.value) == f"unrecognized arguments: {expected}"


def test_a_misspelt_command_is_named():
    from mpiopt.cli import build_parser

    with pytest.raises(ConfigError) as info:
        build_parser().parse_args(["serch", "s.yaml"])
    assert str(info.value).endswith("(did you mean 'search'?) (see `mpiopt --help`)")


def test_results_records_are_json_ready():
    import numpy as np
    import pandas as pd

    from mpiopt._results_view import records

    df = pd.DataFrame({"start": pd.to_datetime(["2024-01-02T03:04:05Z", None], utc=True),
                       "epochs": pd.array([3, None], dtype="Int64"), "objective": [np.float64(0.5), float("nan")],
                       "n": np.array([1, 2], dtype=np.int32), "status": ["completed", "failed"]})
    rows = records(df)
    assert rows == [
        {"start": "2024-01-02T03:04:05+00:00", "epochs": 3, "objective": 0.5, "n": 1, "status": "completed"},
        {"start": None, "epochs": None, "objective": None, "n": 2, "status": "failed"}]
    json.dumps(rows, allow_nan=False)
    assert all(type(v) in (str, int, float, type(None)) for row in rows for v in row.values())


def test_check_says_what_a_search_would_find_in_its_run_directory(write_yaml, tmp_path):
    from mpiopt.journal import RunDir

    space = write_yaml(SPACE)
    (tmp_path / "afile").write_text("")
    one_error_line(run_cli(["check", space, "--out", "afile"], cwd=tmp_path),
                   "afile: cannot write here: afile exists and is not a directory")
    assert run_cli(["check", space, "--out", "r"], cwd=tmp_path).stdout.endswith("  run dir     r (new)\n")
    rd = RunDir(tmp_path / "r")
    rd.open(resume=False, config_text="name: t\n")
    assert "  run dir     r (a search is running there now)" not in run_cli(["check", space, "--out", "r"],
                                                                          cwd=tmp_path).stdout  # no trial yet
    rd.append({"event": "start", "trial": 0, "params": {"x": 1.0, "y": 1.0}, "time": 1.0})
    assert "  run dir     r (a search is running there now)" in run_cli(["check", space, "--out", "r"],
                                                                      cwd=tmp_path).stdout
    rd.close()
    # the folder's config.yaml ("name: t") holds no parameters: another search's
    assert "  run dir     r (holds another search: its `parameters` differs (parameters added), so --resume would " \
        "be refused; choose another --out)" in run_cli(["check", space, "--out", "r"], cwd=tmp_path).stdout
    (tmp_path / "r" / "config.yaml").write_text("garbage\n")  # unreadable: the journal's trials tell the space
    assert "  run dir     r (holds another search (no readable config.yaml, and its trials' parameters differ: " \
        "none was given z, which this space has), so --resume would be refused; choose another --out)" in \
        run_cli(["check", write_yaml(SPACE.replace("  y:", "  z: {type: real, low: 0, high: 1}\n  y:"), "z.yaml"),
                 "--out", "r"], cwd=tmp_path).stdout
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "results.csv").write_text("a,b\n")  # the user's own, as search refuses it
    assert "  run dir     mine (holds results.csv but no trials.jsonl: a new search would overwrite it, so it would " \
        "be refused; choose another --out)" in run_cli(["check", space, "--out", "mine"], cwd=tmp_path).stdout


def test_check_says_what_a_resume_would_do_with_the_search_in_the_run_dir(write_yaml, tmp_path):
    space = write_yaml(SPACE)
    assert run_cli(["search", space, "--trials", "3"], cwd=tmp_path).returncode == 0
    said = run_cli(["check", space], cwd=tmp_path).stdout
    assert "  run dir     runs/cli-branin (holds a search, 3 of 8 trials finished: --resume continues it)" in said
    assert run_cli(["search", space, "--resume"], cwd=tmp_path).returncode == 0
    said = run_cli(["check", space], cwd=tmp_path).stdout
    assert "(holds a finished search of 8 trials: --resume --trials N, N above 8, runs more)" in said
    said = run_cli(["check", write_yaml(SPACE.replace("high: 10.0", "high: 11.0"), "other.yaml")],
                   cwd=tmp_path).stdout
    assert "(holds another search: its `parameters` differs (parameters.x.high 10.0 -> 11.0), so --resume would " \
           "be refused; choose another --out)" in said
    # the budget is the one --resume would run to: the larger of the file's and the last run's
    config = tmp_path / "runs" / "cli-branin" / "config.yaml"
    config.write_text(config.read_text().replace("trials: 8", "trials: 12"))  # as a --trials 12 run killed at 8
    said = run_cli(["check", space], cwd=tmp_path).stdout
    assert "(holds a search, 8 of 12 trials finished: --resume continues it)" in said
    config.write_text(config.read_text().replace("trials: 12", "trials: 5"))
    said = run_cli(["check", write_yaml(SPACE.replace("trials: 8", "trials: 6"), "fewer.yaml")], cwd=tmp_path).stdout
    assert "(holds a search that started 8 trials, more than its budget of 6: --resume --trials 8 or more " \
        "continues it)" in said


def test_check_prints_the_plan(write_yaml, tmp_path):
    space = write_yaml(SPACE + "training: {group_size: 2}\n")
    p = run_cli(["check", space, "--np", "8"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "8 ranks: 1 coordinator (rank 0) + 1 group of 3 ranks, 2 groups of 2 ranks" in p.stdout
    assert "budget 8 trials" in p.stdout
    notes = [ln for ln in p.stdout.splitlines() if ln.startswith("  note")]
    assert notes == ["  note        objectives.py:branin takes no comm, so it runs on each group's first rank: 4 ranks "
                     "idle (fn(params, comm) puts them to work; training.group_size: 1 makes each rank a group)"]
    # a function's plan shows the training keys it reads, not a model's
    assert "  training    group_size=2, ranks_per_gpu=1\n" in p.stdout and "runs to its end" in p.stdout
    p = run_cli(["check", write_yaml(SPACE.replace("trials: 8", "trials: 4"), "few.yaml")], cwd=tmp_path)
    assert "  note        search.initial_points 4 is not below search.trials 4: every trial is one of the initial " \
        "design's points" in p.stdout
    discrete = SPACE.replace("x: {type: real, low: -5.0, high: 10.0}", "x: {type: integer, low: -2, high: 2}")
    discrete = discrete.replace("y: {type: real, low: 0.0, high: 15.0}", "y: {choices: [0.5, 2.5]}")
    p = run_cli(["check", write_yaml(discrete.replace("trials: 8", "trials: 13"), "ten.yaml")], cwd=tmp_path)
    assert "  note        search.trials 13 is more than the 10 distinct points of the space: 3 trials will repeat " \
        "a point already tried" in p.stdout
    p = run_cli(["check", write_yaml(SPACE.replace("{function: objectives.py:branin}",
                                                    "{function: objectives.py:branin, maximize: val_loss}"),
                                     "loss.yaml")], cwd=tmp_path)
    assert "note        objective: maximize val_loss: the search takes its highest value as the best (did you " \
        "mean minimize?)" in p.stdout
    p = run_cli(["check", space], cwd=tmp_path)
    assert "1 process: the coordinator and one 1-rank group take turns" in p.stdout
    assert "note        training.group_size 2 needs at least 3 ranks" in p.stdout
    assert "note        objectives.py:branin takes no comm: under mpiexec it runs on each group's first rank, and " \
        "the other 1 of each group of 2 idle" in p.stdout
    p = run_cli(["check", write_yaml(SPACE + "training: {group_size: 3}\n"), "--np", "3"], cwd=tmp_path)
    assert "note        training.group_size 3 is more than the 2 ranks beside the coordinator: one group of 2" \
        in p.stdout
    p = run_cli(["check", write_yaml(SPACE), "--np", "3"], cwd=tmp_path)
    assert "group 0: world rank 1\n" in p.stdout and "group 1: world rank 2\n" in p.stdout


def test_a_training_in_a_python_process_lets_its_folder_go_as_it_ends(write_yaml, tmp_path, cli_here):
    # mpiopt.cli.main called from Python (a notebook, a test): the folder's lock goes with the
    # training, not with the process, so what follows finds a training that ended
    from mpiopt.analysis import is_live

    space = write_yaml(SPACE)
    assert cli_here("train", space, "--set", "x=1", "--out", "one").returncode == 0
    assert not is_live(tmp_path / "one")
    one_error_line(cli_here("train", space, "--set", "x=2", "--out", "one"), "already holds a training run")


def tiny_space(folder: Path, more: str) -> Path:
    import shutil

    shutil.copy(SPACES / "tiny_model.py", folder)
    space = folder / "t.yaml"
    space.write_text("objective: {model: tiny_model.py:build_model, data: tiny_model.py:load_data, "
                     "loss: sparse_categorical_crossentropy, metrics: [accuracy], maximize: val_accuracy}\n"
                     f"parameters: {{units: {{type: integer, low: 2, high: 16}}}}\n{more}\n")
    return space


@pytest.mark.slow
def test_a_resume_of_a_spent_budget_says_so_without_checking_the_model_again(tmp_path, cli_here, monkeypatch):
    space = tiny_space(tmp_path, "search: {trials: 2, initial_points: 2}\ntraining: {epochs: 1}")
    p = cli_here("search", space)
    assert p.returncode == 0 and "checking that tiny_model.py:build_model trains on its data" in p.stderr, p.stderr
    p = cli_here("search", space, "--resume")
    assert p.returncode == 0 and "the budget of 2 trials is spent" in p.stderr and "checking that" not in p.stderr
    p = cli_here("search", space, "--resume", "--trials", "3")
    assert p.returncode == 0 and "checking that" in p.stderr and len(mpiopt.load_results(tmp_path / "runs" / "t")) == 3
    # data the model cannot train on: the check refuses the resume, which leaves the budget as it was
    with open(tmp_path / "tiny_model.py", "a") as f:
        f.write("\n_good = load_data\n\n\ndef load_data():\n    (x, y), val = _good()\n    return (x, y[:-3]), val\n")
    for loaded in [name for name in sys.modules if name.startswith("_mpiopt_user_tiny_model_")]:
        monkeypatch.delitem(sys.modules, loaded)  # read again, as a new process would
    monkeypatch.setattr("mpiopt.learn._data._cache", {})
    config = (tmp_path / "runs" / "t" / "config.yaml").read_bytes()
    p = cli_here("search", space, "--resume", "--trials", "4")
    assert p.returncode == 2 and "train features have 500 samples but labels have 497" in p.stderr, p.stderr
    assert (tmp_path / "runs" / "t" / "config.yaml").read_bytes() == config


@pytest.mark.slow
def test_an_interrupted_training_says_how_far_it_got_and_load_model_takes_its_best_epoch(tmp_path, cli_here,
                                                                                         monkeypatch):
    # a Ctrl-C (or a batch job's end) after a few epochs: what they trained stays usable
    import csv
    import runpy
    import signal
    import threading
    import time

    import numpy as np
    import yaml

    space = tiny_space(tmp_path, "training: {epochs: 1000, batch_size: 64, learning_rate: 0.01}")
    history = tmp_path / "t" / "history.csv"

    def interrupt_after_three_epochs():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (history.exists() and history.read_text().count("\n") >= 4):
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    from mpiopt import launch

    # as in a fresh `mpiopt` process: Python's Ctrl-C, no interrupt taken yet (an earlier
    # in-process command of this test process may have left either otherwise)
    monkeypatch.setattr(launch, "_interrupts", launch._Interrupts())
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_after_three_epochs, daemon=True).start()
    try:
        p = cli_here("train", space, "--out", "t")
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    assert p.returncode == 130, p.stderr
    assert "mpiopt.load_model('t') loads the best epoch its checkpoint holds" in p.stderr
    outcome = yaml.safe_load((tmp_path / "t" / "train.yaml").read_text())["outcome"]
    assert outcome["status"] == "interrupted" and 3 <= outcome["epochs"] < 1000, outcome
    assert not (tmp_path / "t" / "best.weights.h5").exists()
    model = mpiopt.load_model(tmp_path / "t")
    _, (x_val, y_val) = runpy.run_path(str(tmp_path / "tiny_model.py"))["load_data"]()
    accuracy = float(np.mean(model.predict(x_val, verbose=0).argmax(axis=1) == y_val))
    reported = [float(r["val_accuracy"]) for r in csv.DictReader(open(history))]
    # the best of the epochs the checkpoint holds (the last reported one may have come after it)
    assert max(reported[:-1]) - 1e-6 <= accuracy and min(abs(accuracy - r) for r in reported) < 1e-6, \
        (accuracy, reported)


def test_train_a_function_objective(write_yaml, tmp_path):
    p = run_cli(["train", write_yaml(SPACE), "--set", "x=3.14159", "--set", "y=2.275"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "objective = 0.397" in p.stdout
    # a function trains no epochs and writes no history: the line names neither
    assert "epoch" not in p.stdout and "history" not in p.stdout
    # its folder holds only train.yaml, and a second training there is refused as for a model
    again = run_cli(["train", write_yaml(SPACE), "--set", "x=1"], cwd=tmp_path)
    assert again.returncode == 2 and "already holds a training run (train.yaml)" in again.stderr, again.stderr
    # one that reports its steps writes them to history.csv, as a model's training does its epochs
    curve = write_yaml(SPACE.replace("branin", "curve_or_fail"), "curve.yaml")
    p = run_cli(["train", curve, "--set", "x=3.14159", "--set", "y=2.275", "--out", "curve"], cwd=tmp_path,
                env={"MPIOPT_TEST_SLEEP": "0"})
    assert p.returncode == 0, p.stderr
    assert f"history in {Path('curve') / 'history.csv'}" in p.stdout
    history = (tmp_path / "curve" / "history.csv").read_text().splitlines()
    assert history[0] == "epoch,objective,loss" and len(history) == 10 and history[9].startswith("9,")


def test_a_search_whose_reader_left_ends_as_it_would_have(write_yaml, tmp_path):
    # `mpiopt search space.yaml | head -1`: the closing lines after the first find no reader (here
    # none finds one, where head may still be reading the second)
    read_end, write_end = os.pipe()
    os.close(read_end)
    search = subprocess.run([sys.executable, "-m", "mpiopt", "search", str(write_yaml(SPACE))], cwd=tmp_path,
                            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
                            env={**os.environ, "MPIOPT_TEST_SLEEP": "0"})
    os.close(write_end)
    assert search.returncode == 0, search.stderr
    assert "error" not in search.stderr and "8 trials (8 completed)" in search.stderr
    assert "results: runs/cli-branin/results.csv" in (tmp_path / "runs" / "cli-branin" / "search.log").read_text()


def test_train_again_where_a_training_failed_or_stopped_before_its_first_epoch(write_yaml, tmp_path):
    import yaml

    failing = write_yaml(SPACE.replace("objectives.py:branin", "objectives.py:fails_then_returns_string"))
    args = ["--set", "x=3.14159", "--set", "y=2.275", "--out", "one"]
    p = run_cli(["train", failing, *args], cwd=tmp_path)
    assert p.returncode == 1 and "training failed: RuntimeError: the first call fails" in p.stderr, p.stderr
    info = yaml.safe_load((tmp_path / "one" / "train.yaml").read_text())
    assert info["outcome"] == {"status": "failed", "error": "RuntimeError: the first call fails"}
    # the user fixes the objective and runs the same command: nothing there is worth keeping
    p = run_cli(["train", write_yaml(SPACE), *args], cwd=tmp_path)
    assert p.returncode == 0 and "objective = 0.397" in p.stdout, p.stderr
    assert not (tmp_path / "one" / "error.txt").exists()
    outcome = yaml.safe_load((tmp_path / "one" / "train.yaml").read_text())["outcome"]
    assert outcome["status"] == "completed" and round(outcome["objective"], 3) == 0.398
    # a completed training is kept, though its folder holds train.yaml alone
    p = run_cli(["train", write_yaml(SPACE), *args], cwd=tmp_path)
    assert p.returncode == 2 and "already holds a training run (train.yaml)" in p.stderr, p.stderr
    # a training stopped (Ctrl-C, kill -9) before its first epoch wrote train.yaml without an outcome
    info.pop("outcome")
    (tmp_path / "one" / "train.yaml").write_text(yaml.safe_dump(info))
    # so does one running there now, which holds the folder's lock
    from mpiopt.journal import hold_the_lock

    running = hold_the_lock(tmp_path / "one", "training", "one")
    p = run_cli(["train", write_yaml(SPACE), *args], cwd=tmp_path)
    assert p.returncode == 2 and "one: another training is running in this directory" in p.stderr, p.stderr
    os.close(running)
    p = run_cli(["train", write_yaml(SPACE), *args], cwd=tmp_path)
    assert p.returncode == 0, p.stderr


def test_a_chdir_in_the_objective_moves_no_file_of_the_search_or_the_training(write_yaml, tmp_path):
    space = write_yaml(SPACE.replace("objectives.py:branin", "objectives.py:changes_directory"))
    p = run_cli(["search", space], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "8 trials (8 completed)" in p.stderr and "results: runs/cli-branin/results.csv" in p.stdout
    assert len((tmp_path / "runs" / "cli-branin" / "results.csv").read_text().splitlines()) == 9
    p = run_cli(["train", space, "--set", "x=3.14159", "--set", "y=2.275", "--out", "one"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"history in {Path('one') / 'history.csv'}" in p.stdout
    assert (tmp_path / "one" / "history.csv").read_text().splitlines() == ["epoch,objective", "1,1.0"]
    assert not list((tmp_path / "elsewhere").rglob("*.csv"))


TINY_MODEL = """
name: tiny
objective: {model: tiny_model.py:build_model, data: tiny_model.py:load_bad_data,
            loss: sparse_categorical_crossentropy, metrics: [accuracy]}
parameters: {units: {type: integer, low: 2, high: 8}}
training: {epochs: 1}
"""


def test_train_refuses_an_optimizer_set_for_a_model_compiled_with_its_own(write_yaml, tmp_path, cli_here):
    import shutil

    from conftest import SPACES

    shutil.copy(SPACES / "tiny_model.py", tmp_path / "tiny_model.py")
    model = write_yaml(TINY_MODEL.replace("build_model", "build_compiled").replace("load_bad_data", "load_data")
                       .replace("loss: sparse_categorical_crossentropy, metrics: [accuracy]", "maximize: val_accuracy"),
                       "tiny.yaml")
    one_error_line(cli_here("train", model, "--set", "optimizer=rmsprop", "--out", "t"),
                   "mpiopt: error: --set optimizer: tiny_model.py:build_compiled compiles the model with its own "
                   "optimizer (sgd), which its trials train with, so --set optimizer would change nothing: leave "
                   "it out (the model's own optimizer trains), or return the model uncompiled")
    assert not (tmp_path / "t").exists()


def test_train_refuses_what_a_search_refuses_and_a_search_folder(write_yaml, tmp_path, cli_here):
    import shutil

    from conftest import SPACES

    shutil.copy(SPACES / "tiny_model.py", tmp_path / "tiny_model.py")
    model = write_yaml(TINY_MODEL, "tiny.yaml")
    # values across training keys, checked as the file's are (before TensorFlow starts)
    one_error_line(run_cli(["train", model, "--set", "momentum=0.9"], cwd=tmp_path),
                   "--set: training.momentum: sets the momentum of sgd and rmsprop, but training.optimizer is adam")
    one_error_line(run_cli(["train", model, "--set", "early_stopping={monitor: val_acc, patience: 1}"], cwd=tmp_path),
                   "training.early_stopping.monitor: 'val_acc' is not a metric", "did you mean 'val_accuracy'?")
    # data every trial would fail on: the preflight's one line and exit 2, no folder left
    one_error_line(run_cli(["train", model, "--out", "t"], cwd=tmp_path),
                   "train features have 500 samples but labels have 497")
    assert not (tmp_path / "t").exists()
    # NaN in a training file the preflight does not read whole: found as training reads it, exit 2
    import h5py
    import numpy as np

    (tmp_path / "d").mkdir()
    for i, bad in enumerate((False, True, False)):
        x = np.random.default_rng(i).normal(size=(100, 8)).astype(np.float32)
        x[50, 3] = np.nan if bad else x[50, 3]
        with h5py.File(tmp_path / "d" / f"t{i}.h5", "w") as h:
            h["features"], h["labels"] = x, (x[:, 0] > 0).astype(np.int64)
    h5 = write_yaml(TINY_MODEL.replace("data: tiny_model.py:load_bad_data",
                                       "data: {train: [d/t0.h5, d/t1.h5], val: d/t2.h5}"), "h5.yaml")
    p = cli_here("train", h5, "--out", "nan")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("mpiopt: error: ") and "h5.yaml: objective.data: " in last
    assert "t1.h5: features: sample 50 holds NaN or inf" in last
    # a search's folder, whose best.weights.h5 load_model would take for the search's best
    p = run_cli(["search", write_yaml(SPACE)], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    one_error_line(run_cli(["train", write_yaml(SPACE), "--out", "runs/cli-branin"], cwd=tmp_path),
                   "runs/cli-branin: holds a search (trials.jsonl); train into another --out")


@pytest.mark.parametrize("world,size,expected", [
    (1, 1, [(0,)]),
    (2, 1, [(1,)]),
    (5, 1, [(1,), (2,), (3,), (4,)]),
    (5, 2, [(1, 2), (3, 4)]),
    (8, 2, [(1, 2, 3), (4, 5), (6, 7)]),
    (7, 4, [(1, 2, 3, 4, 5, 6)]),
    (4, 8, [(1, 2, 3)]),
    (64, 4, None),
])
def test_group_plan(world, size, expected):
    from mpiopt.transport import plan_groups

    plan = plan_groups(world, size)
    if expected is not None:
        assert [tuple(g) for g in plan.groups] == expected
    ranks = sorted(r for g in plan.groups for r in g)
    assert ranks == (list(range(1, world)) if world > 1 else [0])
    sizes = [len(g) for g in plan.groups]
    assert max(sizes) - min(sizes) <= 1


def test_results_timeline(write_yaml, tmp_path):
    space = write_yaml(SPACE)
    assert run_cli(["search", space], cwd=tmp_path).returncode == 0
    p = run_cli(["results", tmp_path / "runs" / "cli-branin", "--timeline"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "1 group, 8 trials" in p.stdout and "group utilization" in p.stdout and "dispatch latency" in p.stdout
    df = mpiopt.load_results(tmp_path / "runs" / "cli-branin")
    assert df.dispatch_ms.notna().all() and (df.dispatch_ms >= 0).all()
    # in csv or json, every stretch of training: what load_timeline gives
    p = run_cli(["results", tmp_path / "runs" / "cli-branin", "--timeline", "--format", "csv"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[0] == "trial,status,epochs,start,end,group,ranks,dispatch_ms,wait_ms" and len(lines) == 9
    p = run_cli(["results", tmp_path / "runs" / "cli-branin", "--timeline", "--format", "json"], cwd=tmp_path)
    assert [r["trial"] for r in json.loads(p.stdout)] == list(range(8))
    # what does not go together is refused, not ignored
    for flags, what in [(["--best", "--top", "2"], "--best and --top: give one"),
                        (["--timeline", "--best"], "--timeline and --best: give one"),
                        (["--timeline", "--top", "3"], "--timeline and --top: give one"),
                        (["--timeline", "--format", "yaml"], "--timeline: --format table, csv or json")]:
        one_error_line(run_cli(["results", tmp_path / "runs" / "cli-branin", *flags], cwd=tmp_path), what)


def test_trace_of_a_function_objective_is_refused(write_yaml, tmp_path, capsys):
    from mpiopt.cli import main

    assert main(["search", str(write_yaml(SPACE)), "--trace", "--out", str(tmp_path / "run")]) == 2
    assert "--trace records a model's training steps; a `function` objective has none" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_timeline_counts_a_trial_continued_on_another_group_on_each_and_once_in_all():
    import pandas as pd

    from mpiopt import _results_view as view
    from mpiopt.analysis import timeline

    t = pd.Timestamp("2026-11-27T10:00:00", tz="UTC")
    s = pd.Timedelta(seconds=1)
    stretches = pd.DataFrame({"trial": [0, 1, 0], "status": ["paused", "pruned", "completed"], "epochs": [1, 1, 3],
                              "start": [t, t, t + s], "end": [t + s, t + s, t + 3 * s], "group": [0, 1, 1],
                              "ranks": [1, 1, 1]})
    per, summary = timeline(stretches)
    assert per.trials.tolist() == [1, 2] and per.stretches.tolist() == [1, 2]
    assert (summary["trials"], summary["stretches"]) == (2, 3)
    assert "2 groups, 2 trials in 3 stretches (a trial promoted from a pause, or run again after a kill, trains in " \
           "several, on any group)" in view.timeline_line("runs/x", summary)
    assert "trials," in view.timeline_line("runs/x", timeline(stretches.head(2))[1])  # no stretches said


def test_timeline_counts_a_group_lost_with_its_node_only_while_it_lived():
    import pandas as pd

    from mpiopt import _results_view as view
    from mpiopt.analysis import lost_intervals, timeline

    t = pd.Timestamp("2026-11-27T10:00:00", tz="UTC")
    s = pd.Timedelta(seconds=1)
    stretches = pd.DataFrame({"trial": [0, 1, 2], "status": ["completed"] * 3, "epochs": [3, 3, 3],
                              "start": [t, t, t + 10 * s], "end": [t + 10 * s, t + 5 * s, t + 20 * s],
                              "group": [0, 1, 0], "ranks": [1, 1, 1]})
    per, summary = timeline(stretches)  # group 1 idle from 5 s on, as far as the table tells
    assert per.utilization.tolist() == [1.0, 0.25] and summary["utilization"] == 25 / 40
    stretches.attrs["lost"] = lost_intervals([{"event": "lost", "group": 1, "time": (t + 5 * s).timestamp()}])
    per, summary = timeline(stretches)  # its node died at 5 s: it was busy all its life
    assert per.utilization.tolist() == [1.0, 1.0] and summary["utilization"] == 1.0 and summary["lost"] == [1]
    assert "group utilization 1.000 (group 1 lost with a node: counted while alive)" in \
        view.timeline_line("runs/x", summary)
    back = [{"event": "lost", "group": 1, "time": (t + 5 * s).timestamp()},
            {"event": "back", "group": 1, "time": (t + 15 * s).timestamp()}]
    assert lost_intervals(back) == {1: [((t + 5 * s).timestamp(), (t + 15 * s).timestamp())]}
    stretches.attrs["lost"] = lost_intervals(back)  # it came back at 15 s: idle from then on
    assert timeline(stretches)[0].utilization.tolist() == [1.0, 0.5]
    # its node died at 3 s and the coordinator noticed 2 s later, cutting its trial there: it was
    # busy all the 3 s it lived, not busy 5 s of 5
    silent = [{"event": "lost", "group": 1, "time": (t + 5 * s).timestamp(), "silent_s": 2.0}]
    assert lost_intervals(silent) == {1: [((t + 3 * s).timestamp(), None)]}
    stretches.attrs["lost"] = lost_intervals(silent)
    per, summary = timeline(stretches)
    assert per.busy_s.tolist() == [20.0, 3.0] and per.utilization.tolist() == [1.0, 1.0]


def test_timeline_counts_a_groups_wait_for_its_next_trial_as_idle_but_not_the_gap_before_a_resume():
    import pandas as pd

    from mpiopt.analysis import run_spans, timeline

    t = pd.Timestamp("2026-11-27T10:00:00", tz="UTC")
    s = pd.Timedelta(seconds=1)
    at = [(t + k * s).timestamp() for k in range(200)]
    # one group: trials of 2 s with 2 s waits for the coordinator between them; killed after 10 s,
    # resumed at 100 s
    events = [{"event": "session", "time": at[0]}, {"event": "start", "trial": 0, "time": at[0]},
              {"event": "finish", "trial": 0, "start": at[0], "end": at[2]},
              {"event": "start", "trial": 1, "time": at[4]},
              {"event": "finish", "trial": 1, "start": at[4], "end": at[6]},
              {"event": "start", "trial": 2, "time": at[8]},
              {"event": "report", "trial": 2, "epoch": 1, "time": at[10]},
              {"event": "session", "time": at[100]}, {"event": "start", "trial": 2, "time": at[100]},
              {"event": "finish", "trial": 2, "start": at[100], "end": at[102]}]
    assert run_spans(events) == [(at[0], at[10], None), (at[100], at[102], None)]
    assert run_spans([e for e in events if e["event"] != "session"]) == []  # a journal from before runs were marked
    stretches = pd.DataFrame({"trial": [0, 1, 2, 2], "status": ["completed", "completed", "interrupted", "completed"],
                              "epochs": [1, 1, 1, 1], "start": [t, t + 4 * s, t + 8 * s, t + 100 * s],
                              "end": [t + 2 * s, t + 6 * s, t + 10 * s, t + 102 * s], "group": [0] * 4,
                              "ranks": [1] * 4})
    assert timeline(stretches)[1]["utilization"] == 1.0  # the table alone: only the trials' own intervals
    stretches.attrs["runs"] = run_spans(events)
    per, summary = timeline(stretches)
    assert summary["active_s"] == 12.0 and summary["utilization"] == 8 / 12  # the waits count, the 90 s gap not


def test_timeline_counts_a_group_only_in_the_runs_that_had_it():
    import pandas as pd

    from mpiopt.analysis import run_spans, timeline

    t = pd.Timestamp("2026-11-27T10:00:00", tz="UTC")
    s = pd.Timedelta(seconds=1)
    at = [(t + k * s).timestamp() for k in range(200)]
    # two groups for 10 s, killed, then a --resume with three groups for 10 s, each always busy
    events = [{"event": "session", "time": at[0], "groups": 2}, {"event": "report", "trial": 0, "time": at[10]},
              {"event": "session", "time": at[100], "groups": 3}, {"event": "report", "trial": 0, "time": at[110]}]
    assert run_spans(events) == [(at[0], at[10], 2), (at[100], at[110], 3)]
    stretches = pd.DataFrame({"trial": [0, 1, 0, 1, 2], "status": ["interrupted"] * 2 + ["completed"] * 3,
                              "epochs": [1] * 5, "start": [t] * 2 + [t + 100 * s] * 3,
                              "end": [t + 10 * s] * 2 + [t + 110 * s] * 3, "group": [0, 1, 0, 1, 2], "ranks": [1] * 5})
    stretches.attrs["runs"] = run_spans(events)
    per, summary = timeline(stretches)
    assert per.utilization.tolist() == [1.0, 1.0, 1.0] and summary["utilization"] == 1.0


def test_how_one_nodes_data_files_differ_from_world_rank_0s():
    from mpiopt.cli import _data_difference
    from mpiopt.launch import ranks_on_hosts

    ours = [("data/a.h5", 100), ("data/b.h5", 200)]
    assert _data_difference(ours, ours[:1]) == "no data/b.h5, which world rank 0 finds"
    assert _data_difference(ours, [*ours, ("data/c.h5", 5)]) == "also data/c.h5, which world rank 0 does not find"
    assert _data_difference(ours, [ours[0], ("data/b.h5", 1500)]) == \
        "data/b.h5 has 1,500 bytes, where world rank 0's has 200"
    assert ranks_on_hosts({3: "b", 4: "b"}) == "world ranks 3, 4 on host b"
    assert ranks_on_hosts({r: "ab"[r % 2] for r in range(1, 11)}) == \
        "world ranks 1, 2, 3, 4, 5, 6, 7, 8 and 2 more on hosts a, b"


def test_data_files_are_named_beside_the_space_file_or_by_their_whole_path(tmp_path):
    # node-local copies beside the space file compare by their place there; files named by an
    # absolute path compare as such, wherever each node keeps its space file
    import h5py
    import numpy as np

    from mpiopt.config import data_files_seen, load_config

    shared = tmp_path / "shared"
    shared.mkdir()
    with h5py.File(shared / "t.h5", "w") as h:
        h["features"], h["labels"] = np.zeros((4, 2), np.float32), np.zeros(4, np.int64)
    seen = []
    for folder in (tmp_path / "a", tmp_path / "b" / "deep"):
        folder.mkdir(parents=True)
        (folder / "m.py").write_text((SPACES / "tiny_model.py").read_text())
        h5 = shared / "t.h5"
        (folder / "s.yaml").write_text(
            f"name: x\nobjective: {{model: m.py:build_model, data: {{train: {h5}, val: {h5}}}, "
            "loss: sparse_categorical_crossentropy}\nparameters: {units: {type: integer, low: 2, high: 8}}\n")
        seen.append(data_files_seen(load_config(folder / "s.yaml")))
    assert seen[0] == seen[1] == {part: [(str(shared / "t.h5"), (shared / "t.h5").stat().st_size)]
                                  for part in ("train", "val")}


def test_yaml_numbers_without_a_dot(write_yaml, tmp_path):
    # PyYAML reads 1e-4 as text (YAML 1.1); a user writes it as a number
    from mpiopt.config import load_config

    cfg = load_config(write_yaml(SPACE.replace("low: -5.0, high: 10.0", "low: 1e-4, high: 1E1, prior: log-uniform")
                                 .replace("trials: 8", "trials: 8, target: -1e3")))
    x = cfg.space["x"]
    assert (x.low, x.high, cfg.search.target) == (1e-4, 10.0, -1000.0)


def test_results_best_as_yaml_and_the_error_column(write_yaml, tmp_path):
    import yaml

    p = run_cli(["search", write_yaml(SPACE.replace("py:branin", "py:picky"))], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "runs" / "cli-branin"
    df = mpiopt.load_results(out)
    best = df[df.status == "completed"].sort_values("objective").iloc[0]
    p = run_cli(["results", out, "--best", "--format", "yaml"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    exported = yaml.safe_load(p.stdout)
    assert exported["trial"] == best.trial and exported["objective"] == best.objective
    assert exported["parameters"] == {"x": best.params_x, "y": best.params_y}
    assert mpiopt.best_params(out) == exported["parameters"]
    # a function trains no model; without a scheduler its epochs mean nothing either
    assert set(exported["training"]) == {"group_size", "ranks_per_gpu", "time_limit"}
    failed = df[df.status == "failed"]
    assert len(failed) > 0
    table = run_cli(["results", out, "--top", "20"], cwd=tmp_path).stdout
    assert "error" in table.splitlines()[1] and "ValueError: x is too small" in table
    for n in failed.trial:  # the whole text is kept beside the trial
        assert "Traceback" in (out / "trials" / str(n) / "error.txt").read_text()
    assert "search.log" in {f.name for f in out.iterdir()}
    log = (out / "search.log").read_text()
    assert "trial 0 " in log
    # the coordinator's own figures are for the log, not for the user's console
    assert "coordinator CPU" in log and "coordinator CPU" not in p.stderr
    p = run_cli(["search", out.parent.parent / "space.yaml", "--resume"], cwd=tmp_path)  # a finished search
    assert p.returncode == 0, p.stderr
    cpu = (out / "search.log").read_text().rsplit("coordinator CPU ", 1)[1]
    assert int(cpu.split("(")[1].split("%")[0]) <= 200, cpu  # CPU and wall time over the same span


def test_a_search_in_which_no_trial_completed_exits_1(write_yaml, tmp_path):
    p = run_cli(["search", write_yaml(SPACE.replace("py:branin", "py:always_fails"))], cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("mpiopt: error:")]
    assert len(line) == 1 and line[0].startswith("mpiopt: error: no trial completed (8 did not); the most common error")
    assert line[0].endswith("ValueError: layer sizes do not match")
    # the log's closing line first, then why the search failed: the last lines a user sees
    lines = p.stderr.splitlines()
    assert lines.index(line[0]) > next(i for i, ln in enumerate(lines) if "search finished in" in ln)
    # one that max_failures stops did not finish, and its closing line says so
    stopped = SPACE.replace("py:branin", "py:always_fails").replace("seed: 0}", "seed: 0, max_failures: 3}")
    p = run_cli(["search", write_yaml(stopped, "stopped.yaml"), "--out", "stopped"], cwd=tmp_path)
    assert p.returncode == 1 and "search stopped after " in p.stderr and "finished in" not in p.stderr, p.stderr


def test_refusals_come_before_mpi_and_tensorflow_start(tmp_path):
    # a model objective: the search's preflight imports TensorFlow, a refusal must not wait for it
    from conftest import ROOT

    space = tmp_path / "m.yaml"
    space.write_text((ROOT / "searchspaces" / "mnist1d.yaml").read_text().replace("../examples/",
                                                                                   f"{ROOT}/examples/"))
    (tmp_path / "runs" / "mnist1d-mlp").mkdir(parents=True)
    (tmp_path / "runs" / "mnist1d-mlp" / "trials.jsonl").write_text('{"event":"start","trial":0,"params":{}}\n')
    (tmp_path / "runs" / "mnist1d-mlp" / "config.yaml").write_text("parameters: {units: {type: integer, low: 1, "
                                                                   "high: 2}}\n")
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "history.csv").write_text("epoch,loss\n1,0.5\n")
    code = ("import sys; from mpiopt.cli import main; rc = main(sys.argv[1:]); "
            "print(rc, 'tensorflow' in sys.modules, 'mpi4py.MPI' in sys.modules)")
    for args, what in ((["search", space], "already holds a search"),
                       (["search", space, "--resume", "--out", tmp_path / "none"], "no search to resume"),
                       (["train", space, "--out", tmp_path / "done"], "already holds a training run"),
                       (["search", space, "--resume"], "`parameters` differs")):
        p = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
        assert p.stdout.split() == ["2", "False", "False"], (args, p.stdout, p.stderr)
        assert what in p.stderr


def test_set_takes_numbers_as_the_parameter_holds_them(write_yaml, tmp_path):
    from mpiopt.cli import parse_sets
    from mpiopt.config import load_config

    cfg = load_config(write_yaml(SPACE.replace("  y:", "  n: {type: integer, low: 1, high: 500}\n  y:")))
    params, training = parse_sets(cfg, ["n=1e2", "x=3", "time_limit=3e1"])
    assert params["n"] == 100 and isinstance(params["n"], int) and params["x"] == 3.0
    assert training["time_limit"] == 30.0
    with pytest.raises(ConfigError, match="--set n: expected an integer, got 1.5"):
        parse_sets(cfg, ["n=1.5"])
    with pytest.raises(ConfigError, match="did you mean 'x'"):
        parse_sets(cfg, ["xx=1"])
    with pytest.raises(ConfigError, match="--set x: expected a finite number, got inf"):
        parse_sets(cfg, ["x=1e400"])  # YAML reads it as inf
    with pytest.raises(ConfigError, match="--set x: expected a finite number, got nothing"):
        parse_sets(cfg, ["x="])


@pytest.mark.parametrize("argv, error", [
    (["search", "s.yaml", "--seed", "99999999999999999999"], "--seed: expected an integer from 0 to 2**31, got 9999"),
    (["search", "s.yaml", "--seed", "-1"], "--seed: expected an integer from 0 to 2**31, got -1"),
    (["search", "s.yaml", "--trials", "99999999999999"], "--trials: expected an integer from 1 to 2**31"),
    (["check", "s.yaml", "--np", "99999999999"], "--np: expected an integer from 1 to 2**20, got 99999999999"),
    (["results", "runs/x", "--top", "0"], "--top: expected an integer from 1 to 2**31, got 0"),
])
def test_flags_out_of_range_are_refused_before_anything_runs(argv, error, capsys):
    # as the file's keys are: a seed numpy refuses, a rank count no machine has
    from mpiopt.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mpiopt: error: {error}") and err.count("\n") == 1, err


def test_set_warns_of_what_train_does_not_read_or_the_space_does_not_hold(write_yaml, caplog):
    from mpiopt.cli import parse_sets
    from mpiopt.config import load_config

    cfg = load_config(write_yaml(SPACE))
    with caplog.at_level("WARNING", logger="mpiopt"):
        parse_sets(cfg, ["group_size=3", "x=100"])
    said = [r.getMessage() for r in caplog.records]
    assert any("--set group_size: not read by mpiopt train" in m for m in said), said
    assert any("--set x=100.0 is outside the search space" in m for m in said), said


def test_train_notes_the_mode_keys_its_one_group_does_not_read(write_yaml, monkeypatch):
    from dataclasses import replace

    from mpiopt import _env
    from mpiopt.cli import _unread_mode_keys_in_training, parse_sets
    from mpiopt.config import load_config

    for name in _env.RANK_VARIABLES + _env.SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    cfg = load_config(write_yaml(TINY_MODEL.replace("training: {epochs: 1}", "training: {epochs: 1, kappa: 2}")),
                      resolve=False)

    def note(*sets):
        params, training = parse_sets(cfg, list(sets))
        return _unread_mode_keys_in_training(replace(cfg, training=training), params, list(sets))

    assert note("mode=easgd", "elastic_force=0.5") == ("training.kappa, training.elastic_force: not read where mpiopt "
                                                      "train runs on 1 rank, so they change nothing")
    monkeypatch.setenv("PMI_SIZE", "3")  # under mpiexec -n 3: a master and two workers
    assert note("mode=easgd", "elastic_force=0.5") == "training.kappa: not read where training.mode is easgd, so " \
                                                      "it changes nothing"
    assert note("mode=gem", "optimizer={name: sgd, momentum: 0.9}") is None
    assert note("mode=allreduce", "sync_every=4") == ("training.kappa, training.sync_every: not read where "
                                                     "training.mode is allreduce, so they change nothing")
    # a searched sync_every (--trial N of a search whose modes differ): the trial's value, no one's choice
    searched = TINY_MODEL.replace("parameters: {", "parameters: {sync_every: {type: integer, low: 1, high: 4}, ")
    cfg = load_config(write_yaml(searched.replace("{epochs: 1}", "{epochs: 1, group_size: 3}")), resolve=False)
    assert note("mode=allreduce") is None


def test_set_checks_a_searched_training_key_as_the_file_would(write_yaml):
    from mpiopt.cli import parse_sets
    from mpiopt.config import load_config

    cfg = load_config(write_yaml(SPACE.replace("  y:", "  learning_rate: {type: real, low: 1.0e-4, high: 0.1}\n  y:")))
    with pytest.raises(ConfigError, match=r"--set: learning_rate: expected a positive number, got -1.0"):
        parse_sets(cfg, ["learning_rate=-1"])
    params, training = parse_sets(cfg, ["learning_rate=0.5"])  # outside the space, warned of, trained as given
    assert params["learning_rate"] == training["learning_rate"] == 0.5
    with pytest.raises(ConfigError, match=r"--set learning_rate: given twice; give each name once"):
        parse_sets(cfg, ["learning_rate=0.5", " learning_rate=0.01"])


def test_one_process_says_it_ignores_the_group_size(write_yaml, tmp_path):
    p = run_cli(["search", write_yaml(SPACE + "training: {group_size: 2}\n")], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "training.group_size 2 needs at least 3 ranks (a coordinator and one group); with 1 process each trial " \
           "trains on 1 rank" in p.stderr


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("rank", [0, 1])
def test_a_stop_while_mpiopt_loads_ends_with_one_line_not_a_traceback(stop, rank):
    # the signal lands while the command's modules import (mpiexec forwards a Ctrl-C to every rank
    # in its first fraction of a second); the command itself never runs
    p = _stopped_while_mpiopt_loads(stop, rank, ignored=False)
    assert p.returncode == 130, p.stderr
    assert p.stderr == ("mpiopt: interrupted while starting; nothing was written\n" if rank == 0 else ""), p.stderr


def test_a_ctrl_c_the_process_was_started_to_ignore_stays_ignored_while_mpiopt_loads():
    p = _stopped_while_mpiopt_loads("SIGINT", 0, ignored=True)  # a background job's SIGINT
    assert p.returncode == 2 and p.stderr == "mpiopt: error: never-read: no such run directory\n", p.stderr


def _stopped_while_mpiopt_loads(stop: str, rank: int, *, ignored: bool) -> subprocess.CompletedProcess:
    """`mpiopt results never-read` on world rank `rank`, sent `stop` as mpiopt.cli imports; with
    SIGINT ignored from the start or Python's own handler (a shell's `&` would give SIG_IGN)."""
    script = f"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN if {ignored} else signal.default_int_handler)
class StopOnImport:
    def find_spec(self, name, path, target=None):
        if name == "mpiopt.cli":
            os.kill(os.getpid(), signal.{stop})
sys.meta_path.insert(0, StopOnImport())
from mpiopt._start import main
sys.argv = ["mpiopt", "results", "never-read"]
sys.exit(main())
"""
    env = {**os.environ, "PMI_RANK": str(rank)}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_sigterm_whose_interrupt_python_swallowed_still_ends_the_rank(rank):
    # the KeyboardInterrupt lands where Python only prints it (here: caught and dropped, as in a
    # weakref callback), or cleanup hangs: the rank must not live on without its coordinator, and
    # rank 0 still says the job was interrupted
    script = f"""
import os, signal, time
from mpiopt import launch
launch.TERM_GRACE_S = 0.5
launch._interrupts.line = (lambda: "the journal is intact") if {rank} == 0 else None
launch.catch_sigterm()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)
except KeyboardInterrupt:
    pass
time.sleep(30)
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    assert p.returncode == 130, p.stderr
    assert p.stderr == ("mpiopt: interrupted; the journal is intact\n" if rank == 0 else ""), p.stderr


def test_held_interrupts_wait_for_a_safe_point_a_twin_too_and_a_second_one_does_not(monkeypatch):
    import os
    import signal

    from mpiopt import launch

    def fresh() -> launch._Interrupts:  # no watchdog: this process lives on
        monkeypatch.setattr(launch, "_interrupts", launch._Interrupts())
        return launch._interrupts

    sigint = signal.getsignal(signal.SIGINT)
    before = signal.signal(signal.SIGTERM, launch._terminate)
    reached = []
    try:
        fresh()
        with pytest.raises(KeyboardInterrupt), launch.interrupts_at_safe_points():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)  # its twin (mpiexec forwards what a batch system sent each rank)
            reached.append("held")
            launch.raise_if_interrupted()
            reached.append("past the safe point")
        assert reached == ["held"]
        monkeypatch.setattr(launch, "DUPLICATE_S", 0.0)
        fresh()
        with pytest.raises(KeyboardInterrupt), launch.interrupts_at_safe_points():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C before the first was raised: at once
            reached.append("after the second")
        assert reached == ["held"]
        caught = fresh()
        with pytest.raises(KeyboardInterrupt), launch.interrupts_at_safe_points():  # none met: at the end
            os.kill(os.getpid(), signal.SIGTERM)
            reached.append("to the end")
        assert reached == ["held", "to the end"]
        os.kill(os.getpid(), signal.SIGTERM)  # once one was raised, later ones only arm the watchdog
        assert caught.raised and caught.alarm.qsize() == 2
    finally:
        signal.signal(signal.SIGTERM, before)
    assert signal.getsignal(signal.SIGINT) is sigint  # each safe-point block put back what it found


def test_train_names_where_its_values_come_from():
    from mpiopt.cli import _Job, _origin_of_values

    assert _origin_of_values(_Job(None, Path("o"), {}, None, ("units",))) == ""
    assert _origin_of_values(_Job(None, Path("o"), {}, 6)) == " (trial 6: its values and seed)"
    assert _origin_of_values(_Job(None, Path("o"), {}, 6, ("units", "epochs"))) == \
        " (trial 6: its values and seed, units, epochs as --set)"


def test_the_end_of_a_search_says_which_groups_it_gave_up_on_and_why():
    from mpiopt.cli import _retired_text
    from mpiopt.coordinator import Summary

    assert _retired_text(Summary({}, None, retired=[1], lost=[1])) == "group 1 lost (a node died)"
    assert _retired_text(Summary({}, None, retired=[2, 0, 1], lost=[0, 1])) == \
        "groups 0, 1 lost (a node died), group 2 did not come back (stuck)"
    assert _retired_text(Summary({}, None, retired=[3])) == "group 3 did not come back (stuck)"


def test_tensorflows_start_up_lines_are_dropped_and_others_kept(capfd, monkeypatch):
    import os

    from mpiopt._log import quiet_tensorflow

    monkeypatch.delenv("MPIOPT_TF_LOGS", raising=False)
    noise = [b"I0000 00:00:1.0 7187 cpu_feature_guard.cc:227] This TensorFlow binary is optimized ...\n",
             b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow ...\n",
             b"E0000 00:00:1.0 7187 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n"]
    with quiet_tensorflow():  # written to file descriptor 2, as TensorFlow's C++ does
        for line in [*noise, b"a user's own line\n"]:
            os.write(2, line)
    assert capfd.readouterr().err == "a user's own line\n"


def test_train_from_a_search_of_another_objective_says_so(write_yaml, tmp_path, caplog):
    from mpiopt.cli import trial_values
    from mpiopt.config import load_config
    from mpiopt.journal import RunDir

    cfg = load_config(write_yaml(SPACE))

    def ran(name: str, function: str, source: Path) -> Path:
        run = RunDir(tmp_path / name)
        run.open(resume=False, config_text=f"source: {source}\nobjective: {{function: {function}}}\n")
        run.append({"event": "start", "trial": 0, "params": {"x": 1.0, "y": 2.0}, "time": 1.0})
        run.append({"event": "finish", "trial": 0, "status": "completed", "objective": 3.0, "time": 2.0})
        run.close()
        return run.path

    other = ran("other", "objectives.py:with_comm", tmp_path / "space.yaml")
    (tmp_path / "sub").mkdir()
    same = ran("same", "../objectives.py:branin", tmp_path / "sub" / "space.yaml")  # the same file, named from sub/
    with caplog.at_level("WARNING", logger="mpiopt"):
        assert trial_values(other, "best", cfg) == (0, {"x": 1.0, "y": 2.0})
        trial_values(same, "best", cfg)
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"--trial 0: the search in {other} ran objectives.py:with_comm, not "
                    "objectives.py:branin: objectives.py:branin trains with its values"], said


def test_the_pareto_best_note_names_the_goal_best_goes_by():
    from mpiopt.cli import _pareto_best_note

    note = _pareto_best_note("d", (("params", "minimize"), ("val_mae", "minimize")), "--best")
    assert note == ("a Pareto search has no single best: --best is the best by its first goal that training "
                    "reports, val_mae (`mpiopt results d` lists the front)")


def test_an_accuracy_under_a_regression_loss_is_noted(write_yaml):
    from mpiopt.cli import _accuracy_of_a_regression_note
    from mpiopt.config import load_config

    def note(loss: str) -> str | None:
        return _accuracy_of_a_regression_note(load_config(write_yaml(
            f"objective: {{model: m.py:build, data: m.py:load, loss: {loss}, metrics: [accuracy], "
            "maximize: val_accuracy}\nparameters: {units: {type: integer, low: 2, high: 9}}\n"), resolve=False))

    assert note("mse") == ("objective: val_accuracy under loss mse: an accuracy counts exact matches of continuous "
                           "labels, nearly always none (a regression is judged by val_loss or val_mae)")
    assert note("sparse_categorical_crossentropy") is None


def test_train_of_a_trial_the_search_stopped_says_how_far_it_got(write_yaml, tmp_path, caplog):
    from mpiopt.cli import trial_values
    from mpiopt.config import load_config
    from mpiopt.journal import RunDir

    cfg = load_config(write_yaml(SPACE))
    run = RunDir(tmp_path / "run")
    run.open(resume=False, config_text=f"source: {tmp_path / 'space.yaml'}\n")
    for n, status in ((0, "completed"), (1, "pruned")):
        run.append({"event": "start", "trial": n, "params": {"x": 1.0, "y": 2.0}, "time": 1.0})
        run.append({"event": "finish", "trial": n, "status": status, "objective": 3.0 if n == 0 else None,
                    "epochs": 3, "time": 2.0})
    run.close()
    with caplog.at_level("WARNING", logger="mpiopt"):
        trial_values(run.path, "0", cfg)
        trial_values(run.path, "1", cfg)
    said = [r.getMessage() for r in caplog.records]
    assert said == ["--trial 1: the search left it pruned at epoch 3; this trains it to the end of its training"]


def test_the_best_of_a_pareto_search_breaks_a_tie_on_its_first_goal_by_the_front(tmp_path):
    import pandas as pd

    from mpiopt.analysis import best_trial, best_trials
    from mpiopt.journal import RunDir

    run = RunDir(tmp_path / "run")
    run.open(resume=False, config_text="objective:\n  function: f.py:f\n  pareto: {a: minimize, b: minimize}\n")
    for n, (a, b) in enumerate(((0.0, 2.0), (0.0, 1.0), (1.0, 0.0))):  # trial 1 dominates trial 0
        run.append({"event": "start", "trial": n, "params": {"x": float(n)}, "time": 1.0})
        run.append({"event": "finish", "trial": n, "status": "completed", "objective": a,
                    "metrics": {"a": a, "b": b}, "time": 2.0})
    run.close()
    assert best_trial(run.path) == 1
    table = pd.DataFrame({"trial": [0, 1, 2], "status": "completed", "objective": [0.0, 0.0, 1.0],
                          "pareto": [False, True, True]})
    assert best_trials(table, "minimize").trial.tolist() == [1, 0, 2]
    p = run_cli(["results", str(run.path), "--best", "--format", "csv"], cwd=tmp_path)
    assert p.stdout.splitlines()[1].startswith("1,"), p.stdout


def test_the_stopped_line_of_a_search_says_whether_its_journal_is_left(tmp_path):
    # a run directory deleted while the search ran ends in a file error: its line must not call
    # the journal intact
    from mpiopt import cli

    job = cli._Job(cfg=None, out=tmp_path / "run")
    assert cli._search_stopped(job) == f"{tmp_path / 'run' / 'trials.jsonl'} is gone: there is nothing to resume"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trials.jsonl").touch()
    assert cli._search_stopped(job) == "the journal is intact: continue with --resume"


def test_a_ctrl_c_as_a_search_finishes_says_it_had_finished(write_yaml, tmp_path):
    # the Ctrl-C lands while the closing lines are printed: nothing is left to resume
    space = write_yaml("""
        objective: {function: objectives.py:branin}
        parameters: {x: {type: real, low: -5.0, high: 10.0}, y: {type: real, low: 0.0, high: 15.0}}
        search: {trials: 2}
    """, name="fin")
    script = f"""
import os, signal, sys, time
from mpiopt import cli
finish = cli._finish
def interrupted_finish(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
cli._finish = interrupted_finish
sys.exit(cli.main(["search", {str(space)!r}]))
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 130, p.stderr
    assert p.stderr.splitlines()[-1] == ("mpiopt: interrupted; the search had finished: its results are in "
                                         f"{Path('runs') / 'fin' / 'results.csv'}"), p.stderr


@pytest.mark.parametrize("stopped, said", [(None, " after 2 epochs, "),
                                           ("target", " after 2 epochs (stopped early: training.target reached), "),
                                           ("early_stopping", " after 2 epochs (stopped early: "
                                                              "training.early_stopping), ")])
def test_train_says_why_its_training_ended_before_its_epochs(tmp_path, capsys, stopped, said):
    from types import SimpleNamespace

    from mpiopt.cli import _say_training_outcome
    from mpiopt.learn import TrainOutcome
    from mpiopt.trial import TrialResult

    cfg = SimpleNamespace(objective=SimpleNamespace(metric="val_accuracy"))
    runner = SimpleNamespace(last_training=TrainOutcome(stopped=stopped, samples=100, wall_s=1.0))
    assert _say_training_outcome(cfg, Path("t"), tmp_path, TrialResult(objective=0.395, epochs=2), runner, 3.0) == 0
    assert capsys.readouterr().out == f"val_accuracy = 0.395{said}3.0 s (1.0 s of them training, 100 samples/s)\n"


def test_a_sync_every_past_a_workers_batches_an_epoch_is_noted(write_yaml, tmp_path):
    import shutil

    from conftest import SPACES
    from mpiopt.cli import _sync_every_note
    from mpiopt.config import load_config
    from mpiopt.learn import load_source
    from mpiopt.objective import TrialRunner

    shutil.copy(SPACES / "tiny_model.py", tmp_path / "tiny_model.py")
    text = TINY_MODEL.replace("load_bad_data", "load_data").replace(
        "{epochs: 1}", "{epochs: 1, mode: downpour, batch_size: 10, sync_every: 30, group_size: 3}")
    cfg = load_config(write_yaml(text))
    assert _sync_every_note(cfg, 2) is None  # the data not read yet (a resume whose budget is spent)
    load_source(cfg.objective.data, cfg.base_dir, TrialRunner(cfg).loader)  # as the preflight reads it
    assert _sync_every_note(cfg, 2) == ("training.sync_every 30 is more than the 25 batches a worker trains an epoch "
                                        "(500 samples over 2 workers in batches of 10): each worker sends its update "
                                        "once an epoch")
    assert _sync_every_note(cfg, 1) is None  # 50 batches
    searched = load_config(write_yaml(text.replace("parameters: {", "parameters: {sync_every: {type: integer, low: "
                                                                    "20, high: 40}, "), "s.yaml"))
    assert _sync_every_note(searched, 2) is None  # each trial's own


def test_the_stopped_line_of_a_search_never_raises(tmp_path, capsys):
    # asked in the watchdog's thread and in a file error's handler: what it cannot check, it says
    from mpiopt import cli, launch

    (tmp_path / "afile").write_text("")
    job = cli._Job(cfg=None, out=tmp_path / "afile")  # its journal path runs through a file: ENOTDIR
    assert cli._search_stopped(job) == (f"{tmp_path / 'afile' / 'trials.jsonl'} cannot be read (Not a directory): fix "
                                        "that, then continue with --resume")

    def broken() -> str:
        raise OSError("stale file handle")

    launch._interrupts.line = broken
    launch.say_interrupted()  # says a fixed text instead of raising
    assert capsys.readouterr().err == "mpiopt: interrupted; see the run directory\n"


def test_the_sync_every_note_counts_the_workers_of_a_k_fold_sub_group(write_yaml):
    from mpiopt.cli import _fewest_workers
    from mpiopt.config import load_config
    from mpiopt.transport import plan_groups

    text = TINY_MODEL.replace("{epochs: 1}", "{epochs: 1, group_size: 4}")
    plan = plan_groups(5, 4, None, None)  # one group of 4
    assert _fewest_workers(load_config(write_yaml(text), resolve=False), plan) == 3
    folded = text.replace("metrics: [accuracy]}", "metrics: [accuracy], folds: 2}")
    assert _fewest_workers(load_config(write_yaml(folded, "f.yaml"), resolve=False), plan) == 1  # two teams of 2


def test_notes_of_yes_no_choices_and_of_an_evolution_with_no_room_to_evolve(write_yaml):
    from mpiopt import cli
    from mpiopt.config import load_config

    cfg = load_config(write_yaml(SPACE.replace("search:", "  country: {choices: [NO, SE, 'DK']}\n"
                                                         "  gate: {choices: [on, off]}\nsearch:")))
    assert cli._yes_no_note(cfg) == (
        "parameters.country.choices: NO is read as the boolean False (and 2 more such values): YAML reads a bare "
        "yes, no, on or off as a boolean; quote it ('NO') where you mean the text")
    assert cli._yes_no_note(load_config(write_yaml(SPACE, "plain.yaml"))) is None
    evolution = load_config(write_yaml(SPACE.replace("initial_points: 4", "algorithm: evolution, population: 8"),
                                       "evolution.yaml"))
    assert cli._initial_points_note(evolution) == (
        "search.population 8 is not below search.trials 8: evolution draws at random until the population is "
        "full, so every trial is a random one")
    assert cli._initial_points_note(load_config(write_yaml(
        SPACE.replace("initial_points: 4", "algorithm: evolution, population: 4"), "room.yaml"))) is None


def test_set_of_a_text_choice_that_reads_as_a_number_says_to_quote_it(write_yaml):
    from mpiopt import cli
    from mpiopt.config import load_config

    cfg = load_config(write_yaml(SPACE.replace("search:", "  c: {choices: ['1e-3', 'NO', 2]}\nsearch:")))
    values = {"x": 1.0, "y": 2.0}
    with pytest.raises(ConfigError) as refused:
        cli.parse_sets(cfg, ["c=1e-3"], values)
    assert str(refused.value).endswith("(the choice '1e-3' is text: quote it for YAML, --set \"c='1e-3'\")")
    with pytest.raises(ConfigError, match=r"\(the choice 'NO' is text"):
        cli.parse_sets(cfg, ["c=NO"], values)
    assert cli.parse_sets(cfg, ["c='1e-3'"], values)[0]["c"] == "1e-3"


def test_a_search_interrupted_before_its_run_directory_opened_says_nothing_was_written(write_yaml, tmp_path):
    from mpiopt import cli
    from mpiopt.config import load_config

    job = cli._Job(load_config(write_yaml(SPACE)), tmp_path / "runs" / "cli-branin")
    assert cli._search_not_begun(job) == "before the search began: nothing was written"
    job.out.mkdir(parents=True)
    (job.out / "trials.jsonl").write_text("")  # an earlier run's, which --resume continues
    assert cli._search_not_begun(job) == "the journal is intact: continue with --resume"


def test_the_timeline_line_says_how_few_hand_outs_its_dispatch_percentiles_rest_on():
    from mpiopt import _results_view as view

    summary = {"groups": 2, "trials": 40, "stretches": 40, "active_s": 10.0, "utilization": 0.9,
               "dispatch_p50_ms": 1.07, "dispatch_p99_ms": 1.07, "sent_after": 1, "sent_ahead": 37, "ahead_p50_ms": 3.0}
    assert "dispatch latency p50 1.07 ms, p99 1.07 ms (over 1 hand-out after a result); 37 trials sent ahead" in \
        view.timeline_line("runs/x", summary)
    assert "ms; 37 trials" in view.timeline_line("runs/x", {**summary, "sent_after": 400})

"""Running objectives in-process: figures of merit, failures, divergence, wrong types, time limits."""
from __future__ import annotations

import dataclasses
import math

import pytest

from mpiopt.config import load_config
from mpiopt.group import merge
from mpiopt.objective import TrialRunner, error_text, judge, judge_history
from mpiopt.trial import TrialResult, TrialStatus


def test_judge_values():
    assert judge(1.5, "minimize", "objective").objective == 1.5
    assert judge(3, "minimize", "objective").status == "completed"
    d = judge({"acc": 0.9, "loss": 0.1, "note": "x"}, "maximize", "acc")
    assert d.objective == 0.9 and d.metrics == {"acc": 0.9, "loss": 0.1}
    assert judge(float("nan"), "minimize", "objective").status == "diverged"
    assert judge({"acc": math.inf}, "maximize", "acc").status == "diverged"
    bad = judge("0.5", "minimize", "objective")
    assert bad.status == "failed" and "returned str" in bad.error
    assert judge([1.0], "minimize", "objective").status == "failed"
    assert judge(True, "minimize", "objective").status == "failed"
    missing = judge({"loss": 1.0}, "maximize", "acc")
    assert missing.status == "failed" and "without 'acc'" in missing.error


def test_judge_takes_one_number_in_an_array_or_tensor():
    import numpy as np

    assert judge(np.array(1.5), "minimize", "objective").objective == 1.5  # np.mean(...) of an array
    assert judge({"acc": np.array(0.9, np.float32), "n": np.int64(3)}, "maximize", "acc").metrics == \
        {"acc": pytest.approx(0.9), "n": 3.0}
    assert judge(np.array([1.5]), "minimize", "objective").status == "failed"  # not one number
    assert judge(np.array(True), "minimize", "objective").status == "failed"


def test_judge_a_pareto_functions_goals():
    goals = (("cost", "minimize"), ("err", "minimize"), ("duration_s", "minimize"))
    ok = judge({"cost": 2.0, "err": 0.5}, "minimize", "cost", goals)
    assert ok.status == "completed" and ok.objective == 2.0 and ok.metrics == {"cost": 2.0, "err": 0.5}
    missing = judge({"cost": 2.0}, "minimize", "cost", goals)
    assert missing.misuse and missing.error == "the objective returned a dict without 'err' (it has: cost)"
    assert judge({"cost": 2.0, "err": "x"}, "minimize", "cost", goals).error == \
        "the objective returned err='x', expected a number"
    assert judge(2.0, "minimize", "cost", goals).error == \
        "the objective returned float 2.0, expected a dict of its goals (cost, err)"
    nan = judge({"cost": 2.0, "err": math.nan}, "minimize", "cost", goals)
    assert (nan.status, nan.error, nan.misuse) == ("diverged", "err is nan", False)


@pytest.mark.parametrize("name", ["status", "trial", "start", "duration_s", "error", "params_x"])
def test_a_metric_named_like_a_column_of_the_table_is_refused(name):
    out = judge({"objective": 1.0, name: 2.0}, "minimize", "objective")
    assert out.misuse and out.error == (f"the objective returned a metric named {name!r}, a column of the results "
                                        "table: name it otherwise")
    assert judge({"objective": 1.0, "epochs": 3}, "minimize", "objective").status == "completed"


def test_judge_history_takes_the_best_epoch():
    h = [{"epoch": 1, "val_loss": 0.9, "loss": 1.0}, {"epoch": 2, "val_loss": 0.5, "loss": 0.7},
         {"epoch": 3, "val_loss": 0.6, "loss": 0.6}]
    o = judge_history(h, "minimize", "val_loss", None)
    assert o.objective == 0.5 and o.metrics["loss"] == 0.7 and o.epochs == 3
    assert judge_history(h, "minimize", "val_acc", None).status == "failed"
    assert judge_history(h, "minimize", "val_loss", "diverged").status == "diverged"
    t = judge_history(h, "minimize", "val_loss", "timeout")
    assert t.status == "timeout" and t.objective is None
    assert judge_history([], "minimize", "val_loss", None).status == "failed"
    assert t.error == "stopped by training.time_limit after 3 epochs"
    early = judge_history([], "minimize", "val_loss", "timeout")  # the limit came within the first epoch
    assert early.status == "timeout" and early.error == "stopped by training.time_limit before its first epoch finished"


@pytest.fixture
def runner(write_yaml):
    def make(fn, extra=""):
        return TrialRunner(load_config(write_yaml(f"""
            objective: {{function: objectives.py:{fn}}}
            parameters: {{x: {{type: real, low: -5.0, high: 10.0}}, y: {{type: real, low: 0.0, high: 15.0}}}}
            {extra}
        """)))
    return make


def test_a_file_the_trial_cannot_write_fails_it_only_where_the_trial_is_to_blame(runner, tmp_path, monkeypatch):
    r = runner("unwritable")
    trial_dir = tmp_path / "run" / "trials" / "3"
    with pytest.raises(OSError, match="No space left"):  # a full disk: the search stops, --resume reruns it
        r.run({"x": -1.0, "y": 1.0}, None, trial_dir=trial_dir)
    monkeypatch.setenv("MPIOPT_TEST_UNWRITABLE", str(tmp_path / "run" / "trials" / "3" / "x.npz"))
    with pytest.raises(PermissionError):  # the run's own folder: the same
        r.run({"x": 1.0, "y": 1.0}, None, trial_dir=trial_dir)
    own = r.run({"x": 6.0, "y": 1.0}, None, trial_dir=trial_dir)  # the objective's own business
    assert own.status == "failed" and own.error == "PermissionError: [Errno 13] Permission denied: '/etc/shadow'"


def test_a_full_disk_or_a_lost_permission_is_the_storages_only_where_mpiopt_writes(tmp_path):
    import errno

    from mpiopt._errors import storage_failure

    mine = tmp_path / "trials" / "3"
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert storage_failure(OSError(errno.ENOSPC, "No space left on device"), mine)  # a write() names no file
    assert storage_failure(OSError(errno.ENOSPC, "No space left on device", str(mine / "a.npz")), mine)
    assert storage_failure(PermissionError(errno.EACCES, "Permission denied", bytes(mine / "a.npz")), mine)
    # the objective's own files: a read-only cache in its container fails every trial alike
    assert not storage_failure(OSError(errno.EROFS, "Read-only file system", "/usr/share/cache/x"), mine)
    assert not storage_failure(PermissionError(errno.EACCES, "Permission denied", b"/proc/1/mem"), mine)
    assert not storage_failure(PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "loop" / "x")), mine)


def test_a_full_disk_under_hdf5_is_said_as_its_file_and_reason():
    import errno

    from mpiopt._errors import storage_text

    h5py_text = ("Can't close file (file write failed: time = Sat Nov 28 16:49:24 2026\n, filename = "
                 "'/runs/full/trials/41/best.weights.h5', file descriptor = 33, errno = 28, error message = 'No space "
                 "left on device', buf = 0x5628bb8e1430, total write size = 2048, bytes this sub-write = 2048, "
                 "offset = 4096)")
    assert storage_text(OSError(errno.ENOSPC, h5py_text)) == \
        "/runs/full/trials/41/best.weights.h5: No space left on device"
    assert storage_text(OSError(errno.ENOSPC, "No space left on device", "/a/b")) == "/a/b: No space left on device"
    assert storage_text(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"


def test_runner_statuses(runner):
    r = runner("moody")
    failed = r.run({"x": -3.0, "y": 1.0}, None)
    assert failed.status == "failed" and failed.error.startswith("ValueError: x is too small")
    assert failed.error == "ValueError: x is too small for this objective"  # one line; the rest in detail
    assert "Traceback" in failed.detail and "moody" in failed.detail
    assert r.run({"x": -1.0, "y": 1.0}, None).status == "diverged"
    wrong = r.run({"x": 1.0, "y": 1.0}, None)
    assert wrong.status == "failed" and "returned str" in wrong.error
    ok = r.run({"x": 5.0, "y": 2.0}, None)
    assert ok.status == "completed" and ok.objective == 2.0


GOOD = {"objective": 1.0}


@pytest.mark.parametrize("reports, expected", [
    ([(0, GOOD)], "trial.report(0, ...): the step must be a whole number, from 1 up"),
    ([(None, GOOD)], "trial.report(...): it gives no step: trial.report(step, name=value, ...), the step a whole "
                     "number from 1 up"),
    ([(1.5, GOOD)], "trial.report(1.5, ...): the step must be a whole number, from 1 up"),
    ([(True, GOOD)], "trial.report(True, ...): the step must be a whole number, from 1 up"),
    ([(3, GOOD), (2, GOOD)], "trial.report(2, ...): step 2 comes after step 3: each step must be later than the last"),
    ([(1, GOOD), (1, GOOD)], "trial.report(1, ...): step 1 comes after step 1: each step must be later than the last"),
    ([(1, {"acc": 0.5})], "trial.report(1, ...): it reports no 'objective', the figure of merit (it reports: acc)"),
    ([(1, {})], "trial.report(1, ...): it reports no 'objective', the figure of merit (it reports: nothing)"),
    ([(1, {"objective": "abc"})], "trial.report(1, ...): objective='abc' is not a number"),
    ([(1, {"objective": 1.0, "status": 2.0})],
     "trial.report(1, ...): 'status' names a column of the results table: name it otherwise"),
])
def test_a_report_against_the_contract_is_a_misuse_that_stops_the_search(runner, reports, expected):
    out = runner("reports_as_told").run({"x": 1.0, "y": 1.0, "reports": reports}, None)
    assert (out.status, out.misuse, out.error) == ("failed", True, expected)


def test_a_bad_report_stops_the_search_even_where_the_function_catches_its_error(runner):
    out = runner("swallows_a_bad_report").run({"x": 1.0, "y": 1.0}, None)
    assert out.misuse and out.error.startswith("trial.report(1, ...): it reports no 'objective'")


def test_a_report_that_is_not_finite_ends_the_trial_as_diverged(runner):
    reports = [(1, GOOD), (2, {"objective": math.nan, "loss": 1.0}), (3, GOOD)]
    out = runner("reports_as_told").run({"x": 1.0, "y": 1.0, "reports": reports}, None)
    assert (out.status, out.epochs, out.error) == ("diverged", 2, "objective is nan at step 2")


def test_a_metric_reported_but_not_returned_keeps_its_last_reported_value(runner):
    reports = [(1, {"objective": 2.0, "train_accuracy": 0.5}), (2, {"objective": 1.5, "train_accuracy": 0.7})]
    out = runner("reports_as_told").run({"x": 1.0, "y": 1.0, "reports": reports}, None)
    assert out.status == "completed" and out.epochs == 2
    assert out.objective == 1.0 and out.metrics == {"objective": 1.0, "train_accuracy": 0.7}  # what it returned wins


def test_a_function_that_trains_until_told_stops_at_the_top_rung(runner):
    r = runner("until_told", "search: {scheduler: asha}\n            training: {epochs: 5}")
    out = r.run({"x": 1.0, "y": 1.0}, None)
    assert (out.status, out.epochs, out.objective) == ("completed", 5, 20.0)


def test_a_function_that_reports_on_after_its_stop_is_judged_by_what_it_reported_up_to_the_stop(runner,
                                                                                                   monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "0")
    heard = []

    def stop_at_step_1(step, row):
        heard.append(row)
        return "pruned"

    r = runner("never_asks_to_stop", "search: {scheduler: asha}\n            training: {epochs: 9}")
    out = r.run({"x": 1.0, "y": 1.0}, None, reporter=stop_at_step_1)
    assert (out.status, out.epochs, out.reported_after_stop, len(heard)) == ("pruned", 1, 18, 1)
    assert out.metrics == {"objective": heard[0]["objective"]}  # not its report at step 18


def test_time_limit_interrupts_a_sleeping_function(runner, monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "30")
    r = runner("branin", "training: {time_limit: 0.3}")
    out = r.run({"x": 1.0, "y": 1.0}, None)
    assert out.status == "timeout" and "time_limit" in out.error


def test_a_function_cut_off_by_its_time_limit_keeps_the_steps_it_reported(runner, monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "4")  # 1 s a step: cut off after step 2, half a step either side
    out = runner("steady_curve", "training: {time_limit: 2.5}").run({"x": 1.0, "y": 1.0}, None)
    assert (out.status, out.epochs, list(out.metrics)) == ("timeout", 2, ["objective"]), out
    assert out.error == "past training.time_limit (2.5 s) after step 2" and out.objective is None


def test_a_function_that_catches_the_time_limit_and_returns_late_timed_out(runner, monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "1.5")
    out = runner("swallows_every_exception", "training: {time_limit: 0.3}").run({"x": 1.0, "y": 1.0}, None)
    assert (out.status, out.objective) == ("timeout", None)
    assert out.error == ("past training.time_limit (0.3 s): the objective caught the TrialTimeout raised in it and "
                         "returned late")


def test_sys_exit_in_the_objective_fails_its_trial(runner):
    out = runner("exits").run({"x": 1.0, "y": 1.0}, None)
    assert (out.status, out.error) == ("failed", "SystemExit: the objective called sys.exit(3)")
    assert "Traceback" in out.detail


def test_merge_names_the_rank_that_failed():
    ok = TrialResult(objective=1.0, metrics={"objective": 1.0})
    own = TrialResult(status=TrialStatus.FAILED, error="RuntimeError: rank 1 broke")
    echo = TrialResult(status=TrialStatus.FAILED, error="GroupPeerFailed: rank 1 of the group failed this trial")
    assert merge([ok, ok]).status == "completed"
    # steps reported on a rank but the first: only the first's reach the scheduler
    unheard = merge([ok, dataclasses.replace(ok, epochs=3)], ranks=[4, 5])
    assert (unheard.status, unheard.misuse) == ("failed", True)
    assert unheard.error.startswith("trial.report: group rank 5 reported steps and group rank 4 none")
    assert merge([dataclasses.replace(ok, epochs=3), dataclasses.replace(ok, epochs=3)]).status == "completed"
    m = merge([echo, own, ok])
    assert m.status == "failed" and m.error.startswith("group rank 1: RuntimeError: rank 1 broke")
    data = TrialResult(status=TrialStatus.FAILED, error="x.h5: features: sample 3 holds NaN or inf", misuse=True,
                       misuse_field="objective.data")
    m = merge([echo, data])  # what the search's stop line names: the data, not the model
    assert (m.misuse, m.misuse_field, m.error) == (True, "objective.data",
                                                   "group rank 1: x.h5: features: sample 3 holds NaN or inf")


TF_ERROR = """Graph execution error:

Detected at node sequential_1/loss/SparseSoftmaxCrossEntropyWithLogits defined at (most recent call last):
  File "/venv/bin/mpiopt", line 8, in <module>

  File "/work/mpiopt/learn/_flat.py", line 81, in step

Received a label value of 2 which is outside the valid range of [0, 2).  Label values: 1 0 2 1
\t [[{{node sequential_1/loss/SparseSoftmaxCrossEntropyWithLogits}}]] [Op:__inference_step_461]"""


def test_the_error_column_shows_the_line_that_names_the_problem():
    class InvalidArgumentError(Exception):  # as TensorFlow's op errors read (their module is tensorflow's)
        __module__ = "tensorflow.python.framework.errors_impl"

    assert error_text(InvalidArgumentError(TF_ERROR)) == (
        "InvalidArgumentError: Received a label value of 2 which is outside the valid range of [0, 2).")
    assert error_text(ValueError("first line\nsecond line")) == "ValueError: first line"
    assert len(error_text(ValueError("x" * 5000))) < 320
    assert error_text(RuntimeError("")) == "RuntimeError: "
    traced = "in user code:\n\n    File \"m.py\", line 3, in call\n\n    ValueError: units must be even"
    assert error_text(ValueError(traced)) == "ValueError: units must be even"


def test_merge_keeps_a_result_every_rank_agreed_on():
    # a k-fold trial's ranks each merge every fold's outcome: the error already names its fold and rank
    agreed = TrialResult(status=TrialStatus.FAILED, error="fold 2 of 3: group rank 2: ValueError: x")
    assert merge([agreed, agreed, agreed]) == agreed
    assert merge([agreed, TrialResult()]).error == "group rank 0: fold 2 of 3: group rank 2: ValueError: x"


def test_merge_says_a_failure_every_rank_met_alike_is_the_groups():
    # both ranks' build_model raised the same error (their tracebacks differ): not rank 0's alone
    alike = [TrialResult(status=TrialStatus.FAILED, error="ValueError: units > 40", detail=f"rank {k}") for k in (0, 1)]
    assert merge(alike).error == "every group rank: ValueError: units > 40"
    echo = TrialResult(status=TrialStatus.FAILED, error="GroupPeerFailed: rank 1 of the group failed this trial")
    assert merge([echo, *alike], ranks=[3, 4, 5]).error == "group ranks 4, 5: ValueError: units > 40"


def test_merge_keeps_every_failing_ranks_whole_text():
    ok = TrialResult(objective=1.0)
    bad = TrialResult(status=TrialStatus.FAILED, error="KeyError: 'x'",
                      detail="Traceback (most recent call last):\nKeyError: 'x'\n")
    m = merge([ok, bad])
    assert m.error == "group rank 1: KeyError: 'x'"
    assert m.detail == "== group rank 1 ==\nTraceback (most recent call last):\nKeyError: 'x'\n"


def test_progress_lines_at_most_one_every_interval(caplog):
    from mpiopt.group import Progress

    now = [0.0]
    progress = Progress(7, 10, "val_loss", "minimize", every_s=60.0, clock=lambda: now[0])
    with caplog.at_level("INFO", logger="mpiopt"):
        for epoch, (t, loss) in enumerate([(20, 0.9), (61, 0.5), (90, 0.7), (125, 0.6)], start=1):
            now[0] = t
            progress(epoch, {"epoch": epoch, "val_loss": loss})
    assert [r.getMessage() for r in caplog.records] == [
        "trial 7, epoch 2 of 10: val_loss=0.5",
        "trial 7, epoch 4 of 10: val_loss=0.6 (best 0.5)"]


SLOW_LOADER = '''
import time

import numpy as np


def load_data():
    time.sleep(2.0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return (x[:150], y[:150]), (x[150:], y[150:])


def build_model(units=8):
    import keras

    return keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(units, activation="relu"),
                             keras.layers.Dense(2, activation="softmax")])
'''


class _PauseAtFirstEpoch:
    decide_at = frozenset({1})
    reported = 0

    def __call__(self, epoch, row):
        return "paused" if epoch == 1 else None


def test_a_paused_trials_time_counts_its_stretch_from_the_start_data_loading_included(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_LOADER)
    (tmp_path / "s.yaml").write_text("""
objective: {model: slow.py:build_model, data: slow.py:load_data, loss: sparse_categorical_crossentropy,
            metrics: [accuracy], maximize: val_accuracy}
parameters: {units: {type: integer, low: 4, high: 8}}
search: {scheduler: asha}
training: {epochs: 3, batch_size: 50}
""")
    runner = TrialRunner(load_config(tmp_path / "s.yaml"))
    paused = runner.run({"units": 6}, None, trial=0, trial_dir=tmp_path / "t0", reporter=_PauseAtFirstEpoch())
    assert paused.status == TrialStatus.PAUSED and paused.epochs == 1
    promoted = runner.run({"units": 6}, None, trial=0, trial_dir=tmp_path / "t0")
    # the first stretch loaded the data (2 s) before it trained: its time counts in the trial's
    assert promoted.status == TrialStatus.COMPLETED and promoted.epochs == 3 and promoted.resumed_s >= 2.0


def test_a_peer_rank_that_diverged_is_named():
    from mpiopt.group import merge
    from mpiopt.objective import TrialContext, _diverged
    from mpiopt.trial import TrialResult, TrialStatus

    class TwoRanks:  # rank 0 of a group whose rank 1 reported NaN: what allgather brings in
        def Get_rank(self):
            return 0

        def allgather(self, mine):
            return [mine, (False, "objective is nan at step 2", False)]

    context = TrialContext(0, None, TwoRanks(), "objective", None)
    assert context.should_stop() and (context.diverged, context.diverged_on) == ("objective is nan at step 2", 1)
    # rank 1's result says so, rank 0's is an echo: the group's error is headed by rank 1
    mine = _diverged(context, 0)
    theirs = TrialResult(status=TrialStatus.DIVERGED, epochs=2, error="objective is nan at step 2")
    merged = merge([mine, theirs])
    assert (merged.status, merged.error) == (TrialStatus.DIVERGED, "group rank 1: objective is nan at step 2")


def test_the_groups_first_rank_warns_of_a_rank_still_running_long_after_its_own_part(monkeypatch, caplog):
    import time
    from types import SimpleNamespace

    from mpiopt import group
    from mpiopt.trial import Task

    monkeypatch.setenv("MPIOPT_STRAGGLER_S", "0.05")
    comm = SimpleNamespace(Get_size=lambda: 2)
    with caplog.at_level("WARNING", logger="mpiopt.group"):
        with group._note_a_straggler(SimpleNamespace(rank=0, comm=comm), Task(7, {}), time_limit=None):
            time.sleep(0.3)
        with group._note_a_straggler(SimpleNamespace(rank=0, comm=comm), Task(8, {}), time_limit=600):
            time.sleep(0.3)  # a time limit ends it: no word
        with group._note_a_straggler(SimpleNamespace(rank=0, comm=comm), Task(9, {}), time_limit=None):
            pass  # the others came in at once
        time.sleep(0.2)
    assert [r.getMessage() for r in caplog.records] == [
        "trial 7: this rank's part ended 0 s ago, and another rank of the group is still running its part; a rank "
        "that never returns holds the group (training.time_limit bounds a trial)"]


def test_reading_a_parameter_its_condition_left_out_says_so(write_yaml):
    from mpiopt.objective import Params, UnknownParameter

    cfg = load_config(write_yaml("objective: {function: objectives.py:branin}\nparameters:\n"
                                 "  opt: {choices: [sgd, adam]}\n"
                                 "  momentum: {type: real, low: 0, high: 0.9, when: {opt: sgd}}\n"))
    params = Params({"opt": "adam"}, cfg.space)
    with pytest.raises(UnknownParameter) as inactive:
        params["momentum"]
    assert inactive.value.line() == (
        "it reads params['momentum'], which is inactive in this trial (momentum is searched only when opt: sgd; "
        "here opt is 'adam'): read it under its condition, or as params.get('momentum', DEFAULT)")
    with pytest.raises(UnknownParameter) as unknown:
        params["lr"]
    assert unknown.value.line() == "it reads params['lr'], which the search space does not define " \
                                   "(its parameters: opt, momentum)"
    assert params.get("momentum", 0.5) == 0.5

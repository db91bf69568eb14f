"""Hostile input beyond the YAML file: objectives that break their contract, data that do not fit.

Each gets one clear error line and exit code 2, in one process and under `mpiexec -n 3`.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import SPACES, run_cli
from mpiopt._errors import ConfigError
from mpiopt.config import load_config

FUNCTION = """
name: hostile
objective: {{function: objectives.py:{fn}}}
parameters: {{x: {{type: real, low: -5.0, high: 10.0}}, y: {{type: real, low: 0.0, high: 15.0}}}}
search: {{initial_points: 2, trials: 6, seed: 0}}
"""


def error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("mpiopt: error:")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize("fn,expected", [
    ("returns_string", "returned str '0.5', expected a float or a dict of metrics"),
    ("returns_list", "returned list"),
    ("returns_dict_without_metric", "returned a dict without 'objective' (it has: loss)"),
    ("reads_a_parameter_not_in_the_space",
     "it reads params['z'], which the search space does not define (its parameters: x, y)"),
])
def test_objective_breaking_its_contract_stops_with_exit_2(write_yaml, tmp_path, fn, expected):
    p = run_cli(["search", write_yaml(FUNCTION.format(fn=fn))], cwd=tmp_path)
    assert p.returncode == 2
    line = error_line(p)
    assert expected in line and fn in line
    # nothing else finished: the run directory is gone, so the fixed objective's search starts afresh
    assert not (tmp_path / "runs" / "hostile").exists() and "results:" not in p.stdout + p.stderr
    if fn == "reads_a_parameter_not_in_the_space":
        p = run_cli(["search", write_yaml(FUNCTION.format(fn="branin"))], cwd=tmp_path)
        assert p.returncode == 0, p.stderr


@pytest.mark.mpi
def test_a_contract_error_under_mpiexec_leaves_no_run_directory(write_yaml, tmp_path):
    # both groups' first trials break the contract; the second result comes after the stop
    p = run_cli(["search", write_yaml(FUNCTION.format(fn="reads_a_parameter_not_in_the_space"))], cwd=tmp_path,
                np=3)
    assert p.returncode == 2 and "which the search space does not define" in error_line(p)
    assert not (tmp_path / "runs" / "hostile").exists()


def test_a_contract_error_after_finished_trials_keeps_the_run_directory(write_yaml, tmp_path):
    p = run_cli(["search", write_yaml(FUNCTION.format(fn="returns_string_from_its_third_call"))], cwd=tmp_path)
    assert p.returncode == 2 and "returned str" in error_line(p)
    journal = (tmp_path / "runs" / "hostile" / "trials.jsonl").read_text()
    assert journal.count('"status":"completed"') == 2 and journal.count('"status":"failed"') == 1


def test_a_contract_error_after_failed_trials_only_leaves_no_run_directory(write_yaml, tmp_path):
    # a failed (or pruned) trial of a broken objective is nothing worth keeping: the fixed
    # objective's search must start afresh, not be refused for the directory
    p = run_cli(["search", write_yaml(FUNCTION.format(fn="fails_then_returns_string"))], cwd=tmp_path)
    assert p.returncode == 2 and "returned str" in error_line(p)
    assert not (tmp_path / "runs" / "hostile").exists()


def test_a_function_that_never_asks_whether_to_stop_is_warned_once_and_judged_at_its_stop(write_yaml, tmp_path):
    import mpiopt

    space = FUNCTION.format(fn="never_asks_to_stop").replace("trials: 6, seed: 0}", "trials: 12, seed: 0, "
                                                                                    "scheduler: asha}")
    p = run_cli(["search", write_yaml(space + "training: {epochs: 9}\n")], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("after the scheduler stopped it at step") == 1, p.stderr
    assert p.stderr.count("past training.epochs (9), the scheduler's top rung") == 1, p.stderr
    assert "objectives.py:never_asks_to_stop must call trial.should_stop() after each report" in p.stderr
    run = tmp_path / "runs" / "hostile"
    df, history = mpiopt.load_results(run), mpiopt.load_history(run)
    pruned = df[df.status == "pruned"]
    assert len(pruned) > 0
    # the scheduler heard a pruned trial up to the rung that stopped it, never past it
    last_heard = history.groupby("trial").epoch.max()
    assert (last_heard[pruned.trial] == pruned.rung.to_numpy()).all() and (pruned.rung < 9).all()
    assert (pruned.epochs == pruned.rung).all()  # how far it got, as far as the search knows


def test_a_report_without_the_figure_of_merit_stops_a_scheduled_search_with_exit_2(write_yaml, tmp_path):
    space = FUNCTION.format(fn="reports_accuracy_only").replace("seed: 0}", "seed: 0, scheduler: asha}")
    p = run_cli(["search", write_yaml(space + "training: {epochs: 3}\n")], cwd=tmp_path)
    assert p.returncode == 2
    assert error_line(p).endswith("objective: objectives.py:reports_accuracy_only: trial.report(1, ...): it "
                                  "reports no 'objective', the figure of merit (it reports: accuracy)")


def test_a_key_error_of_the_objective_s_own_fails_its_trials_without_stopping_the_search(write_yaml, tmp_path):
    p = run_cli(["search", write_yaml(FUNCTION.format(fn="looks_up_its_own_dict")), "--out", "r"], cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert "no trial completed" in p.stderr and "KeyError: 'b'" in p.stderr
    assert (tmp_path / "r" / "results.csv").read_text().count("failed") == 6


def test_wrong_signature_is_a_config_error(write_yaml):
    with pytest.raises(ConfigError,
                       match=r"objective.function: .*takes_three must take \(params\) or \(params, comm\)"):
        load_config(write_yaml(FUNCTION.format(fn="takes_three")))
    with pytest.raises(ConfigError, match=r"objective.function: objectives.py:takes_x_and_y\(x, y\) names the "
                                          r"parameter 'x' as an argument, .*: def takes_x_and_y\(params\) and read "
                                          r"params\['x'\]$"):
        load_config(write_yaml(FUNCTION.format(fn="takes_x_and_y")))
    with pytest.raises(ConfigError, match=r"objective.function: objectives.py:takes_trial_first\(params, trial, comm\) "
                                          r"takes `trial` before another argument; `trial` comes last"):
        load_config(write_yaml(FUNCTION.format(fn="takes_trial_first")))


def test_a_comm_function_gets_a_one_rank_communicator_in_one_process(write_yaml, tmp_path):
    import mpiopt

    space = write_yaml(FUNCTION.format(fn="with_comm"))
    p = run_cli(["search", space], cwd=tmp_path, env={"MPIOPT_TEST_SLEEP": "0"})
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "hostile")
    assert set(df.status) == {"completed"} and set(df.group_size) == {1.0}
    p = run_cli(["train", space, "--out", tmp_path / "t"], cwd=tmp_path)
    assert p.returncode == 0 and "objective = " in p.stdout, p.stderr


@pytest.mark.mpi
def test_under_mpiexec_too(write_yaml, tmp_path):
    p = run_cli(["search", write_yaml(FUNCTION.format(fn="returns_string"))], cwd=tmp_path, np=3, timeout=120)
    assert p.returncode == 2 and "returned str" in error_line(p)


# -- data and models (in-process preflight: TensorFlow is imported once) -------------------------
@pytest.fixture
def model_space(tmp_path):
    shutil.copy(SPACES / "tiny_model.py", tmp_path / "tiny_model.py")

    def make(model="build_model", data="tiny_model.py:load_data", extra=""):
        p = tmp_path / "m.yaml"
        p.write_text(f"objective: {{model: tiny_model.py:{model}, data: {data}, "
                     f"loss: sparse_categorical_crossentropy{extra}}}\n"
                     "parameters: {units: {type: integer, low: 2, high: 16}}\n")
        return load_config(p)

    return make


def _h5(path, n_features=8, n_labels=None, n=20, names=("features", "labels")):
    import h5py

    with h5py.File(path, "w") as h:
        h[names[0]] = np.zeros((n, n_features), dtype=np.float32)
        h[names[1]] = np.zeros(n if n_labels is None else n_labels, dtype=np.int64)


@pytest.mark.slow
@pytest.mark.parametrize("case,expected", [
    ("wrong_input", "does not fit the data"),
    ("wrong_labels", "does not fit the data"),
    ("loader_returns_none", "must return ((x_train, y_train), (x_val, y_val))"),
    ("missing_files", "no files match"),
    ("missing_dataset", "no dataset 'features'"),
    ("mismatched_lengths", "features have 20 samples but labels have 19"),
    ("unreadable_file", "cannot read as HDF5"),
    ("wrong_feature_width", "does not fit the data"),
])
def test_data_that_do_not_fit_are_config_errors(model_space, tmp_path, case, expected):
    from mpiopt.objective import preflight

    h5 = "{train: d/train_*.h5, val: d/val.h5}"
    (tmp_path / "d").mkdir()
    if case == "wrong_input":
        cfg = model_space(model="build_wrong_input")
    elif case == "wrong_labels":
        cfg = model_space(data="tiny_model.py:load_wrong_label_shape")
    elif case == "loader_returns_none":
        cfg = model_space(data="tiny_model.py:load_nothing")
    elif case == "missing_files":
        cfg = None  # refused as the file is read, before the model's module is imported
    elif case == "missing_dataset":
        _h5(tmp_path / "d" / "train_0.h5", names=("x", "y"))
        _h5(tmp_path / "d" / "val.h5")
        cfg = model_space(data=h5)
    elif case == "mismatched_lengths":
        _h5(tmp_path / "d" / "train_0.h5", n_labels=19)
        _h5(tmp_path / "d" / "val.h5")
        cfg = model_space(data=h5)
    elif case == "unreadable_file":
        (tmp_path / "d" / "train_0.h5").write_bytes(b"\x00not hdf5")
        _h5(tmp_path / "d" / "val.h5")
        cfg = model_space(data=h5)
    else:
        _h5(tmp_path / "d" / "train_0.h5", n_features=5)
        _h5(tmp_path / "d" / "val.h5", n_features=5)
        cfg = model_space(data=h5)
    with pytest.raises(ConfigError) as info:
        preflight(cfg if cfg is not None else model_space(data=h5))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(tmp_path / "m.yaml")) and expected in msg, msg
    assert msg.count("objective.data") <= 1, msg  # the field is named once


@pytest.mark.slow
def test_good_model_passes_preflight(model_space):
    from mpiopt.objective import preflight

    preflight(model_space())  # no exception


@pytest.mark.slow
@pytest.mark.mpi
def test_data_error_under_mpiexec_is_one_line(model_space, tmp_path):
    model_space(model="build_wrong_input")
    p = run_cli(["search", "m.yaml"], cwd=tmp_path, np=3, timeout=180)
    assert p.returncode == 2
    assert "does not fit the data" in error_line(p)
    assert not (tmp_path / "runs").exists()  # nothing was started


@pytest.mark.parametrize("returned, says", [
    (lambda x: ((x, x[:, 0], x[:, 0]), (x, x[:, 0])), "but its training part has 3 items"),
    (lambda x: ((x, x[:, 0]), [x]), "but its validation part has 1 items"),
    (lambda x: ((x, x[:, 0]), x), "but its validation part is a numpy array"),
    (lambda x: (x, x, x), "got 3 items"),
    (lambda x: None, "got None"),
    ("tf.data", "but its training part is a tf.data.Dataset: give arrays"),
])
def test_what_load_data_returned_in_the_wrong_shape_is_said(tmp_path, returned, says):
    from mpiopt._errors import DataError
    from mpiopt.learn._data import load_source

    x = np.zeros((4, 2), dtype=np.float32)
    if returned == "tf.data":
        import tensorflow as tf

        def returned(x):
            return tf.data.Dataset.from_tensor_slices((x, x[:, 0])), tf.data.Dataset.from_tensor_slices((x, x[:, 0]))

    with pytest.raises(DataError) as info:
        load_source("m.py:load_data", tmp_path, lambda: returned(x))
    assert str(info.value) == f"m.py:load_data must return ((x_train, y_train), (x_val, y_val)), {says}"

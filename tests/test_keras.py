"""Training real (tiny) Keras models: the model objective end to end."""
from __future__ import annotations

import csv
import os
import runpy
import shutil

import pytest

import mpiopt
from conftest import SPACES, run_cli
from mpiopt.config import load_config
from mpiopt.objective import TrialRunner

pytestmark = pytest.mark.slow
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture
def model_space(tmp_path):
    shutil.copy(SPACES / "tiny_model.py", tmp_path / "tiny_model.py")

    def make(objective: str, params: str = "units: {type: integer, low: 2, high: 16}", training: str = ""):
        p = tmp_path / "model.yaml"
        epochs = "" if "epochs:" in params else "epochs: 3, "  # a searched key is not also given in training
        p.write_text(f"name: tiny\nobjective: {objective}\nparameters: {{{params}}}\n"
                     f"search: {{initial_points: 2, trials: 3, seed: 0}}\n"
                     f"training: {{{epochs}batch_size: 64{training}}}\n")
        return load_config(p)

    return make


OBJ = ("{model: tiny_model.py:build_model, data: tiny_model.py:load_data, loss: sparse_categorical_crossentropy, "
       "metrics: [accuracy], maximize: val_accuracy}")


def test_model_trial_learns_and_writes_history(model_space, tmp_path):
    cfg = model_space(OBJ, training=", learning_rate: 0.01")
    out = TrialRunner(cfg).run({"units": 8}, None, trial_dir=tmp_path / "t0")
    assert out.status == "completed", out.error
    assert out.epochs == 3 and 0.7 < out.objective <= 1.0
    assert set(out.metrics) == {"loss", "accuracy", "val_loss", "val_accuracy", "params"}
    assert out.metrics["params"] == (8 * 8 + 8) + (8 * 2 + 2)  # Dense(8) on 8 inputs, then Dense(2)
    assert open(tmp_path / "t0" / "history.csv").readline() == "epoch,loss,accuracy,val_loss,val_accuracy\n"
    rows = list(csv.DictReader(open(tmp_path / "t0" / "history.csv")))
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    assert max(float(r["val_accuracy"]) for r in rows) == pytest.approx(out.objective)
    assert (tmp_path / "t0" / "best.weights.h5").exists()


def test_tensorboard_gets_each_epochs_scalars_and_the_trials_hparams(model_space, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
    from tensorboard.util.tensor_util import make_ndarray

    cfg = model_space(OBJ, training=", learning_rate: 0.01, tensorboard: true")
    out = TrialRunner(cfg).run({"units": 8}, None, trial=4, trial_dir=tmp_path / "t4")
    assert out.status == "completed", out.error
    events = EventAccumulator(str(tmp_path / "t4" / "tensorboard"), size_guidance={"tensors": 0}).Reload()
    tags = set(events.Tags()["tensors"])
    assert tags >= {"loss", "accuracy", "val_loss", "val_accuracy", "_hparams_/session_start_info"}
    val = [float(make_ndarray(e.tensor_proto)) for e in events.Tensors("val_accuracy")]
    assert [e.step for e in events.Tensors("val_accuracy")] == [1, 2, 3] and max(val) == pytest.approx(out.objective)
    # best_val_accuracy climbs to what the table records: the HParams dashboard shows its last value
    best = [float(make_ndarray(e.tensor_proto)) for e in events.Tensors("best_val_accuracy")]
    assert best == [max(val[:i + 1]) for i in range(3)] and best[-1] == pytest.approx(out.objective)
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    assert start.group_name == "trial 4" and start.hparams["units"].number_value == 8
    content = events.PluginTagToContent("hparams")["_hparams_/session_end_info"]
    assert plugin_data_pb2.HParamsPluginData.FromString(content).session_end_info.status == api_pb2.STATUS_SUCCESS


def test_tensorboard_holds_each_epoch_once_after_training_goes_on_from_a_checkpoint(tmp_path):
    # a kill after an epoch's scalars were written but before its checkpoint was: the stretch that
    # goes on from the checkpoint (epoch 2) writes epoch 3 again, in a file of its own
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from mpiopt.learn._board import FOLDER, Board

    first = Board(tmp_path, {"units": 8}, "trial 0", first_step=1)
    for epoch in (1, 2, 3):
        first.write({"epoch": epoch, "loss": 1.0 / epoch})
    first.close()
    (old,) = (tmp_path / FOLDER).glob("events.out.tfevents.*")
    with open(old, "ab") as f:
        f.write(b"\x40\x00\x00")  # the kill tore the record it was writing
    went_on = Board(tmp_path, {"units": 8}, "trial 0", first_step=3)
    for epoch in (3, 4):
        went_on.write({"epoch": epoch, "loss": 0.5 / epoch})
    went_on.close()
    events = EventAccumulator(str(tmp_path / FOLDER), size_guidance={"tensors": 0}).Reload()
    assert [e.step for e in events.Tensors("loss")] == [1, 2, 3, 4]
    assert len(list((tmp_path / FOLDER).glob("events.out.tfevents.*"))) == 2
    assert len(events.Tensors("_hparams_/session_start_info")) == 1  # one session, however many stretches


@pytest.mark.parametrize("stopped, status", [(None, "STATUS_SUCCESS"), ("target", "STATUS_SUCCESS"),
                                             ("diverged", "STATUS_FAILURE"), ("timeout", "STATUS_FAILURE"),
                                             ("pruned", None), ("paused", None)])
def test_a_trials_tensorboard_session_ends_as_the_trial_did(tmp_path, stopped, status):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    from mpiopt.learn._board import FOLDER, Board

    board = Board(tmp_path, {"units": 8}, "trial 0", first_step=1)
    board.write({"epoch": 1, "loss": 1.0})
    board.end(stopped)
    board.close()
    events = EventAccumulator(str(tmp_path / FOLDER), size_guidance={"tensors": 0}).Reload()
    ends = events.PluginTagToContent("hparams").get("_hparams_/session_end_info")
    got = api_pb2.Status.Name(plugin_data_pb2.HParamsPluginData.FromString(ends).session_end_info.status) \
        if ends else None
    assert got == status


def test_user_compiled_model_and_searched_training_keys(model_space):
    cfg = model_space("{model: tiny_model.py:build_compiled, data: tiny_model.py:load_data}",
                      "units: {type: integer, low: 2, high: 16}, epochs: {type: integer, low: 1, high: 3}")
    out = TrialRunner(cfg).run({"units": 4, "epochs": 2}, None)
    assert out.status == "completed" and out.epochs == 2 and "val_loss" in out.metrics


def test_failures_of_model_objectives(model_space):
    cfg = model_space(OBJ, "units: {type: integer, low: 2, high: 16}, broken: {choices: [false, true]}")
    out = TrialRunner(cfg).run({"units": 4, "broken": True}, None)
    assert out.status == "failed" and "cannot build this one" in out.error
    bad = model_space(OBJ.replace("load_data", "load_bad_data"))
    out = TrialRunner(bad).run({"units": 4}, None)
    assert out.status == "failed" and "500 samples but labels have 497" in out.error
    inf = model_space("{model: tiny_model.py:build_regressor, data: tiny_model.py:load_inf_data, loss: mse}",
                      "units: {type: integer, low: 2, high: 16}")
    out = TrialRunner(inf).run({"units": 4}, None)  # the data, not the training: named, not diverged
    assert (out.status, out.misuse, out.misuse_field) == ("failed", True, "objective.data")
    assert out.error == ("tiny_model.py:load_inf_data: train labels: sample 5 holds NaN or inf (drop or repair "
                         "such samples)")
    blows_up = model_space("{model: tiny_model.py:build_regressor, data: tiny_model.py:load_data, loss: mse}",
                           "units: {type: integer, low: 2, high: 16}",
                           training=", optimizer: sgd, learning_rate: 1.0e+30")
    out = TrialRunner(blows_up).run({"units": 4}, None)
    assert out.status == "diverged" and out.objective is None
    slow = model_space(OBJ, training=", time_limit: 0.001")
    out = TrialRunner(slow).run({"units": 4}, None)
    assert out.status == "timeout" and out.objective is None


def test_hdf5_data(model_space, tmp_path):
    import h5py

    import runpy

    (x, y), (xv, yv) = runpy.run_path(str(SPACES / "tiny_model.py"))["load_data"]()
    (tmp_path / "data").mkdir()
    for i, sl in enumerate((slice(0, 250), slice(250, 500))):
        with h5py.File(tmp_path / "data" / f"train_{i}.h5", "w") as h:
            h["features"], h["labels"] = x[sl], y[sl]
    with h5py.File(tmp_path / "data" / "val_0.h5", "w") as h:
        h["features"], h["labels"] = xv, yv
    cfg = model_space("{model: tiny_model.py:build_model, data: {train: data/train_*.h5, val: data/val_*.h5}, "
                      "loss: sparse_categorical_crossentropy, metrics: [accuracy], maximize: val_accuracy}",
                      training=", learning_rate: 0.01")
    out = TrialRunner(cfg).run({"units": 8}, None)
    assert out.status == "completed" and out.objective > 0.7
    # a model without keras.Input is built on one sample before its weights are flattened
    unbuilt = model_space("{model: tiny_model.py:build_unbuilt, data: {train: data/train_*.h5, val: data/val_*.h5}, "
                          "loss: sparse_categorical_crossentropy, metrics: [accuracy], maximize: val_accuracy}",
                          training=", learning_rate: 0.01")
    from mpiopt.objective import preflight

    preflight(unbuilt)
    out = TrialRunner(unbuilt).run({"units": 8}, None)
    assert out.status == "completed" and out.objective > 0.7, out.error
    missing = model_space("{model: tiny_model.py:build_model, data: {train: data/train_*.h5, val: data/val_*.h5, "
                          "features: x}, loss: sparse_categorical_crossentropy}")
    out = TrialRunner(missing).run({"units": 8}, None)
    # data the space cannot read fail every trial alike: the search stops (exit 2) at the first
    assert out.status == "failed" and out.misuse and "no dataset 'x'" in out.error
    # a compressed chunk corrupt past what the check reads: the same
    (tmp_path / "bad").mkdir()
    shutil.copy(tmp_path / "data" / "train_0.h5", tmp_path / "bad" / "train_0.h5")
    with h5py.File(tmp_path / "bad" / "train_1.h5", "w") as h:
        h.create_dataset("features", data=x[250:500], chunks=(50, x.shape[1]), compression="gzip")
        h["labels"] = y[250:500]
        last = h["features"].id.get_chunk_info(4)
    with open(tmp_path / "bad" / "train_1.h5", "r+b") as f:
        f.seek(last.byte_offset)
        f.write(b"\0" * last.size)
    corrupt = model_space("{model: tiny_model.py:build_model, data: {train: bad/train_*.h5, val: data/val_*.h5}, "
                          "loss: sparse_categorical_crossentropy, metrics: [accuracy], maximize: val_accuracy}")
    out = TrialRunner(corrupt).run({"units": 8}, None)
    assert out.status == "failed" and out.misuse and "train_1.h5: cannot read as HDF5" in out.error, out.error


@pytest.mark.mpi
@pytest.mark.slow
def test_mnist1d_search_under_mpiexec(tmp_path, cli_here):
    root = SPACES.parent.parent
    space = tmp_path / "mnist1d.yaml"
    text = (root / "searchspaces" / "mnist1d.yaml").read_text()
    text = text.replace("../examples/", str(root / "examples") + "/")
    text = text.replace("trials: 12", "trials: 4").replace("epochs: 15", "epochs: 3")
    space.write_text(text)
    p = run_cli(["search", space], cwd=tmp_path, np=3, timeout=300, env={"MPIOPT_PROGRESS_S": "0"})
    assert p.returncode == 0, p.stderr
    assert "trial 0, epoch 1 of 3: val_accuracy=" in p.stderr  # a training trial's progress lines
    df = mpiopt.load_results(tmp_path / "runs" / "mnist1d-mlp")
    assert len(df) == 4 and set(df.status) == {"completed"}, df.error.tolist()
    assert df.objective.max() > 0.3  # 10 classes: chance is 0.1
    assert {"val_accuracy", "val_loss", "accuracy", "loss"} <= set(df.columns)
    assert df.objective.tolist() == df.val_accuracy.tolist()
    for n in df.trial:
        assert (tmp_path / "runs" / "mnist1d-mlp" / "trials" / str(n) / "history.csv").exists()

    # the winner: its values, retrained, and its own trained model
    run = tmp_path / "runs" / "mnist1d-mlp"
    best = df.sort_values("objective", ascending=False).iloc[0]
    assert mpiopt.best_params(run)["units"] == best.params_units
    model = mpiopt.load_model(run)
    # compiled as trained (training.optimizer at the trial's learning rate), not Keras' default RMSprop
    assert type(model.optimizer).__name__ == "Adam"
    assert float(model.optimizer.learning_rate) == pytest.approx(best.params_learning_rate, rel=1e-6)
    (xv, yv) = runpy.run_path(str(root / "examples" / "mnist1d.py"))["load_data"]()[1]
    accuracy = float((model.predict(xv, verbose=0).argmax(axis=1) == yv).mean())
    assert accuracy == pytest.approx(best.val_accuracy, abs=1e-6)
    # trial 1 again, with its own seed (not trial 0's), on one rank as in its group of one: its first
    # epoch again, to float rounding (TensorFlow's threads here are not the search's one a rank).
    # (`--trial best` finds its trial as test_cli's function search does: the objective is no matter)
    p = cli_here("train", space, "--trial", "1", "--set", "epochs=1")
    assert p.returncode == 0 and "(trial 1: its values and seed, epochs as --set)" in p.stderr, p.stderr
    assert f"'units': {df.set_index('trial').params_units[1]}" in p.stderr and "epoch 1:" in p.stderr
    retrained = run / "train-trial-1"
    again, searched = (list(csv.DictReader(open(d / "history.csv"))) for d in (retrained, run / "trials" / "1"))
    assert len(again) == 1 and "val_accuracy" in again[0]
    assert float(again[0]["val_loss"]) == pytest.approx(float(searched[0]["val_loss"]), rel=1e-5)
    assert mpiopt.load_model(retrained).count_params() == mpiopt.load_model(run, trial=1).count_params()
    p = run_cli(["train", space, "--trial", "1"], cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and "already holds a training run" in p.stderr  # never overwritten


def test_the_mnist1d_example_makes_its_data_once_and_remakes_a_broken_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    example = runpy.run_path(str(SPACES.parent.parent / "examples" / "mnist1d.py"))
    made = example["load_data"](num_samples=200, seed=3)
    cache = tmp_path / "mpiopt" / "mnist1d_200_3.npz"
    assert cache.exists() and not list(cache.parent.glob("*.part*"))

    def arrays(data):
        return [*data[0], *data[1]]

    for again in (example["load_data"](num_samples=200, seed=3), example["_make"](200, 3)):
        assert all(a.dtype == b.dtype and (a == b).all() for a, b in zip(arrays(made), arrays(again), strict=True))
    for broken in (cache.read_bytes()[:100], b""):  # a torn or empty file: made again, not an error
        cache.write_bytes(broken)
        remade = example["load_data"](num_samples=200, seed=3)
        assert all((a == b).all() for a, b in zip(arrays(made), arrays(remade), strict=True))
        assert len(cache.read_bytes()) > 100


def test_a_trial_killed_as_it_trained_loads_its_checkpoints_best_weights_and_shows_that_epochs_metrics(
        model_space, tmp_path):
    import json

    import numpy as np

    from mpiopt.analysis import _rebuild

    cfg = model_space(OBJ.replace("build_model", "build_batchnorm"), training=", learning_rate: 0.2")
    run = tmp_path / "run"
    folder = run / "trials" / "0"
    out = TrialRunner(cfg).run({"units": 8}, None, trial_dir=folder)  # keeps its checkpoint, as a search's trial
    best = _rebuild(cfg, {"units": 8}, folder / "best.weights.h5")
    (folder / "best.weights.h5").unlink()  # killed before its result: the checkpoint holds its best weights
    (run / "config.yaml").write_text((tmp_path / "model.yaml").read_text() + f"source: {tmp_path / 'model.yaml'}\n")
    events = [{"event": "start", "trial": 0, "params": {"units": 8}, "group": 0, "ranks": 1, "time": 1.0}]
    for row in csv.DictReader(open(folder / "history.csv")):  # the epochs it reported
        metrics = {k: float(v) for k, v in row.items() if k != "epoch"}
        events.append({"event": "report", "trial": 0, "epoch": int(row["epoch"]), "metrics": metrics, "time": 2.0})
    (run / "trials.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert events[-1]["metrics"]["val_accuracy"] < out.objective  # its last epoch not its best: which weights tells
    model = mpiopt.load_model(run, 0)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), best.get_weights(), strict=True))
    row = mpiopt.load_results(run).iloc[0]
    assert (row.status, row.epochs, row.val_accuracy) == ("interrupted", 3, pytest.approx(out.objective))


def test_a_loaded_model_is_compiled_with_the_optimizer_it_trained_with():
    from mpiopt.analysis import _keras_optimizer

    opt = _keras_optimizer({"optimizer": {"name": "sgd", "momentum": 0.9}, "learning_rate": 0.01})
    assert (type(opt).__name__, opt.momentum) == ("SGD", 0.9) and float(opt.learning_rate) == pytest.approx(0.01)
    assert type(_keras_optimizer({"optimizer": "adam", "learning_rate": 0.003})).__name__ == "Adam"


DEFERRED = """
import keras
import numpy as np


def load_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return (x[:50], y[:50]), (x[50:], y[50:])


class Sub(keras.Model):
    def __init__(self, units):
        super().__init__()
        self.hidden, self.norm = keras.layers.Dense(units, activation="relu"), keras.layers.BatchNormalization()
        self.out = keras.layers.Dense(2, activation="softmax")

    def call(self, x, training=False):
        return self.out(self.norm(self.hidden(x), training=training))


def build_subclassed(units=8):
    return Sub(units)


def build_sequential_without_input(units=8):
    return keras.Sequential([keras.layers.Dense(units, activation="relu"), keras.layers.BatchNormalization(),
                             keras.layers.Dense(2, activation="softmax")])
"""


@pytest.mark.parametrize("build", ["build_subclassed", "build_sequential_without_input"])
def test_a_model_that_makes_its_weights_on_its_first_call_is_loaded(model_space, tmp_path, build):
    import numpy as np

    from mpiopt.analysis import _rebuild
    from mpiopt.config import import_callable

    (tmp_path / "deferred.py").write_text(DEFERRED)
    cfg = model_space(f"{{model: deferred.py:{build}, data: deferred.py:load_data, "
                      "loss: sparse_categorical_crossentropy}")
    (x, _), _ = import_callable("deferred.py:load_data", tmp_path, source="t", field="f")()
    trained = import_callable(f"deferred.py:{build}", tmp_path, source="t", field="f")(units=4)
    trained(x[:1], training=False)
    trained.save_weights(tmp_path / "best.weights.h5")
    model = _rebuild(cfg, {"units": 4}, tmp_path / "best.weights.h5")  # as load_model(RUN_DIR) rebuilds it
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), trained.get_weights(), strict=True))


def test_weights_the_disk_cannot_hold_are_refused_before_hdf5_starts_the_file(tmp_path, monkeypatch):
    # HDF5 running out of space in the middle of a file can crash the process instead of raising
    import errno
    from collections import namedtuple

    import keras

    from mpiopt.learn import _engine

    model = keras.Sequential([keras.Input((300,)), keras.layers.Dense(1000)])  # 1.2 MB of weights
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(_engine.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 2 * 2**20, 2 * 2**20))
    with pytest.raises(OSError) as info:
        _engine.save_weights(model, tmp_path / "best.weights.h5")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "best.weights.h5")
    assert not (tmp_path / "best.weights.h5").exists()
    monkeypatch.setattr(_engine.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 4 * 2**20, 4 * 2**20))
    _engine.save_weights(model, tmp_path / "best.weights.h5")
    assert (tmp_path / "best.weights.h5").stat().st_size > 1_200_000
    # many small variables: HDF5's structures outweigh the numbers (400 layers of 2 units, ~1.1 MB)
    many = keras.Sequential([keras.Input((1,))] + [keras.layers.Dense(2) for _ in range(400)])
    many.save_weights(str(tmp_path / "many.weights.h5"))
    size = (tmp_path / "many.weights.h5").stat().st_size
    monkeypatch.setattr(_engine.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - size, size - 1))
    with pytest.raises(OSError):
        _engine.save_weights(many, tmp_path / "other.weights.h5")

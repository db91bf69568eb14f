"""mpiopt.learn without MPI: sharding, stopping rules, schedules, checkpoints, resuming training."""
from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from mpiopt.learn import _checkpoint
from mpiopt.learn._control import EarlyStopping, Schedule, better_is_higher, target_reached
from mpiopt.learn._data import DataSource, load_source


def ids_of(shard):
    return np.asarray(shard[0]).reshape(-1).astype(int).tolist()


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_in_memory_shards_cover_every_sample_once_per_epoch(workers):
    x = np.arange(103, dtype=np.float32)
    src = DataSource(train=(x, x.copy()), val=(x[:5], x[:5]))
    orders = []
    for epoch in range(3):
        seen = []
        for w in range(workers):
            xs, ys = src.shard(w, workers, epoch, seed=5)
            assert np.array_equal(xs, ys)
            seen += ids_of((xs,))
        assert sorted(seen) == list(range(103))
        orders.append(seen)
    assert orders[0] != orders[1]  # reshuffled each epoch
    again = [ids_of(src.shard(w, workers, 1, seed=5)) for w in range(workers)]
    assert sum(again, []) == orders[1]  # and reproducibly from the seed
    sizes = [len(ids_of(src.shard(w, workers, 0, seed=5))) for w in range(workers)]
    assert max(sizes) - min(sizes) <= 1


def _h5_files(folder, sizes):
    import h5py

    start, files = 0, []
    for i, n in enumerate(sizes):
        f = folder / f"part_{i}.h5"
        with h5py.File(f, "w") as h:
            ids = np.arange(start, start + n, dtype=np.float32)
            h["features"] = ids[:, None]
            h["labels"] = ids
        start += n
        files.append(f)
    return start


@pytest.mark.parametrize("workers,by_file", [(2, True), (3, False), (4, False), (5, False)])
def test_hdf5_shards_by_file_or_by_range(tmp_path, workers, by_file):
    total = _h5_files(tmp_path, [10, 30, 20, 15])
    src = load_source({"train": "part_*.h5", "val": "part_0.h5", "features": "features", "labels": "labels"},
                      tmp_path)
    assert src.n_train() == total and src.by_file(workers) is by_file
    for epoch in range(2):
        seen = []
        for w in range(workers):
            xs, ys = src.shard(w, workers, epoch, seed=1)
            assert np.array_equal(xs[:, 0], ys)
            seen += ys.astype(int).tolist()
        assert sorted(seen) == list(range(total))


def test_an_empty_training_file_leaves_no_worker_without_samples(tmp_path):
    # four files, one of them empty, four workers: dealt by file, one worker had only the empty one
    from mpiopt._errors import TrialFailed

    total = _h5_files(tmp_path, [20, 20, 20, 0])
    src = load_source({"train": "part_*.h5", "val": "part_0.h5", "features": "features", "labels": "labels"},
                      tmp_path)
    assert [f.name for f in src.train_files] == ["part_0.h5", "part_1.h5", "part_2.h5"]
    shards = [src.shard(w, 4, 0, seed=1)[1] for w in range(4)]
    assert min(len(y) for y in shards) > 0 and sorted(np.concatenate(shards).astype(int)) == list(range(total))
    for f in tmp_path.glob("part_*.h5"):
        f.unlink()
    _h5_files(tmp_path, [0, 0])
    with pytest.raises(TrialFailed, match=r"objective.data.train: every file is empty \(part_0.h5, part_1.h5\)"):
        load_source({"train": "part_*.h5", "val": "part_1.h5", "features": "features", "labels": "labels"}, tmp_path)


def test_the_largest_shard_sets_how_long_a_group_steps_together(tmp_path):
    # whole files a worker each, within a tenth of an even share: the largest sets the steps (an
    # allreduce group that stepped for an even share left the rest of the largest untrained)
    _h5_files(tmp_path, [1100, 1000, 900])
    src = load_source({"train": "part_*.h5", "val": "part_0.h5", "features": "features", "labels": "labels"},
                      tmp_path)
    assert src.by_file(3) and [len(src.shard(w, 3, 0, 0)[1]) for w in range(3)] == [1100, 1000, 900]
    assert src.largest_shard(3) == 1100


def test_files_that_deal_unevenly_are_dealt_as_blocks(tmp_path):
    # 4 equal files on 3 workers: whole files gave one worker twice an even share, and the group
    # stepped until it was through while the others waited
    _h5_files(tmp_path, [1500] * 4)
    src = load_source({"train": "part_*.h5", "val": "part_0.h5", "features": "features", "labels": "labels"},
                      tmp_path)
    assert not src.by_file(3) and src.by_file(4)
    sizes = [len(src.shard(w, 3, 0, 0)[1]) for w in range(3)]
    assert src.largest_shard(3) == max(sizes) and max(sizes) - min(sizes) <= 32 and sum(sizes) == 6000
    assert [len(src.shard(w, 4, 0, 0)[1]) for w in range(4)] == [1500] * 4 and src.largest_shard(4) == 1500
    sizes = [len(src.shard(w, 5, 0, 0)[1]) for w in range(5)]  # fewer files than workers: blocks of 19 rows
    assert src.largest_shard(5) == max(sizes) and max(sizes) - min(sizes) <= 19 and sum(sizes) == 6000


def test_workers_sharing_a_file_each_read_only_their_own_blocks_of_it(tmp_path):
    # one file sorted by class, 4 workers: each used to read the whole file (4 copies in a group);
    # now each holds a quarter, the same every epoch in a new order, as much of each class
    from mpiopt.learn import _data

    _h5_files(tmp_path, [4000])
    spec = {"train": "part_*.h5", "val": "part_0.h5", "features": "features", "labels": "labels"}
    src = load_source(spec, tmp_path)
    shards = [[src.shard(w, 4, epoch, seed=3)[1].astype(int) for epoch in range(2)] for w in range(4)]
    assert sorted(np.concatenate([s[0] for s in shards])) == list(range(4000)) and src.train is None
    for first, second in shards:
        assert 1000 - 16 <= len(first) <= 1000 + 16 and sorted(first) == sorted(second)
        assert not np.array_equal(first, second)
        assert 0.47 < np.mean(first < 2000) < 0.53  # as much of both halves of the sorted file
    assert _data.deal_blocks([4000], 4) == _data.deal_blocks([4000], 4)  # every process deals alike
    assert all(_data.BLOCKS_PER_WORKER - 2 <= len(mine) <= _data.BLOCKS_PER_WORKER
               for mine in _data.deal_blocks([4000], 4))  # 250 blocks of 16 rows


def test_a_bad_value_in_a_workers_block_names_its_row_in_the_file(tmp_path):
    import h5py

    from mpiopt._errors import TrialFailed

    x = np.zeros((1000, 2), dtype=np.float32)
    x[777, 1] = np.nan
    with h5py.File(tmp_path / "d.h5", "w") as h:
        h["features"], h["labels"] = x, np.zeros(1000)
    src = load_source({"train": "d.h5", "val": "d.h5", "features": "features", "labels": "labels"}, tmp_path)
    from mpiopt.learn._data import deal_blocks

    owner = [w for w, mine in enumerate(deal_blocks([1000], 2)) if any(lo <= 777 < hi for _, lo, hi in mine)]
    src.shard(1 - owner[0], 2, 0, 0)  # the other worker's rows are all good
    with pytest.raises(TrialFailed, match=r"d.h5: features: sample 777 holds NaN or inf"):
        src.shard(owner[0], 2, 0, 0)


def test_files_are_balanced_by_samples(tmp_path):
    _h5_files(tmp_path, [50, 10, 10, 10, 10, 10])
    src = load_source({"train": "part_*.h5", "val": "part_0.h5", "features": "features", "labels": "labels"},
                      tmp_path)
    loads = sorted(len(src.shard(w, 2, 0, 0)[1]) for w in range(2))
    assert loads == [50, 50]


def test_hdf5_groups_give_named_inputs(tmp_path):
    import h5py

    with h5py.File(tmp_path / "d.h5", "w") as h:
        h["inputs/a"] = np.zeros((6, 2))
        h["inputs/b"] = np.ones((6, 3))
        h["y"] = np.arange(6)
    src = load_source({"train": "d.h5", "val": "d.h5", "features": "inputs", "labels": "y"}, tmp_path)
    x, y = src.shard(0, 1, 0, 0)
    assert set(x) == {"a", "b"} and x["b"].shape == (6, 3) and len(y) == 6


def test_a_missing_dataset_inside_a_group_names_the_groups_members(tmp_path):
    import h5py

    from mpiopt._errors import TrialFailed

    with h5py.File(tmp_path / "jets.h5", "w") as h:
        h["jets/features"], h["jets/labels"] = np.zeros((6, 2)), np.zeros(6)
    with pytest.raises(TrialFailed, match=r"no dataset 'jets/feature' \(jets has: features, labels\)"):
        load_source({"train": "jets.h5", "val": "jets.h5", "features": "jets/feature", "labels": "jets/labels"},
                    tmp_path)
    with pytest.raises(TrialFailed, match=r"no dataset 'jet/features' \(it has: jets\)"):
        load_source({"train": "jets.h5", "val": "jets.h5", "features": "jet/features", "labels": "jets/labels"},
                    tmp_path)


def test_bad_hdf5_data_is_a_clear_error(tmp_path):
    import h5py

    from mpiopt._errors import TrialFailed

    with h5py.File(tmp_path / "d.h5", "w") as h:
        h["features"] = np.zeros((6, 2))
        h["labels"] = np.zeros(5)
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    with pytest.raises(TrialFailed, match="no files match"):
        load_source({"train": "nothing_*.h5", "val": "d.h5"}, tmp_path)
    with pytest.raises(TrialFailed, match="cannot read as HDF5"):
        load_source({"train": "junk.h5", "val": "d.h5", "features": "features", "labels": "labels"}, tmp_path)
    src = load_source({"train": "d.h5", "val": "d.h5", "features": "features", "labels": "labels"}, tmp_path)
    with pytest.raises(TrialFailed, match="features have 6 samples but labels have 5"):
        src.shard(0, 1, 0, 0)


def test_early_stopping_and_target():
    # as Keras': `patience` epochs in a row without an improvement by more than min_delta
    es = EarlyStopping(monitor="val_loss", patience=2, min_delta=0.01)
    assert es.update(1, {"val_loss": 1.0}) == (True, False)
    assert es.update(2, {"val_loss": 0.995}) == (False, False)  # within min_delta
    assert es.update(3, {"val_loss": 0.999}) == (False, True)
    assert es.best_epoch == 1
    one = EarlyStopping(monitor="val_loss", patience=1)
    assert one.update(1, {"val_loss": 1.0}) == (True, False) and one.update(2, {"val_loss": 1.1}) == (False, True)
    acc = EarlyStopping(monitor="val_accuracy", patience=0)
    assert acc.update(1, {"val_accuracy": 0.5}) == (True, False)
    assert acc.update(2, {"val_accuracy": 0.6}) == (True, False)
    assert acc.update(3, {"val_accuracy": 0.55}) == (False, True)
    assert better_is_higher("val_accuracy") and not better_is_higher("val_loss")
    assert target_reached({"monitor": "val_accuracy", "value": 0.9, "mode": "auto"}, {"val_accuracy": 0.91})
    assert not target_reached({"monitor": "val_loss", "value": 0.1, "mode": "auto"}, {"val_loss": 0.2})
    assert target_reached({"monitor": "val_mae", "value": 0.3, "mode": "min"}, {"val_mae": 0.25})


def test_learning_rate_scaling_and_warmup():
    s = Schedule(base=0.1, workers=4, scaling="linear", warmup_epochs=2)
    assert s.peak == pytest.approx(0.4)
    assert s.rate(0) == pytest.approx(0.1) and s.rate(1) == pytest.approx(0.25) and s.rate(5) == pytest.approx(0.4)
    assert Schedule(base=0.1, workers=4, scaling="sqrt").rate(0) == pytest.approx(0.2)
    assert Schedule(base=0.1, workers=4).rate(0) == pytest.approx(0.1)


def test_checkpoint_round_trip(tmp_path):
    arrays = {"weights": np.arange(5, dtype=np.float32), "opt_m": np.ones(5, dtype=np.float32)}
    _checkpoint.save(tmp_path, arrays, {"epoch": 3, "history": [{"epoch": 1, "loss": 0.5}]})
    got, meta = _checkpoint.load(tmp_path)
    assert meta["epoch"] == 3 and np.array_equal(got["weights"], arrays["weights"])
    assert np.array_equal(got["opt_m"], arrays["opt_m"])
    assert _checkpoint.load(tmp_path / "none") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [_checkpoint.NPZ]  # one file: no pair for a kill to tear
    (tmp_path / _checkpoint.NPZ).write_bytes(b"garbage")
    assert _checkpoint.load(tmp_path) is None  # unreadable: train from scratch, never crash


def test_a_checkpoint_of_the_two_file_format_is_still_read(tmp_path):
    # a search resumed by this mpiopt from checkpoints that kept their JSON part in its own file
    import json

    np.savez(tmp_path / _checkpoint.NPZ, weights=np.arange(3, dtype=np.float32))
    (tmp_path / _checkpoint.META).write_text(json.dumps({"epoch": 2}))
    got, meta = _checkpoint.load(tmp_path)
    assert meta == {"epoch": 2} and np.array_equal(got["weights"], np.arange(3, dtype=np.float32))
    _checkpoint.save(tmp_path, {"weights": np.zeros(3, dtype=np.float32)}, {"epoch": 3})
    assert _checkpoint.load(tmp_path)[1] == {"epoch": 3} and not (tmp_path / _checkpoint.META).exists()


@pytest.mark.slow
def test_interrupted_training_resumes_from_its_checkpoint(tmp_path):
    import runpy

    from conftest import SPACES
    from mpiopt.learn import Job, train

    mod = runpy.run_path(str(SPACES / "tiny_model.py"))
    src = DataSource(*mod["load_data"]())
    training = {"epochs": 4, "batch_size": 50, "optimizer": "adam", "learning_rate": 0.01, "mode": "allreduce",
                "checkpoint_every": 1}

    def job(out, on_epoch=None, **more):
        return Job(build=mod["build_model"], model_kwargs={"units": 8}, source=src, training=training,
                   loss="sparse_categorical_crossentropy", metrics=("accuracy",), seed=3, out_dir=out,
                   on_epoch=on_epoch, **more)

    whole = train(None, job(tmp_path / "whole"))

    class Killed(Exception):
        pass

    def die_after_3(epoch, row):
        if epoch == 3:
            raise Killed

    with pytest.raises(Killed):
        train(None, job(tmp_path / "cut", die_after_3, began=time.perf_counter() - 30.0))
    assert (tmp_path / "cut" / _checkpoint.NPZ).exists()
    resumed = train(None, job(tmp_path / "cut"))
    assert [r["epoch"] for r in resumed.history] == [1, 2, 3, 4]
    # the time spent before the checkpoint counts in the trial's duration (duration_s), from the
    # job's start (30 s before this attempt began training), its model's build included
    assert whole.resumed_s is None and resumed.resumed_s > 30.0
    for a, b in zip(whole.history, resumed.history, strict=True):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-4)
    # kept until the search records the result (it drops it then): a kill before that goes on
    # from the end, training nothing again
    assert (tmp_path / "cut" / _checkpoint.NPZ).exists()
    told = []
    again = train(None, job(tmp_path / "cut", lambda epoch, row: told.append(epoch)))
    assert told == [] and again.history == resumed.history
    train(None, job(tmp_path / "once", resume=False))  # no search resumes it (mpiopt train): dropped at the end
    assert not (tmp_path / "once" / _checkpoint.NPZ).exists() and (tmp_path / "once" / "best.weights.h5").exists()
    assert (tmp_path / "cut" / "best.weights.h5").exists()
    assert (tmp_path / "cut" / "history.csv").read_text().count("\n") == 5

    # killed after epoch 3's checkpoint, before the search recorded its report (it holds 2): the
    # resumed trial reports epoch 3 again, a rung, before it trains on; a pause there ends it
    with pytest.raises(Killed):
        train(None, job(tmp_path / "gap", die_after_3))
    for decision, epochs in ((None, [3, 4]), ("paused", [3])):
        shutil.copytree(tmp_path / "gap", tmp_path / f"gap-{decision}")
        told = []

        def judge(epoch, row, decision=decision, told=told):
            told.append((epoch, row["epoch"]))
            return decision if epoch == 3 else None

        out = train(None, job(tmp_path / f"gap-{decision}", judge, decide_at=frozenset({1, 3}), reported=2))
        assert told == [(e, e) for e in epochs]
        assert [r["epoch"] for r in out.history] == [1, 2, 3, 4][:epochs[-1]] and out.stopped == decision
    told.clear()  # a search that holds the checkpoint's epoch reports nothing again
    shutil.copytree(tmp_path / "gap", tmp_path / "gap-held")
    train(None, job(tmp_path / "gap-held", lambda epoch, row: told.append(epoch), reported=3))
    assert told == [4]


@pytest.mark.slow
def test_a_flat_model_per_trial_is_no_retracing_warning():
    # each trial's FlatModel traces its own functions once; TensorFlow, counting those traces across
    # trials, would take them for a retracing loop
    import io
    import logging

    import keras

    from mpiopt.learn._flat import FlatModel

    seen = io.StringIO()
    handler = logging.StreamHandler(seen)
    logging.getLogger("tensorflow").addHandler(handler)
    try:
        for units in range(4, 12):
            keras.backend.clear_session()
            model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(units), keras.layers.Dense(2)])
            model.compile(loss="mse")
            flat = FlatModel(model)
            flat.set(flat.get())
            flat.grad_step(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32))
    finally:
        logging.getLogger("tensorflow").removeHandler(handler)
    assert "retracing" not in seen.getvalue()


@pytest.mark.slow
def test_the_state_that_travels_leaves_out_a_frozen_backbones_weights_but_not_its_dropout_seed():
    # a frozen layer's weights never change in training (its batch normalization runs in inference
    # mode) and build_model makes them again: workers need not send them every epoch. Its
    # dropout's seed state changes, and the trainable part's batch-norm statistics do
    import keras

    from mpiopt.learn._flat import FlatModel

    backbone = keras.Sequential([keras.Input((8,)), keras.layers.Dense(500), keras.layers.BatchNormalization(),
                                 keras.layers.Dropout(0.2)], name="backbone")
    backbone.trainable = False
    model = keras.Sequential([keras.Input((8,)), backbone, keras.layers.Dense(4), keras.layers.BatchNormalization(),
                              keras.layers.Dropout(0.3), keras.layers.Dense(2)])
    flat = FlatModel(model)
    assert sorted(v.path.split("/")[-1] for v in flat.state) == [
        "moving_mean", "moving_variance", "seed_generator_state", "seed_generator_state"]
    assert flat.get_state().size == 4 + 4 + 2 + 2  # not the backbone's 8 x 500 + 500 + 4 x 500
    x, y = np.zeros((3, 8), np.float32), np.zeros(3, np.int64)
    model.compile(loss="sparse_categorical_crossentropy")
    before = [v.numpy().copy() for v in backbone.weights if "float" in str(v.dtype)]
    flat.grad_step(x, y)
    assert all((a == v.numpy()).all() for a, v in zip(before, (v for v in backbone.weights if "float" in str(v.dtype)),
                                                     strict=True))


def test_a_flat_model_traces_its_steps_once_and_validates_as_keras_does():
    # an epoch's last batch is smaller: one trace serves every batch size, and the metrics made
    # before the first trace spare TensorFlow the second trace it takes when a trace makes variables
    import keras

    from mpiopt.learn._flat import FlatModel

    keras.utils.set_random_seed(0)
    a, b = keras.Input(shape=(3,), name="a"), keras.Input(shape=(2,), name="b")
    out = keras.layers.Dense(4, activation="softmax")(keras.layers.Concatenate()([a, b]))
    model = keras.Model({"a": a, "b": b}, out)
    model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.default_rng(0)
    x = {"a": rng.normal(size=(10, 3)).astype(np.float32), "b": rng.normal(size=(10, 2)).astype(np.float32)}
    y = rng.integers(0, 4, size=10)
    flat = FlatModel(model)
    for lo in range(0, 10, 4):
        flat.grad_step({k: v[lo:lo + 4] for k, v in x.items()}, y[lo:lo + 4])
    ours = flat.evaluate(x, y, batch_size=4)
    assert flat._grad_step.experimental_get_tracing_count() == 1
    assert flat._test_step.experimental_get_tracing_count() == 1
    theirs = model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
    assert set(ours) == {"loss", "accuracy"} and ours == pytest.approx(theirs, rel=1e-6)


@pytest.mark.parametrize("merit, early_stopping, kept", [
    (("val_accuracy", "maximize"), None, 2),  # the epoch the search judges the run by, not the last (3)
    (("val_accuracy", "maximize"), {"monitor": "val_loss", "patience": 5}, 2),  # not early stopping's (1)
    (("val_loss", "minimize"), None, 1),
    (None, None, 3),  # learn used alone, no figure of merit nor early stopping: the last
    (None, {"monitor": "val_loss", "patience": 5}, 1),
])
def test_the_weights_kept_are_the_best_epochs_by_the_figure_of_merit(merit, early_stopping, kept):
    from mpiopt.learn._engine import Job, _Epochs

    job = Job(build=None, model_kwargs={}, source=None, training={"early_stopping": early_stopping}, merit=merit)
    epochs = _Epochs(job, writer=False)
    rows = [{"epoch": 1, "val_loss": 0.5, "val_accuracy": 0.80}, {"epoch": 2, "val_loss": 0.6, "val_accuracy": 0.90},
            {"epoch": 3, "val_loss": 0.7, "val_accuracy": 0.90}]  # a tie at 0.90: the first stands
    for row in rows:
        epochs.add(row, np.full(3, float(row["epoch"])), np.zeros(1))
    assert epochs.best_weights.tolist() == [float(kept)] * 3


def test_weights_gone_nan_with_a_finite_loss_end_the_run_diverged():
    from mpiopt.learn._engine import Job, _Epochs

    # a NaN feature through a relu leaves the loss finite while the weights fill with NaN
    epochs = _Epochs(Job(build=None, model_kwargs={}, source=None, training={}), writer=False)
    epochs.add({"epoch": 1, "loss": 1.09, "val_loss": 1.1}, np.array([0.5, np.nan]), np.zeros(1))
    assert epochs.stopped == "diverged"


@pytest.mark.parametrize("every, reported, warned", [(1, 3, True), (2, 1, False), (2, 2, True), (1, 0, False)])
def test_a_trial_whose_reported_epochs_have_no_checkpoint_is_warned_of(tmp_path, caplog, every, reported, warned):
    from mpiopt.learn._engine import Job, _Epochs

    # a paused trial's checkpoint deleted by hand: promoted, it trains again from epoch 0, and says so;
    # with checkpoint_every 2, an epoch 1 reported before its kill had no checkpoint to lose
    job = Job(build=None, model_kwargs={}, source=None, training={"checkpoint_every": every}, out_dir=tmp_path,
              reported=reported, name="trial 7")
    with caplog.at_level("WARNING", logger="mpiopt.learn"):
        assert _Epochs(job, writer=True).restore(None) is None
    assert [r.getMessage() for r in caplog.records] == (
        [f"trial 7: no readable checkpoint.npz in {tmp_path}, though the search holds {reported} of its epochs: it "
         "trains again from epoch 0"] if warned else [])


def test_data_paths_take_the_home_folder_as_a_shell_does(tmp_path, monkeypatch):
    from mpiopt.learn._data import file_list

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "d").mkdir()
    for name in ("a.h5", "b.h5"):
        (tmp_path / "d" / name).write_bytes(b"")
    (tmp_path / "list.txt").write_text("d/a.h5\n")
    elsewhere = tmp_path / "yaml_folder"
    want = [(tmp_path / "d" / n).resolve() for n in ("a.h5", "b.h5")]
    assert file_list("~/d/*.h5", elsewhere, "train") == want
    assert file_list(["~/d/a.h5", "~/d/b.h5"], elsewhere, "train") == want
    assert file_list("~/list.txt", elsewhere, "train") == want[:1]


def test_a_txt_list_names_files_relative_to_its_own_folder_and_a_missing_one_by_its_line(tmp_path, monkeypatch):
    from mpiopt.learn._data import DataError, file_list

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "data").mkdir()
    for name in ("t0.h5", "t1.h5"):
        (tmp_path / "data" / name).write_bytes(b"")
    (tmp_path / "data" / "train.txt").write_text("# made by ls\nt0.h5\n\n~/data/t1.h5\n")
    assert file_list("data/train.txt", tmp_path, "train") == [tmp_path / "data" / n for n in ("t0.h5", "t1.h5")]
    (tmp_path / "data" / "train.txt").write_text("t0.h5\ndata/t1.h5\n")  # written from the space file's folder
    with pytest.raises(DataError, match=r"^objective.data.train: train.txt line 2 names 'data/t1.h5': no such file "
                                        r".*/data/data/t1.h5 \(a .txt file's paths are relative to its own folder\)$"):
        file_list("data/train.txt", tmp_path, "train")
    (tmp_path / "data" / "train.txt").write_text("# nothing yet\n")
    with pytest.raises(DataError, match=r"objective.data.train: .*train.txt names no files$"):
        file_list("data/train.txt", tmp_path, "train")


def test_a_data_file_named_twice_is_refused(tmp_path):
    # its samples would count twice, and folds cut by file would validate on what they train on
    from mpiopt.learn._data import DataError, file_list

    (tmp_path / "d").mkdir()
    for name in ("a.h5", "b.h5"):
        (tmp_path / "d" / name).write_bytes(b"")
    (tmp_path / "d" / "link.h5").symlink_to(tmp_path / "d" / "a.h5")
    a = (tmp_path / "d" / "a.h5").resolve()
    for spec in (["d/a.h5", "d/b.h5", "d/a.h5"], ["d/a.h5", "d/link.h5"], "d/*.h5"):
        with pytest.raises(DataError, match=f"^objective.data.train names {a} twice: its samples would count twice$"):
            file_list(spec, tmp_path, "train")
    (tmp_path / "d" / "list.txt").write_text("a.h5\nb.h5\na.h5\n")
    with pytest.raises(DataError, match=f"^objective.data.val: list.txt names {a} twice"):
        file_list("d/list.txt", tmp_path, "val")


@pytest.mark.parametrize("reported", [
    ["epoch", "loss", "accuracy", "val_loss", "val_accuracy"],  # one process
    ["epoch", "accuracy", "loss", "val_loss", "val_accuracy"],  # downpour, easgd, gem
    ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"],  # allreduce
])
def test_history_columns_are_in_one_order_whatever_the_mode_reports(reported):
    from mpiopt.learn._engine import history_columns

    assert history_columns(dict.fromkeys(reported, 0.0)) == ["epoch", "loss", "accuracy", "val_loss", "val_accuracy"]


def test_each_allreduce_rank_reads_only_its_part_of_the_validation_files(tmp_path):
    import itertools

    from mpiopt.learn import _data

    _h5_files(tmp_path, [7, 5, 0, 9])  # 21 validation samples over four files, one empty
    spec = {"train": "part_0.h5", "val": "part_*.h5", "features": "features", "labels": "labels"}
    src = load_source(spec, tmp_path)
    for parts in (1, 2, 3, 5, 25):
        got = [src.validation_part(p, parts) for p in range(parts)]
        assert [len(y) for _, y in got] == [len(a) for a in np.array_split(np.arange(21), parts)]
        assert np.concatenate([y for _, y in got]).astype(int).tolist() == list(range(21))
        assert all(np.array_equal(x[:, 0], y) for x, y in got)
    assert src.val is None  # never read whole
    assert np.array_equal(src.validation()[1], np.arange(21))
    for n in range(12):
        for parts in range(1, 5):
            ends = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(n), parts)]).tolist()
            assert [_data._part_bounds(n, p, parts) for p in range(parts)] == list(itertools.pairwise(ends))

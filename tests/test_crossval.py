"""k-fold cross-validation (`objective.folds`): cutting the folds, merging their results, a k-fold
trial trained for real and re-run after losing one fold, and a search under mpiexec."""
from __future__ import annotations

import csv
import json
import math
import shutil

import numpy as np
import pytest

import mpiopt
from conftest import SPACES, run_cli
from mpiopt._errors import ConfigError
from mpiopt.crossval import FoldRun, fold_dir, load_fold, mean_curve, merge_folds, plan_folds, save_fold
from mpiopt.learn._data import DataSource, fold_sizes, fold_source, load_source, sample_folds
from mpiopt.trial import TrialResult, TrialStatus


def ids(struct) -> list[int]:
    return np.asarray(struct).reshape(-1).astype(int).tolist()


# -- cutting the folds -----------------------------------------------------------------------------
def test_in_memory_folds_partition_the_training_data_the_same_way_every_time():
    x = np.arange(100, dtype=np.float32)
    src = DataSource(train=(x, x.copy()), val=(x[:7], x[:7]))
    held = []
    for k in range(3):
        fold = fold_source(src, 3, k, seed=4)
        assert fold is fold_source(src, 3, k, seed=4)  # cached: every trial trains on the same object
        train = [ids(fold.shard(w, 2, 0, seed=1)[0]) for w in range(2)]
        val = ids(fold.validation()[0])
        assert sorted(train[0] + train[1]) == sorted(set(range(100)) - set(val))
        assert fold.n_train() == 100 - len(val) and ids(fold.first(3)) == sorted(train[0] + train[1])[:3]
        held += val
    assert sorted(held) == list(range(100))  # each sample validated in exactly one fold; the given val set in none
    assert sorted(len(part) for part in sample_folds(100, 3, 4)) == [33, 33, 34]
    assert [p.tolist() for p in sample_folds(100, 3, 4)] == [p.tolist() for p in sample_folds(100, 3, 4)]
    assert [p.tolist() for p in sample_folds(100, 3, 4)] != [p.tolist() for p in sample_folds(100, 3, 5)]


def _h5_parts(folder, sizes):
    import h5py

    start = 0
    for i, n in enumerate(sizes):
        with h5py.File(folder / f"part_{i}.h5", "w") as h:
            ids_ = np.arange(start, start + n, dtype=np.float32)
            h["features"], h["labels"] = ids_[:, None], ids_
        start += n
    return start


def _h5_source(folder):
    return load_source({"train": "part_*.h5", "val": "part_0.h5", "features": "features", "labels": "labels"},
                       folder)


def test_hdf5_folds_by_file_where_there_are_enough_files(tmp_path):
    total = _h5_parts(tmp_path, [40, 10, 10, 20, 20, 30])
    src = _h5_source(tmp_path)
    held_files, held = [], []
    for k in range(3):
        fold = fold_source(src, 3, k, seed=0)
        assert fold.train is None and len(fold.val_files) >= 1  # whole files, read on demand
        assert not set(fold.val_files) & set(fold.train_files)
        assert sorted(fold.val_files + fold.train_files) == sorted(src.train_files)
        val = ids(fold.validation()[1])
        train = ids(fold.shard(0, 1, 0, seed=2)[1])
        assert sorted(train + val) == list(range(total)) and len(val) == 130 - fold.n_train()
        held_files += fold.val_files
        held.append(len(val))
    assert sorted(held_files) == sorted(src.train_files)
    assert sorted(held) == [40, 40, 50]  # balanced by samples: the largest file first onto the lightest fold
    by, sizes = fold_sizes(src, 3, seed=0)  # what `mpiopt check` says of them
    assert by == "file" and sizes == [len(ids(fold_source(src, 3, k, seed=0).validation()[1])) for k in range(3)]


def test_hdf5_folds_by_sample_where_files_are_fewer_than_folds(tmp_path):
    total = _h5_parts(tmp_path, [25, 35])
    src = _h5_source(tmp_path)
    held = []
    for k in range(3):
        fold = fold_source(src, 3, k, seed=0)
        assert fold.rows is not None and fold.n_train() == total - len(ids(fold.validation()[1]))
        val = ids(fold.validation()[1])
        train = ids(fold.shard(1, 2, 0, seed=3)[1]) + ids(fold.shard(0, 2, 0, seed=3)[1])
        assert sorted(train + val) == list(range(total))
        held += val
    assert sorted(held) == list(range(total))
    assert fold_sizes(src, 3, seed=0) == ("sample", [20, 20, 20])


# -- who trains which fold, and merging them ---------------------------------------------------------
@pytest.mark.parametrize("size,folds,teams,parallel,said", [
    (4, 3, [(0, 1), (2,), (3,)], True, "trained at once on sub-groups of 2, 1, 1 ranks"),
    (3, 3, [(0,), (1,), (2,)], True, "trained at once on sub-groups of 1, 1, 1 rank"),
    (7, 2, [(0, 1, 2, 3), (4, 5, 6)], True, "trained at once on sub-groups of 4, 3 ranks"),
    (2, 3, [(0, 1)], False, "trained in turn by the whole group of 2 ranks"),
    (1, 5, [(0,)], False, "trained in turn by the whole group of 1 rank"),
])
def test_fold_plans(size, folds, teams, parallel, said):
    plan = plan_folds(size, folds)
    assert [tuple(t) for t in plan.teams] == teams and plan.parallel is parallel
    assert plan.describe() == said  # as `mpiopt check` says it
    assert sorted(k for ks in plan.folds for k in ks) == list(range(folds))
    assert plan.team_of(size - 1) == len(teams) - 1


def done(value, rank=0, fold=0, earlier=0.0, **metrics):
    result = TrialResult(objective=value, metrics={"val_loss": value, **metrics}, epochs=3)
    return FoldRun(fold, rank, result, earlier_s=earlier)


def test_merged_folds_give_the_mean_and_the_spread():
    runs = [done(0.2, fold=0, loss=1.0), done(0.4, fold=1, loss=2.0), done(0.9, fold=2, loss=3.0, earlier=5.0)]
    m = merge_folds(runs, 3, parallel=True)
    assert m.status == "completed" and m.objective == pytest.approx(0.5)
    assert m.objective_std == pytest.approx(math.sqrt(((0.3 ** 2) + (0.1 ** 2) + (0.4 ** 2)) / 3))
    assert m.metrics == pytest.approx({"val_loss": 0.5, "loss": 2.0}) and m.epochs == 3
    assert m.resumed_s == 5.0  # the longest of folds trained at once
    assert merge_folds([done(0.2, fold=0, earlier=1.0), done(0.4, fold=1, earlier=2.0)], 2,
                       parallel=False).resumed_s == 3.0  # folds in turn: their sum


def test_the_mean_curve_runs_to_the_longest_fold_with_early_stopped_folds_at_their_last_epoch():
    short = [{"epoch": 1, "val_loss": 1.0}, {"epoch": 2, "val_loss": 0.5}]
    long = [{"epoch": 1, "val_loss": 3.0}, {"epoch": 2, "val_loss": 2.5}, {"epoch": 3, "val_loss": 1.5}]
    assert mean_curve([short, long]) == [{"val_loss": 2.0, "epoch": 1}, {"val_loss": 1.5, "epoch": 2},
                                         {"val_loss": 1.0, "epoch": 3}]


def test_the_first_bad_fold_decides_the_trial():
    diverged = FoldRun(2, 0, TrialResult(status=TrialStatus.DIVERGED, error="training diverged"))
    timeout = FoldRun(1, 1, TrialResult(status=TrialStatus.TIMEOUT, error="stopped by training.time_limit"))
    m = merge_folds([done(0.2, fold=0), diverged, timeout], 3, parallel=True)
    assert m.status == "timeout" and m.objective is None and m.objective_std is None
    assert m.error == "fold 2 of 3: group rank 1: stopped by training.time_limit"  # a sub-group of one rank
    # a fold's sub-group of two ranks: its rank that failed names the error, not the peer that gave up
    echo = FoldRun(0, 0, TrialResult(status=TrialStatus.FAILED, error="GroupPeerFailed: rank 1 of the group failed"))
    own = FoldRun(0, 1, TrialResult(status=TrialStatus.FAILED, error="ValueError: bad", detail="Traceback: bad"))
    m = merge_folds([echo, own, done(0.3, rank=2, fold=1)], 2, parallel=True)
    assert m.status == "failed" and m.error == "fold 1 of 2: group rank 1: ValueError: bad"
    assert "Traceback: bad" in m.detail


def test_a_folds_result_survives_on_disk_or_is_trained_again(tmp_path):
    folder = fold_dir(tmp_path, 1)
    assert folder.name == "fold_2" and load_fold(folder) is None
    folder.mkdir()
    result = TrialResult(objective=0.25, metrics={"val_loss": 0.25}, epochs=2)
    save_fold(folder, result, [{"epoch": 1, "val_loss": 0.3}, {"epoch": 2, "val_loss": 0.25}], 3.5)
    back = load_fold(folder)
    assert TrialResult.from_json(back["result"]) == result and back["trained_s"] == 3.5
    assert back["history"][1] == {"epoch": 2, "val_loss": 0.25}
    (folder / "fold.json").write_text('{"result": {"status": "completed"}, "hist')  # torn by hand: never by save_fold
    assert load_fold(folder) is None


# -- a k-fold trial trained for real ------------------------------------------------------------------
TINY = ("{model: tiny_model.py:build_model, data: tiny_model.py:load_data, loss: sparse_categorical_crossentropy, "
        "metrics: [accuracy], maximize: val_accuracy, folds: 3}")


@pytest.fixture
def tiny_space(tmp_path):
    shutil.copy(SPACES / "tiny_model.py", tmp_path / "tiny_model.py")

    def make(objective=TINY, training="epochs: 2, batch_size: 64, learning_rate: 0.01", name="tiny.yaml"):
        p = tmp_path / name
        p.write_text(f"name: tiny\nobjective: {objective}\nparameters: {{units: {{type: integer, low: 2, high: 16}}}}\n"
                     f"search: {{initial_points: 2, trials: 2, seed: 0}}\ntraining: {{{training}}}\n")
        return p

    return make


@pytest.mark.slow
def test_a_k_fold_trial_and_its_re_run_after_losing_one_fold(tiny_space, tmp_path):
    from mpiopt.config import load_config
    from mpiopt.objective import TrialRunner

    cfg = load_config(tiny_space())
    trial_dir = tmp_path / "trials" / "0"
    out = TrialRunner(cfg).run({"units": 8}, None, trial_dir=trial_dir)
    assert out.status == "completed", out.error
    kept = [json.loads((fold_dir(trial_dir, k) / "fold.json").read_text()) for k in range(3)]
    values = [k["result"]["objective"] for k in kept]
    assert out.objective == pytest.approx(np.mean(values)) and out.objective_std == pytest.approx(np.std(values))
    for k in range(3):
        rows = list(csv.DictReader(open(fold_dir(trial_dir, k) / "history.csv")))
        assert [r["epoch"] for r in rows] == ["1", "2"]
        assert max(float(r["val_accuracy"]) for r in rows) == pytest.approx(values[k])
    assert len(set(values)) == 3  # three different validation parts

    # a re-run of the trial (a --resume after a kill) trains only the fold that left no result
    (fold_dir(trial_dir, 1) / "fold.json").unlink()
    stamps = {k: (fold_dir(trial_dir, k) / "history.csv").stat().st_mtime_ns for k in (0, 2)}
    again = TrialRunner(cfg).run({"units": 8}, None, trial_dir=trial_dir)
    assert again.status == "completed" and (fold_dir(trial_dir, 1) / "fold.json").exists()
    assert {k: (fold_dir(trial_dir, k) / "history.csv").stat().st_mtime_ns for k in (0, 2)} == stamps
    assert again.resumed_s > 0  # the folds read back carry their training time
    redone = json.loads((fold_dir(trial_dir, 1) / "fold.json").read_text())["result"]["objective"]
    assert again.objective == pytest.approx(np.mean([values[0], redone, values[2]]))


@pytest.mark.slow
def test_more_folds_than_training_samples_is_refused_before_the_search(tiny_space, tmp_path, cli_here):
    p = tiny_space(TINY.replace("folds: 3", "folds: 501"))
    r = run_cli(["check", p], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"mpiopt: error: {p}: objective.folds: 501 folds, but the training data have 500 samples: "
        "every fold needs at least one")
    # groups of different sizes fold differently (test_fold_plans has each size's plan)
    r = cli_here("check", tiny_space(training="epochs: 1, group_size: 2"), "--np", "6")
    assert r.returncode == 0, r.stderr
    assert ("folds       3, groups of 3: trained at once on sub-groups of 1, 1, 1 rank; groups of 2: trained in "
            "turn by the whole group of 2 ranks (the figure of merit: the mean over the folds); cut by sample: "
            "167, 167 and 166 samples") in r.stdout


@pytest.mark.mpi
@pytest.mark.slow
def test_a_k_fold_search_under_mpiexec(tiny_space, tmp_path, cli_here):
    space = tiny_space(TINY.replace("folds: 3", "folds: 2"),
                       training="epochs: 1, batch_size: 64, learning_rate: 0.01, group_size: 2")
    p = run_cli(["search", space], cwd=tmp_path, np=3, timeout=300, env={"MPIOPT_PROGRESS_S": "0"})
    assert p.returncode == 0, p.stderr
    for rank in range(2):  # each rank of the group of 2 trained a fold of its own, at once
        assert f"[group 0 rank {rank}] INFO: trial 0, epoch 1 of 1:" in p.stderr, p.stderr
    run = tmp_path / "runs" / "tiny"
    df = mpiopt.load_results(run)
    assert len(df) == 2 and set(df.status) == {"completed"} and set(df.ranks) == {2}
    assert list(df.columns[:4]) == ["trial", "status", "objective", "objective_std"]
    for _, row in df.iterrows():
        values = [json.loads((fold_dir(run / "trials" / str(row.trial), k) / "fold.json").read_text())
                  ["result"]["objective"] for k in range(2)]
        assert row.objective == pytest.approx(np.mean(values)) and row.objective_std == pytest.approx(np.std(values))
        assert row.val_accuracy == pytest.approx(row.objective)
    history = mpiopt.load_history(run)  # the folds' mean curve
    assert list(history.trial) == [0, 1] and list(history.epoch) == [1, 1]
    assert history.val_accuracy.tolist() == pytest.approx(df.objective.tolist())
    assert "folds: 2" in (run / "config.yaml").read_text()
    with pytest.raises(ConfigError, match="is a k-fold trial: it kept one model per fold"):
        mpiopt.load_model(run)
    # `mpiopt train` trains the best trial's values once, on all the training data
    p = cli_here("train", space, "--trial", "best")
    assert p.returncode == 0, p.stderr
    retrained = run / f"train-trial-{int(df.sort_values('objective').trial.iloc[-1])}"
    assert (retrained / "history.csv").exists() and not (retrained / "fold_1").exists()
    assert mpiopt.load_model(retrained) is not None
    # and load_model of the search's best now points there
    with pytest.raises(ConfigError, match=f"mpiopt.load_model\\('{retrained}'\\) loads the one `mpiopt train` "):
        mpiopt.load_model(run)


def test_status_reads_how_far_each_fold_of_a_running_trial_got(tmp_path):
    # a k-fold trial reports its epochs once every fold is done: until then its folders tell
    from mpiopt.crossval import FOLD_FILE, fold_dir, fold_progress

    trial = tmp_path / "trials" / "3"
    fold_dir(trial, 0).mkdir(parents=True)
    (fold_dir(trial, 0) / FOLD_FILE).write_text("{}")
    fold_dir(trial, 1).mkdir()
    (fold_dir(trial, 1) / "history.csv").write_text("epoch,loss\n1,0.5\n2,0.4\n")
    assert fold_progress(trial, 3) == "folds: 1 done, 2 at epoch 2, 3 not started"

"""Distributed training under real `mpiexec`: every mode learns MNIST-1D and survives a failing trial in a
search; a trial resumed from its checkpoint; asha pausing a master-worker group."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import mpiopt
from mpiopt.journal import drop_checkpoint
from conftest import MPIEXEC, SPACES, mnist1d_objective, run_cli

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

SPACE = f"""
name: mn
{mnist1d_objective()}parameters:
  learning_rate: {{type: real, low: 1.0e-4, high: 0.1, prior: log-uniform}}
  units: {{type: integer, low: 16, high: 128}}
search: {{initial_points: 2, trials: 2, seed: 0}}
training: {{group_size: 3, epochs: 6, batch_size: 32, optimizer: adam}}
"""

# every mode with the optimizer and learning rate that train one process well
RATE = 0.01
MODES = ["downpour", "easgd", "gem", "allreduce"]
# one trial a mode: a space of the modes alone, all of it the initial design, which never repeats a point
EACH_MODE = f"""
name: mn
{mnist1d_objective()}parameters:
  mode: {{choices: {MODES}}}
  units: {{choices: [64]}}
search: {{initial_points: 4, trials: 4, seed: 0}}
training: {{group_size: 3, epochs: 3, batch_size: 32, optimizer: adam, learning_rate: {RATE}, trace: true}}
"""


def test_every_mode_learns_mnist1d_in_a_search_with_a_group_of_three_on_two_nodes(tmp_path):
    # the group spans two nodes (ranks 1 | 2, 3): its messages take the network path
    (tmp_path / "s.yaml").write_text(EACH_MODE)
    p = run_cli(["search", "s.yaml"], cwd=tmp_path, np=4, timeout=300, hosts="nodeA:2,nodeB:2")
    assert p.returncode == 0, p.stderr
    assert "4 ranks on 2 nodes: 1 coordinator (rank 0) + 1 group of 3 ranks" in p.stderr
    run = tmp_path / "runs" / "mn"
    df = mpiopt.load_results(run)
    assert sorted(df.params_mode) == sorted(MODES) and set(df.status) == {"completed"}, df.error.tolist()
    assert set(df.ranks) == {3} and (df.epochs == 3).all() and (df.objective == df.val_accuracy).all()
    for trial, mode in zip(df.trial, df.params_mode, strict=True):
        rows = list(csv.DictReader(open(run / "trials" / str(trial) / "history.csv")))
        assert [int(r["epoch"]) for r in rows] == list(range(1, 4))
        best = max(float(r["val_accuracy"]) for r in rows)
        assert best > 0.3, (mode, best)  # 10 classes: chance is 0.1
        assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(rows[0])

        trace = json.load(open(run / "trials" / str(trial) / "trace.json"))["traceEvents"]
        spans = {(e["tid"], e["name"]) for e in trace if e["ph"] == "X"}
        assert (1, "compute") in spans and (2, "compute") in spans, mode
        assert (0, "validate") in spans, mode
        if mode != "allreduce":
            assert (0, "apply") in spans and (1, "wait") in spans, mode


def test_resumed_search_continues_a_trial_from_its_checkpoint(tmp_path):
    # a master and a worker: the checkpoint is the master's, whatever the group's size
    (tmp_path / "s.yaml").write_text(SPACE.replace("trials: 2", "trials: 1").replace("group_size: 3", "group_size: 2"))
    history = tmp_path / "runs" / "mn" / "trials" / "0" / "history.csv"
    job = subprocess.Popen([str(MPIEXEC), "-n", "3", sys.executable, "-m", "mpiopt", "search", "s.yaml"],
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True, env={**os.environ})
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if history.exists() and history.read_text().count("\n") >= 3:  # header + 2 epochs
            break
        time.sleep(0.1)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=30)
    done_before = history.read_text().count("\n") - 1
    assert 2 <= done_before < 6
    p = run_cli(["search", "s.yaml", "--resume"], cwd=tmp_path, np=3, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "resuming training from its checkpoint at epoch" in p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "mn")
    assert len(df) == 1 and df.status[0] == "completed" and df.epochs[0] == 6
    first, last = mpiopt.load_timeline(tmp_path / "runs" / "mn").iloc[[0, -1]].itertuples()
    assert df.start[0] == first.start  # the table's start: its first hand-out, before the kill
    assert df.duration_s[0] > (last.end - last.start).total_seconds()  # the training before the kill counts
    rows = list(csv.DictReader(open(history)))
    assert [int(r["epoch"]) for r in rows] == list(range(1, 7))  # nothing trained twice, nothing lost


# every mode, with an odd `units` (training fails on one rank) and an even one (on every training
# rank at once): the space's eight points, all of them the initial design, which never repeats one
BOMB = f"""
name: bomb
objective:
  model: {SPACES}/tiny_model.py:build_bomb
  data: {SPACES}/tiny_model.py:load_data
  loss: sparse_categorical_crossentropy
parameters:
  mode: {{choices: {MODES}}}
  units: {{choices: [7, 8]}}
search: {{initial_points: 8, trials: 8, seed: 0, grace_period: 5}}
training: {{group_size: 2, epochs: 3, batch_size: 16, time_limit: 60}}
"""


def test_a_trial_failing_mid_training_leaves_its_group_ready_in_every_mode(tmp_path):
    # training fails a few batches in (build_bomb): the group must learn it, drop the trial and
    # take the next one at once, eight times over (a group left waiting would time out)
    (tmp_path / "s.yaml").write_text(BOMB)
    p = run_cli(["search", "s.yaml"], cwd=tmp_path, np=3, timeout=300)
    df = mpiopt.load_results(tmp_path / "runs" / "bomb")
    tried = sorted(zip(df.params_mode, df.params_units, strict=True))
    assert tried == sorted((m, u) for m in MODES for u in (7, 8)), tried
    assert list(df.status) == ["failed"] * 8, (df.status.tolist(), df.error.tolist(), p.stderr[-3000:])
    assert all("InvalidArgumentError: assertion failed: [bomb went off]" in e for e in df.error), df.error.tolist()
    assert p.returncode == 1 and "no trial completed (8 did not)" in p.stderr, p.stderr


# the tiny model of tests/spaces, whose epochs take milliseconds: the test is about the rungs, not learning
ASHA = f"""
name: mn
objective: {{model: {SPACES}/tiny_model.py:build_model, data: {SPACES}/tiny_model.py:load_data,
            loss: sparse_categorical_crossentropy, metrics: [accuracy], maximize: val_accuracy}}
parameters:
  learning_rate: {{type: real, low: 1.0e-4, high: 0.1, prior: log-uniform}}
  units: {{type: integer, low: 2, high: 16}}
search: {{scheduler: asha, min_epochs: 1, reduction_factor: 2, initial_points: 2, trials: 6, seed: 0}}
training: {{group_size: 2, mode: downpour, epochs: 4, batch_size: 64, optimizer: adam}}
"""


def test_asha_pauses_a_master_worker_group_at_its_rungs(tmp_path):
    # a group of a master and a worker: the worker waits at each rung for the scheduler's word, so a
    # paused trial's checkpoint is its rung and a promoted one goes on from there, never re-trained
    (tmp_path / "s.yaml").write_text(ASHA)
    p = run_cli(["search", "s.yaml"], cwd=tmp_path, np=3, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    run = tmp_path / "runs" / "mn"
    df = mpiopt.load_results(run).set_index("trial")
    assert set(df.status) == {"completed", "pruned"}, df.status.tolist()
    assert set(df.epochs[df.status == "pruned"]) <= {1, 2} and set(df.epochs[df.status == "completed"]) == {4}
    promoted = [e["trial"] for e in map(json.loads, open(run / "trials.jsonl")) if e.get("promoted")]
    assert promoted, "no paused trial was promoted"
    assert "resuming training from its checkpoint at epoch" in p.stderr
    # nothing will continue a trial now: no checkpoint is left behind, every best weights file is
    assert not list(run.glob("trials/*/checkpoint.*"))
    assert len(list(run.glob("trials/*/best.weights.h5"))) == len(df)
    history = mpiopt.load_history(run)
    for trial, rows in history.groupby("trial"):
        assert rows.epoch.tolist() == list(range(1, int(df.epochs[trial]) + 1)), (trial, rows.epoch.tolist())
        on_disk = [int(r["epoch"]) for r in csv.DictReader(open(run / "trials" / str(trial) / "history.csv"))]
        assert on_disk == rows.epoch.tolist(), (trial, on_disk)


PAUSED_AND_GONE_ON = """
import json, runpy, sys
from pathlib import Path
from mpiopt.learn import DataSource, Job, train
from mpiopt.transport import GroupComm, world

mod = runpy.run_path({tiny!r})
comm = world()
group = GroupComm(comm)


def job(mode, out, on_epoch=None):
    training = {{"mode": mode, "epochs": 4, "batch_size": 50, "optimizer": "adam", "learning_rate": 0.01,
                "checkpoint_every": 1}}
    return Job(build=mod["build_batchnorm"], model_kwargs={{"units": 8}}, source=DataSource(*mod["load_data"]()),
               training=training, loss="sparse_categorical_crossentropy", metrics=("accuracy",), seed=3,
               out_dir=Path(sys.argv[1], mode, out), on_epoch=on_epoch, decide_at=frozenset({{1, 2, 3}}))


histories = {{}}
for mode in {modes!r}:  # one job for every mode: each start of TensorFlow takes seconds
    whole = train(group, job(mode, "whole"))
    train(group, job(mode, "cut", lambda epoch, row: "paused" if epoch == 2 else None))
    went_on = train(group, job(mode, "cut"))
    if comm.Get_rank() == 0:  # the master's results: a worker's train() returns None
        histories[mode] = {{"whole": whole.history, "went_on": went_on.history}}
group.close()
if comm.Get_rank() == 0:
    json.dump(histories, open(Path(sys.argv[1], "h.json"), "w"))
"""


def test_a_master_and_worker_trial_paused_then_continued_validates_as_if_never_paused(tmp_path):
    # the workers continue from the checkpoint's batch-norm statistics and dropout seed (an
    # integer, which float32 rounds), not from their fresh ones: the master validates the workers'
    # state; and under easgd and gem from their own optimizers and weights, kept beside the
    # master's checkpoint. So the epochs after the pause match a run that never paused. (Every
    # epoch a decision epoch: the worker waits for each validation, which otherwise may take in
    # an update of the next epoch on a loaded machine.)
    modes = ["downpour", "easgd", "gem"]
    script = tmp_path / "paused.py"
    script.write_text(PAUSED_AND_GONE_ON.format(tiny=str(SPACES / "tiny_model.py"), modes=modes))
    p = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script), str(tmp_path)],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    histories = json.loads((tmp_path / "h.json").read_text())
    for mode in modes:
        h = histories[mode]
        assert [r["epoch"] for r in h["went_on"]] == [1, 2, 3, 4], mode
        for whole, went_on in zip(h["whole"], h["went_on"], strict=True):
            assert went_on["val_loss"] == pytest.approx(whole["val_loss"], rel=1e-5), (mode, whole, went_on)
        cut = tmp_path / mode / "cut"
        parts = sorted(p.name for p in cut.glob("checkpoint.*"))
        assert parts == ["checkpoint.npz"] + (["checkpoint.worker0.npz"] if mode != "downpour" else []), (mode, parts)
        drop_checkpoint(cut)  # once the search holds the trial's result: the workers' parts go too
        assert not list(cut.glob("checkpoint.*")), mode


SUMMED_METRICS = """
import json, runpy, sys
from pathlib import Path
import numpy as np
from mpiopt.learn import DataSource, Job, train
from mpiopt.transport import GroupComm, world

(x, y), (xv, yv) = runpy.run_path({tiny!r})["load_data"]()
y, yv = (a.astype(np.float32)[:, None] for a in (y, yv))


def build(units=4):
    import keras

    return keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(units, activation="relu"),
                             keras.layers.Dense(1, activation="sigmoid")])


comm = world()
group = GroupComm(comm)
# learning rate 0: the weights the epoch trains with are those it ends with, so its training row
# must be the evaluation of the training data with the final weights
done = {{}}
for mode in {modes!r}:  # one job for both modes: each start of TensorFlow takes seconds
    training = {{"mode": mode, "epochs": 1, "batch_size": 50, "optimizer": "sgd", "learning_rate": 0.0}}
    done[mode] = train(group, Job(build=build, model_kwargs={{}}, source=DataSource((x, y), (xv, yv)),
                                  training=training, loss="binary_crossentropy", metrics=("auc", "precision"), seed=3,
                                  out_dir=Path(sys.argv[1], mode)))
# two validation samples for three ranks: the rank with none adds nothing to the group's sums
training = {{"mode": "allreduce", "epochs": 1, "batch_size": 50, "optimizer": "sgd", "learning_rate": 0.0}}
done["few_val"] = train(group, Job(build=build, model_kwargs={{}}, source=DataSource((x, y), (xv[:2], yv[:2])),
                                   training=training, loss="binary_crossentropy", metrics=("auc", "precision"),
                                   seed=3, out_dir=Path(sys.argv[1], "few_val")))
try:  # two training samples for two workers and more: refused on every rank alike
    train(group, Job(build=build, model_kwargs={{}}, source=DataSource((x[:2], y[:2]), (xv, yv)),
                     training=training, loss="binary_crossentropy", metrics=("auc",), seed=3, out_dir=None))
    refused = None
except Exception as exc:
    refused = f"{{type(exc).__name__}}: {{exc}}"
group.close()
refusals = comm.gather(refused)
if comm.Get_rank() == 0:
    import keras

    found = {{"refused": refusals}}
    for mode, trained in done.items():
        model = build()
        model.load_weights(str(Path(sys.argv[1], mode, "best.weights.h5")))
        model.compile(loss="binary_crossentropy", metrics=["auc", "precision"])
        val = (xv[:2], yv[:2]) if mode == "few_val" else (xv, yv)
        alone = {{part: model.evaluate(a, b, batch_size=50, verbose=0, return_dict=True)
                 for part, (a, b) in {{"train": (x, y), "val": val}}.items()}}
        found[mode] = {{"group": trained.history[0], "alone": alone}}
    json.dump(found, open(Path(sys.argv[1], "h.json"), "w"))
"""


def test_a_group_reports_metrics_that_are_no_mean_of_parts_as_one_process_would(tmp_path):
    # three ranks (allreduce) or two workers (downpour) each take a part of the data: their AUC
    # and precision counts are summed before the result is taken, as one process taking every
    # batch would, in the validation row and in the training row; also where a rank has no
    # validation sample
    modes = ["allreduce", "downpour"]
    script = tmp_path / "summed.py"
    script.write_text(SUMMED_METRICS.format(tiny=str(SPACES / "tiny_model.py"), modes=modes))
    p = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, str(script), str(tmp_path)],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    found = json.loads((tmp_path / "h.json").read_text())
    assert found["refused"] == ["DataError: 2 training samples for 3 ranks that train: each needs one at least (a "
                                "smaller training.group_size, or more data)"] * 3
    for mode in [*modes, "few_val"]:
        h = found[mode]
        for name in ("auc", "precision", "loss"):
            assert h["group"][f"val_{name}"] == pytest.approx(h["alone"]["val"][name], rel=1e-5), (mode, name, h)
            assert h["group"][name] == pytest.approx(h["alone"]["train"][name], rel=1e-5), (mode, name, h)

"""GEM trains with the user's optimizer: the worker's update maths, the refusals, and real groups."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import MPIEXEC, SPACES, mnist1d_objective, run_cli
from mpiopt._errors import ConfigError, TrialFailed
from mpiopt.config import load_config
from mpiopt.learn._engine import GemWorker, gem_optimizer_problem
from mpiopt.learn.optimizers import make_master_optimizer

ACCEPTED = ["adam", "adamw", "adamax", "nadam", {"name": "sgd", "momentum": 0.9},
            {"name": "sgd", "momentum": 0.9, "nesterov": True}, {"name": "rmsprop", "momentum": 0.9}]
REFUSED = ["sgd", "rmsprop", "adagrad", "adadelta", {"name": "adam", "beta_1": 0.0}]


def _label(spec) -> str:
    return spec if isinstance(spec, str) else "-".join(f"{v}" for v in spec.values())


@pytest.mark.parametrize("spec", ACCEPTED, ids=_label)
def test_a_lone_gem_worker_steps_as_its_optimizer(spec):
    # one worker, the master adding its updates: the centre follows the optimizer step for step
    rng = np.random.default_rng(0)
    n, lr = 1000, 0.01
    centre = rng.normal(size=n).astype(np.float32)
    alone, start = centre.copy(), centre.copy()
    reference = make_master_optimizer({**({"name": spec} if isinstance(spec, str) else spec), "learning_rate": lr}, n)
    gem = GemWorker(spec, 1.0, centre)
    weights, out = centre.copy(), np.empty(n, dtype=np.float32)
    for _ in range(20):
        grad = rng.normal(scale=0.1, size=n).astype(np.float32)
        gem.update(weights, grad, centre, lr, out)
        centre += out  # what the master does with a GEM update
        weights[:] = centre
        reference.step(alone, grad)
    np.testing.assert_allclose(centre, alone, rtol=0, atol=1e-5)
    assert np.abs(alone - start).max() > 1e-2  # it did move


def test_the_update_is_the_rest_of_the_proxys_motion_after_the_others():
    rng = np.random.default_rng(1)
    n, lr, kappa = 500, 0.01, 1.5
    centre = rng.normal(size=n).astype(np.float32)
    g1, g2 = rng.normal(size=(2, n)).astype(np.float32)
    reference = make_master_optimizer({"name": "adam", "learning_rate": lr}, n)
    steps = []
    for g in (g1, g2):  # Adam's steps do not depend on the weights
        w = np.zeros(n, dtype=np.float32)
        reference.step(w, g)
        steps.append(w)
    d1, d2 = steps
    others = rng.normal(scale=lr, size=n).astype(np.float32)  # what the other workers moved the centre by
    gem = GemWorker("adam", kappa, centre)
    out = np.empty(n, dtype=np.float32)
    gem.update(centre.copy(), g1, centre + others, lr, out)
    expected = d1 * np.clip((kappa * np.abs(d1) - np.abs(others)) / np.abs(d1), 0, 5)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=3e-7)  # d = (w + step) - w: float32 rounding of w
    assert (out[np.abs(others) >= kappa * np.abs(d1)] == 0).all() and (out != 0).any()
    assert (np.sign(out[out != 0]) == np.sign(d1[out != 0])).all()  # never against the optimizer's step
    # the next pull finds only this worker's own update applied: that is no one else's motion, so
    # the whole proxy step goes out (the paper's rule would subtract the worker's own update)
    mine = centre + others + out
    gem.update(mine.copy(), g2, mine, lr, out)
    np.testing.assert_allclose(out, kappa * d2, rtol=1e-3, atol=3e-7)


@pytest.mark.parametrize("spec", REFUSED, ids=_label)
def test_gem_refuses_an_optimizer_without_momentum(spec):
    problem = gem_optimizer_problem(spec)
    assert problem and "\n" not in problem and "mode gem needs an optimizer with momentum" in problem
    with pytest.raises(TrialFailed, match="mode gem needs an optimizer with momentum"):
        GemWorker(spec, 1.0, np.zeros(4, dtype=np.float32))


@pytest.mark.parametrize("spec", ACCEPTED, ids=_label)
def test_gem_accepts_an_optimizer_with_momentum(spec):
    assert gem_optimizer_problem(spec) is None


SPACE = """
objective: {model: model.py:build_model, data: model.py:load_data}   # not imported: resolve=False
parameters:
  x: {type: real, low: -5.0, high: 10.0}
"""


@pytest.mark.parametrize("extra,field", [
    ("training: {mode: gem, optimizer: sgd}", "training.optimizer: mode gem needs an optimizer with momentum"),
    ("training: {mode: gem, optimizer: adagrad}", "training.optimizer: mode gem needs"),
    ("training: {mode: gem, optimizer: {name: adam, beta_1: 0}}", "got adam with beta_1 0"),
    ("training: {mode: gem, optimizer: sgd, momentum: 0.0}", "training.momentum: mode gem needs"),
    ("training: {mode: gem, optimizer: sgd}\n  momentum: {type: real, low: 0.0, high: 0.9}",
     "parameters.momentum: 0 (its lowest) leaves a trial without momentum: mode gem needs"),
    ("training: {mode: gem}\n  optimizer: {type: categorical, choices: [adam, sgd]}",
     "parameters.optimizer: mode gem needs"),
    ("training: {optimizer: sgd, group_size: 2}\n  mode: {type: categorical, choices: [downpour, gem]}",
     "training.optimizer: mode gem needs"),
])
def test_the_configuration_refuses_gem_without_momentum_in_one_line(write_yaml, extra, field):
    head, _, searched = extra.partition("\n")
    text = SPACE + (searched + "\n" if searched else "") + head + "\n"
    with pytest.raises(ConfigError) as info:
        load_config(write_yaml(text), resolve=False)
    assert field in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("training", ["{mode: gem}", "{mode: gem, optimizer: {name: sgd, momentum: 0.9}}",
                                      "{mode: downpour, optimizer: sgd, momentum: 0.5}", "{mode: gem, kappa: 2}",
                                      "{mode: gem, optimizer: rmsprop, momentum: 0.9}"])
def test_the_configuration_accepts_gem_with_momentum(write_yaml, training):
    load_config(write_yaml(SPACE + f"training: {training}\n"), resolve=False)


ONE_WORKER = """
import json, runpy, sys
from mpiopt.learn import DataSource, Job, train
from mpiopt.transport import GroupComm, world

mod = runpy.run_path({tiny!r})
comm = world()
group = GroupComm(comm)
training = {{"mode": "gem", "epochs": 3, "batch_size": 50, "optimizer": "adam", "learning_rate": 0.01,
            "kappa": 1.0, "checkpoint_every": 0}}


def job():
    return Job(build=mod["build_model"], model_kwargs={{"units": 8}}, source=DataSource(*mod["load_data"]()),
               training=training, loss="sparse_categorical_crossentropy", metrics=("accuracy",), seed=3)


out = train(group, job())
group.close()
if comm.Get_rank() == 0:
    alone = train(None, job())
    json.dump({{"gem": out.history, "alone": alone.history}}, open(sys.argv[1], "w"))
"""


@pytest.mark.mpi
@pytest.mark.slow
def test_gem_with_one_worker_trains_as_one_process_with_adam(tmp_path):
    script = tmp_path / "one_worker.py"
    script.write_text(ONE_WORKER.format(tiny=str(SPACES / "tiny_model.py")))
    p = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script), str(tmp_path / "h.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    h = json.loads((tmp_path / "h.json").read_text())
    assert [r["epoch"] for r in h["gem"]] == [1, 2, 3]
    for gem, alone in zip(h["gem"], h["alone"], strict=True):
        assert gem["val_loss"] == pytest.approx(alone["val_loss"], rel=1e-3)


CNN_SPACE = f"""
name: cnn
{mnist1d_objective('build_cnn')}parameters:
  filters: {{type: integer, low: 16, high: 64}}
search: {{initial_points: 1, trials: 1, seed: 0}}
training: {{mode: gem, epochs: 5, batch_size: 64, optimizer: adam, learning_rate: 0.01}}
"""


@pytest.mark.mpi
@pytest.mark.slow
def test_gem_in_a_group_of_three_learns_mnist1d_with_adam(tmp_path):
    # the bar sits below what one process reaches with Adam and above what a GEM that falls behind its
    # optimizer's pace reaches
    (tmp_path / "s.yaml").write_text(textwrap.dedent(CNN_SPACE))
    p = run_cli(["train", "s.yaml", "--set", "filters=32", "--out", "out"], cwd=tmp_path, np=3, timeout=240)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(open(tmp_path / "out" / "history.csv")))
    best = max(float(r["val_accuracy"]) for r in rows)
    assert len(rows) == 5 and best > 0.8, best

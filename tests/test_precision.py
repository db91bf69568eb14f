"""`training.mixed_precision` and `training.jit_compile`, on the CPU: the dynamic loss scale, the
float16 model's float32 gradients, training MNIST-1D with either or both in process, a master and a
worker training with both under `mpiexec -n 2`, and the preflight's refusal of a model that computes
nothing in float16."""
from __future__ import annotations

import csv
import runpy
import textwrap

import numpy as np
import pytest

from conftest import ROOT, SPACES, run_cli
from mpiopt.learn._flat import LossScale


# -- the dynamic loss scale (no TensorFlow) ----------------------------------------------------------
def test_loss_scale_starts_where_keras_does_and_halves_on_overflow():
    ls = LossScale()
    assert ls.scale == 2.0 ** 15 and ls.growth_steps == 2000
    assert ls.update(False) is False  # skipped
    assert ls.scale == 2.0 ** 14 and ls.skipped == 1
    assert ls.update(False) is False and ls.scale == 2.0 ** 13
    assert ls.update(True) is True and ls.scale == 2.0 ** 13


def test_loss_scale_doubles_after_growth_steps_finite_steps_in_a_row():
    ls = LossScale(initial=8.0, growth_steps=3)
    assert [ls.update(True) for _ in range(2)] == [True, True] and ls.scale == 8.0
    ls.update(True)
    assert ls.scale == 16.0 and ls.finite_steps == 0
    ls.update(True), ls.update(True)
    ls.update(False)  # an overflow starts the count again
    assert ls.scale == 8.0
    ls.update(True), ls.update(True)
    assert ls.scale == 8.0
    ls.update(True)
    assert ls.scale == 16.0
    default = LossScale()
    for _ in range(1999):
        default.update(True)
    assert default.scale == 2.0 ** 15
    default.update(True)
    assert default.scale == 2.0 ** 16


def test_loss_scale_rejects_nonsense():
    with pytest.raises(ValueError, match="initial > 0"):
        LossScale(initial=0.0)
    with pytest.raises(ValueError, match="growth_steps >= 1"):
        LossScale(growth_steps=0)


# -- the model's side ------------------------------------------------------------------------------------
def _mlp(units=16, float32_layers=False):
    import keras

    kw = {"dtype": "float32"} if float32_layers else {}
    return keras.Sequential([keras.Input(shape=(40,)), keras.layers.Dense(units, activation="relu", **kw),
                             keras.layers.Dense(10, activation="softmax", **kw)])


def _job(training, build=_mlp, **kw):
    from mpiopt.learn._engine import Job

    return Job(build=build, model_kwargs=kw, source=None, training=training,
               loss="sparse_categorical_crossentropy", metrics=("accuracy",), seed=4)


def _batch(n=64):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 40)).astype(np.float32), rng.integers(0, 10, size=n)


@pytest.mark.slow
def test_a_float16_model_gives_the_float32_gradient_and_takes_an_overflowed_batch_again():
    import keras

    from mpiopt.learn._engine import _build

    x, y = _batch()
    _, flat32, _ = _build(_job({"mixed_precision": False}))
    assert flat32.loss_scale is None
    loss32, grad32 = flat32.grad_step(x, y)
    model, flat16, _ = _build(_job({"mixed_precision": True}))  # the same seed: the same float32 weights
    assert {layer.compute_dtype for layer in model.layers} == {"float16"}
    assert {w.dtype for w in model.weights} == {"float32"}  # the master's flat buffers stay float32
    assert np.array_equal(flat16.get(), flat32.get())
    loss16, grad16 = flat16.grad_step(x, y)
    assert flat16.loss_scale.skipped <= 3  # from 2**15 down to a scale within float16's range
    assert flat16.loss_scale.scale == 2.0 ** (15 - flat16.loss_scale.skipped)
    assert isinstance(loss16, float) and grad16.dtype == np.float32 and grad16.shape == grad32.shape
    assert loss16 == pytest.approx(loss32, rel=1e-2)
    assert np.linalg.norm(grad16 - grad32) < 2e-2 * np.linalg.norm(grad32)  # unscaled
    # past float16's range the scaled backward pass overflows: the batch is taken again at half
    # the scale until it fits (a zero gradient would make a stateful optimizer step on momentum)
    flat16.model.reset_metrics()
    flat16.loss_scale.scale = 2.0 ** 40
    loss, grad = flat16.grad_step(x, y)
    assert flat16.loss_scale.skipped >= 25 and flat16.loss_scale.scale <= 2.0 ** 15
    assert loss == pytest.approx(loss16) and np.allclose(grad, grad16, rtol=1e-2, atol=1e-4)
    assert flat16.metrics()["loss"] == pytest.approx(loss16)  # the batch counted once
    # a gradient that no scale brings back (here: every scale too large) is given up on: zeros
    flat16.SMALLEST_SCALE = 2.0 ** 30
    flat16._grad_step = None  # traced again with the new bound
    flat16.loss_scale.scale = 2.0 ** 40
    loss, grad = flat16.grad_step(x, y)
    assert np.isfinite(loss) and not grad.any() and flat16.loss_scale.scale < 2.0 ** 30
    # the next trial without mixed precision is float32 again (the policy is process-wide)
    model, flat, _ = _build(_job({"mixed_precision": False}))
    assert {layer.compute_dtype for layer in model.layers} == {"float32"} and flat.loss_scale is None
    assert keras.config.dtype_policy().name == "float32"


@pytest.mark.slow
def test_a_model_compiled_by_build_model_keeps_its_optimizer_under_mixed_precision():
    # Keras wraps the optimizer of a model compiled under mixed_float16 in a LossScaleOptimizer
    def build(units=16):
        model = _mlp(units)
        model.compile(optimizer="nadam", loss="sparse_categorical_crossentropy")
        return model

    from mpiopt.learn._engine import _build

    _, flat, spec = _build(_job({"mixed_precision": True, "jit_compile": True}, build=build))
    assert spec["name"] == "nadam" and flat.loss_scale is not None
    loss, grad = flat.grad_step(*_batch())
    assert np.isfinite(loss) and np.isfinite(grad).all()


# -- training MNIST-1D -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mnist1d():
    from mpiopt.learn import DataSource

    ex = runpy.run_path(str(ROOT / "examples" / "mnist1d.py"))
    return ex["build_model"], DataSource(*ex["load_data"]())


@pytest.mark.slow
@pytest.mark.parametrize("mixed,jit", [(True, False), (False, True), (True, True)])
def test_mnist1d_learns_with_mixed_precision_and_xla(mnist1d, mixed, jit):
    # the bar is what float32 without XLA clears in these 5 epochs: float16 and XLA must not lose that
    from mpiopt.config import TRAINING_DEFAULTS
    from mpiopt.learn import Job, train

    build, src = mnist1d
    training = {**TRAINING_DEFAULTS, "mode": "allreduce", "epochs": 5, "batch_size": 64, "learning_rate": 0.01,
                "checkpoint_every": 0, "mixed_precision": mixed, "jit_compile": jit}
    out = train(None, Job(build=build, model_kwargs={"units": 64}, source=src, training=training,
                          loss="sparse_categorical_crossentropy", metrics=("accuracy",), seed=1))
    assert [r["epoch"] for r in out.history] == [1, 2, 3, 4, 5] and out.stopped is None
    best = max(r["val_accuracy"] for r in out.history)
    assert best > 0.45, (mixed, jit, [r["val_accuracy"] for r in out.history])
    assert all(isinstance(v, float) and np.isfinite(v) for r in out.history for k, v in r.items() if k != "epoch")


SPACE = f"""
name: mp
objective: {{model: {SPACES}/tiny_model.py:build_model, data: {SPACES}/tiny_model.py:load_data,
            loss: sparse_categorical_crossentropy, metrics: [accuracy], maximize: val_accuracy}}
parameters:
  units: {{type: integer, low: 4, high: 16}}
search: {{trials: 1}}
training: {{group_size: 2, epochs: 3, batch_size: 32, optimizer: adam, learning_rate: 0.05}}
"""


@pytest.mark.slow
@pytest.mark.mpi
def test_a_master_and_a_worker_train_with_mixed_precision_and_xla(tmp_path):
    (tmp_path / "s.yaml").write_text(SPACE)
    p = run_cli(["train", "s.yaml", "--set", "mixed_precision=true", "--set", "jit_compile=true",
                 "--set", "mode=downpour", "--set", "units=16", "--out", "out"], cwd=tmp_path, np=2, timeout=240)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(open(tmp_path / "out" / "history.csv")))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    assert max(float(r["val_accuracy"]) for r in rows) > 0.8, rows  # 2 classes: chance is 0.5


# -- the preflight ---------------------------------------------------------------------------------------
OBJECTIVES = '''
import numpy as np


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 40)).astype(np.float32)
    y = rng.integers(0, 10, size=120)
    return (x[:80], y[:80]), (x[80:], y[80:])


def build_model(units=8, float32_layers=False):
    import keras

    kw = {"dtype": "float32"} if float32_layers else {}
    return keras.Sequential([keras.Input(shape=(40,)), keras.layers.Dense(units, activation="relu", **kw),
                             keras.layers.Dense(10, activation="softmax", **kw)])
'''


@pytest.mark.slow
@pytest.mark.parametrize("how", ["set", "searched"])
def test_preflight_refuses_mixed_precision_for_a_model_that_computes_nothing_in_float16(tmp_path, how):
    import keras

    from mpiopt._errors import ConfigError
    from mpiopt.config import load_config
    from mpiopt.objective import preflight

    (tmp_path / "objs.py").write_text(OBJECTIVES)

    def space(flag: str, mixed: str) -> str:
        p = tmp_path / "space.yaml"
        params = f"units: {{type: integer, low: 4, high: 8}}, float32_layers: {{type: categorical, choices: [{flag}]}}"
        training = "batch_size: 16"
        if how == "searched":
            choices = "false, true" if mixed == "true" else "false"
            params += f", mixed_precision: {{type: categorical, choices: [{choices}]}}"
        else:
            training += f", mixed_precision: {mixed}"
        p.write_text(textwrap.dedent(f"""\
            objective: {{model: objs.py:build_model, data: objs.py:data, loss: sparse_categorical_crossentropy}}
            parameters: {{{params}}}
            training: {{{training}}}
        """))
        return str(p)

    path = space("true", "true")
    with pytest.raises(ConfigError) as info:
        preflight(load_config(path))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}: training.mixed_precision: "), msg
    assert "objs.py:build_model computes nothing in float16" in msg and "float32" in msg, msg
    assert keras.config.dtype_policy().name == "float32"  # the preflight leaves no policy behind
    preflight(load_config(space("false", "true")))  # the layers take the policy: fine
    assert keras.config.dtype_policy().name == "float32"
    preflight(load_config(space("true", "false")))  # float32 layers without mixed precision: fine

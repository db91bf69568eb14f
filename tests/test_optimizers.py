"""The master's flat-buffer optimizers against Keras 3's own, step by step, and their no-allocation promise."""
from __future__ import annotations

import json
import os
import tracemalloc
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mpiopt.learn.optimizers import OPTIMIZERS, make_master_optimizer  # noqa: E402

pytestmark = pytest.mark.slow

KERAS_CLASSES = {
    "sgd": "SGD", "rmsprop": "RMSprop", "adadelta": "Adadelta", "adam": "Adam", "adamw": "AdamW",
    "adagrad": "Adagrad", "adamax": "Adamax", "nadam": "Nadam",
}
# A few variables of different shapes, concatenated into one 216-element flat buffer.
SHAPES = [(7, 5), (5,), (13, 11), (3, 4, 2), (1,), (8,)]
SIZE = sum(int(np.prod(s)) for s in SHAPES)
CHUNK = 64  # smaller than SIZE and not a divisor of it: the Keras comparisons run the chunked path with a tail

CASES = [
    ("sgd", {}),
    ("sgd", {"momentum": 0.9}),
    ("sgd", {"momentum": 0.9, "nesterov": True, "learning_rate": 0.05}),
    ("sgd", {"learning_rate": 0.1, "weight_decay": 0.05}),
    ("rmsprop", {}),
    ("rmsprop", {"momentum": 0.9}),
    ("rmsprop", {"centered": True}),
    ("rmsprop", {"centered": True, "momentum": 0.5, "rho": 0.8, "epsilon": 1e-2, "learning_rate": 0.01}),
    ("adadelta", {}),  # moves weights by ~1e-5: see W_SCALE
    ("adadelta", {"learning_rate": 1.0, "rho": 0.9, "epsilon": 1e-4}),
    ("adam", {}),
    ("adam", {"amsgrad": True, "beta_2": 0.9, "learning_rate": 0.01}),
    ("adam", {"beta_1": 0.5, "beta_2": 0.9, "epsilon": 1e-2, "learning_rate": 0.01}),
    ("adam", {"weight_decay": 0.1, "learning_rate": 0.01}),
    ("adamw", {}),
    ("adamw", {"weight_decay": 0.05, "amsgrad": True, "beta_2": 0.9, "learning_rate": 0.01}),
    ("adagrad", {}),
    ("adagrad", {"initial_accumulator_value": 0.5, "epsilon": 1e-2, "learning_rate": 0.1}),
    ("adamax", {}),
    ("adamax", {"beta_1": 0.8, "beta_2": 0.9, "epsilon": 1e-2, "learning_rate": 0.01}),
    ("nadam", {}),
    ("nadam", {"beta_1": 0.8, "beta_2": 0.95, "epsilon": 1e-2, "learning_rate": 0.01}),
]
# Initial weight scale per case (default 1): Adadelta's default steps are ~1e-6, below float32
# resolution of O(1) weights, so its update is checked on small weights.
W_SCALE = {("adadelta", ()): 1e-3}


def _ids(case):
    name, opts = case
    return name + "".join(f"-{k}={v}" for k, v in opts.items())


def _grads(rng: np.random.Generator, n: int) -> np.ndarray:
    # Varying overall scale (so AMSGrad's max and Adamax's norm both matter) and some tiny entries
    # (so where epsilon enters the formula matters).
    g = rng.standard_normal(n).astype(np.float32) * np.float32(rng.uniform(0.2, 2.0))
    g[::7] *= np.float32(1e-3)
    return g


def _split(flat: np.ndarray) -> list[np.ndarray]:
    out, i = [], 0
    for s in SHAPES:
        k = int(np.prod(s))
        out.append(flat[i:i + k].reshape(s))
        i += k
    return out


def _run_against_keras(name: str, opts: dict, steps: int = 5, lr_at: dict[int, float] | None = None) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((name, opts)).encode()))
    w0 = rng.standard_normal(SIZE).astype(np.float32) * np.float32(W_SCALE.get((name, tuple(opts.items())), 1.0))
    ours = make_master_optimizer({"name": name, **opts}, SIZE, chunk_size=CHUNK)
    theirs = getattr(keras.optimizers, KERAS_CLASSES[name])(**opts)
    variables = [keras.Variable(p) for p in _split(w0.copy())]
    w = w0.copy()
    for i in range(steps):
        if lr_at and i in lr_at:
            ours.learning_rate = lr_at[i]
            theirs.learning_rate = lr_at[i]
        g = _grads(rng, SIZE)
        ours.step(w, g)
        theirs.apply_gradients(zip(_split(g), variables, strict=True))
        expected = np.concatenate([keras.ops.convert_to_numpy(v).ravel() for v in variables])
        np.testing.assert_allclose(w, expected, rtol=1e-5, atol=1e-6, err_msg=f"{name} {opts} step {i + 1}")
    assert ours.iterations == steps == int(theirs.iterations)
    # The weight check alone would pass for any update below its tolerance: compare the updates
    # themselves, to 0.1% of the largest.
    moved = expected - w0
    assert np.max(np.abs(moved)) > 0
    np.testing.assert_allclose(w - w0, moved, rtol=1e-3, atol=1e-3 * float(np.max(np.abs(moved))))


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_matches_keras(case):
    _run_against_keras(*case)


@pytest.mark.parametrize("name", ["sgd", "adam", "nadam", "rmsprop"])
def test_learning_rate_changed_between_steps_matches_keras(name):
    opts = {"momentum": 0.9} if name in ("sgd", "rmsprop") else {}
    _run_against_keras(name, opts, steps=6, lr_at={2: 0.003, 4: 0.0007})


def test_lr_alias_and_settable_learning_rate():
    opt = make_master_optimizer("adam", 10)
    opt.lr = 0.5
    assert opt.learning_rate == 0.5
    opt.learning_rate = 0.25
    assert opt.lr == 0.25
    with pytest.raises(ValueError, match="learning_rate"):
        opt.learning_rate = float("nan")


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_defaults_are_keras_defaults(name):
    ours = make_master_optimizer(name, 4)
    cfg = getattr(keras.optimizers, KERAS_CLASSES[name])().get_config()
    for key, value in ours.options().items():
        assert cfg[key] == (pytest.approx(value, rel=1e-6) if isinstance(value, float) else value), key
    assert ours.config()["name"] == name and ours.iterations == 0


def test_accepts_a_keras_config_at_its_defaults():
    cfg = {**keras.optimizers.Adam(learning_rate=0.01, amsgrad=True).get_config(), "name": "adam"}
    opt = make_master_optimizer(cfg, 8)
    assert opt.amsgrad and opt.learning_rate == pytest.approx(0.01)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_state_dict_round_trip_through_npz_and_json(name, tmp_path):
    rng = np.random.default_rng(3)
    spec = {"name": name, "learning_rate": 0.02}
    if name in ("sgd", "rmsprop"):
        spec["momentum"] = 0.9
    a = make_master_optimizer(spec, 300, chunk_size=128)
    w = rng.standard_normal(300).astype(np.float32)
    grads = [_grads(rng, 300) for _ in range(6)]
    for g in grads[:3]:
        a.step(w, g)
    state = a.state_dict()
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    np.savez(tmp_path / "opt.npz", **arrays)
    (tmp_path / "opt.json").write_text(json.dumps({"config": a.config(), "state": scalars}))

    meta = json.loads((tmp_path / "opt.json").read_text())
    b = make_master_optimizer(meta["config"], 300, chunk_size=128)
    with np.load(tmp_path / "opt.npz", allow_pickle=False) as npz:
        b.load_state_dict({**meta["state"], **{k: npz[k] for k in npz.files}})
    assert b.iterations == 3 and b.config() == a.config()

    w_b = w.copy()
    for g in grads[3:]:
        a.step(w, g)
        b.step(w_b, g)
    np.testing.assert_array_equal(w, w_b)
    # state_dict() returned copies: the later steps did not change it.
    for k, v in arrays.items():
        np.testing.assert_array_equal(v, np.load(tmp_path / "opt.npz")[k])


def test_load_state_dict_rejects_mismatched_state():
    a = make_master_optimizer("adam", 16)
    with pytest.raises(ValueError, match="missing.*velocity"):
        a.load_state_dict({"iterations": 1, "learning_rate": 0.1, "momentum": np.zeros(16, np.float32)})
    state = make_master_optimizer("adam", 17).state_dict()
    with pytest.raises(ValueError, match="17 elements"):
        a.load_state_dict(state)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_chunked_equals_unchunked(name):
    # Above the default chunk size (65536), with a ragged last chunk; a tiny chunk size too.
    n = 150_001
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal(n).astype(np.float32)
    results = []
    for chunk in (n, 65536, 1000):
        opt = make_master_optimizer({"name": name, "learning_rate": 0.01}, n, chunk_size=chunk)
        w = w0.copy()
        r = np.random.default_rng(6)
        for _ in range(3):
            opt.step(w, _grads(r, n))
        results.append(w)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


@pytest.mark.parametrize("case", [("sgd", {"momentum": 0.9, "nesterov": True}), ("rmsprop", {"centered": True,
                                  "momentum": 0.9}), ("adadelta", {}), ("adam", {"amsgrad": True}), ("adamw", {}),
                                  ("adagrad", {}), ("adamax", {}), ("nadam", {})], ids=_ids)
def test_step_allocates_no_big_arrays(case):
    name, opts = case
    n = 1_000_000  # 4 MB per array
    rng = np.random.default_rng(7)
    w = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    opt = make_master_optimizer({"name": name, **opts}, n)
    opt.step(w, g)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        for _ in range(2):
            opt.step(w, g)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, f"{name}: {peak} bytes allocated during step"


def test_rejects_bad_specs_and_buffers():
    with pytest.raises(ValueError, match=r"unknown optimizer 'adamz'; allowed: sgd, rmsprop"):
        make_master_optimizer("adamz", 10)
    with pytest.raises(ValueError, match=r"unknown option 'beta1' for optimizer 'adam'; allowed: learning_rate, "):
        make_master_optimizer({"name": "adam", "beta1": 0.9}, 10)
    with pytest.raises(ValueError, match=r"'clipnorm'=1.0 is not supported"):
        make_master_optimizer({"name": "sgd", "clipnorm": 1.0}, 10)
    with pytest.raises(ValueError, match=r"'use_ema'=True is not supported"):
        make_master_optimizer({"name": "adam", "use_ema": True}, 10)
    make_master_optimizer({"name": "adam", "clipnorm": None, "use_ema": False}, 10)  # Keras's no-op defaults
    with pytest.raises(ValueError, match="needs a 'name'"):
        make_master_optimizer({"learning_rate": 0.1}, 10)
    with pytest.raises(ValueError, match="weight_decay"):
        make_master_optimizer({"name": "adamw", "weight_decay": None}, 10)
    with pytest.raises(ValueError, match="beta_1"):
        make_master_optimizer({"name": "adam", "beta_1": 1.5}, 10)
    with pytest.raises(ValueError, match="nesterov"):
        make_master_optimizer({"name": "sgd", "nesterov": "yes"}, 10)
    with pytest.raises(ValueError, match="size"):
        make_master_optimizer("sgd", 0)
    assert make_master_optimizer("AdamW", 3).name == "adamw"

    opt = make_master_optimizer("sgd", 10)
    w = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="grads must be a float32"):
        opt.step(w, np.zeros(10))
    with pytest.raises(ValueError, match="11 elements"):
        opt.step(w, np.zeros(11, np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        opt.step(np.zeros(20, np.float32)[::2], np.zeros(10, np.float32))
    assert opt.iterations == 0

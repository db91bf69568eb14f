"""Time per master update: mpiopt's flat optimizers vs plain numpy formulas vs keras.optimizers.

    python bench/master_update.py [--sizes 1e6 1e7] [--repeat 20]

For each optimizer and size: the median time of one update of a flat float32 buffer by
`mpiopt.learn.optimizers` (chunked, in place), by the straightforward numpy formula (whole-array
expressions with temporaries), and by the Keras 3 optimizer applying the same update to one
`keras.Variable` of that size on the TensorFlow backend, eagerly and inside a `tf.function`.
Everything runs on one thread. Prints a table; asserts nothing.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

# (label, optimizer name, options); Keras defaults otherwise.
CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("sgd", "sgd", {}),
    ("sgd momentum=0.9", "sgd", {"momentum": 0.9}),
    ("sgd nesterov", "sgd", {"momentum": 0.9, "nesterov": True}),
    ("rmsprop", "rmsprop", {}),
    ("rmsprop centered+mom", "rmsprop", {"centered": True, "momentum": 0.9}),
    ("adadelta", "adadelta", {}),
    ("adam", "adam", {}),
    ("adam amsgrad", "adam", {"amsgrad": True}),
    ("adamw", "adamw", {}),
    ("adagrad", "adagrad", {}),
    ("adamax", "adamax", {}),
    ("nadam", "nadam", {}),
]
KERAS_CLASSES = {
    "sgd": "SGD", "rmsprop": "RMSprop", "adadelta": "Adadelta", "adam": "Adam", "adamw": "AdamW",
    "adagrad": "Adagrad", "adamax": "Adamax", "nadam": "Nadam",
}


def naive_step(name: str, opts: dict[str, Any], n: int) -> Callable[[np.ndarray, np.ndarray], None]:
    """The update as one would write it in numpy: whole-array expressions, new arrays each step."""
    return _NAIVE[name]({**_defaults(name), **opts}, n)


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, np.float32)


def _naive_sgd(o: dict[str, Any], n: int):
    lr, s = o["learning_rate"], {"m": _zeros(n)}

    def step(w, g):
        if o["momentum"] == 0:
            w -= lr * g
            return
        s["m"] = o["momentum"] * s["m"] - lr * g
        w += o["momentum"] * s["m"] - lr * g if o["nesterov"] else s["m"]
    return step


def _naive_rmsprop(o: dict[str, Any], n: int):
    lr, s = o["learning_rate"], {"v": _zeros(n), "a": _zeros(n), "mom": _zeros(n)}

    def step(w, g):
        rho, eps = o["rho"], o["epsilon"]
        s["v"] = rho * s["v"] + (1 - rho) * g * g
        if o["centered"]:
            s["a"] = rho * s["a"] + (1 - rho) * g
            inc = lr * g / np.sqrt(s["v"] - s["a"] * s["a"] + eps)
        else:
            inc = lr * g / np.sqrt(s["v"] + eps)
        if o["momentum"] > 0:
            s["mom"] = o["momentum"] * s["mom"] + inc
            inc = s["mom"]
        w -= inc
    return step


def _naive_adadelta(o: dict[str, Any], n: int):
    lr, s = o["learning_rate"], {"ag": _zeros(n), "ad": _zeros(n)}

    def step(w, g):
        rho, eps = o["rho"], o["epsilon"]
        s["ag"] = rho * s["ag"] + (1 - rho) * g * g
        delta = -np.sqrt(s["ad"] + eps) * g / np.sqrt(s["ag"] + eps)
        s["ad"] = rho * s["ad"] + (1 - rho) * delta * delta
        w += lr * delta
    return step


def _naive_adam(o: dict[str, Any], n: int, *, decoupled_decay: bool = False):
    lr, s = o["learning_rate"], {"t": 0, "m": _zeros(n), "v": _zeros(n), "vh": _zeros(n)}

    def step(w, g):
        b1, b2 = o["beta_1"], o["beta_2"]
        s["t"] += 1
        if decoupled_decay:
            w -= w * o["weight_decay"] * lr
        alpha = lr * math.sqrt(1 - b2 ** s["t"]) / (1 - b1 ** s["t"])  # a Python float: stays float32
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        v = s["v"]
        if o["amsgrad"]:
            s["vh"] = v = np.maximum(s["vh"], v)
        w -= alpha * s["m"] / (np.sqrt(v) + o["epsilon"])
    return step


def _naive_adagrad(o: dict[str, Any], n: int):
    lr, s = o["learning_rate"], {"acc": np.full(n, o["initial_accumulator_value"], np.float32)}

    def step(w, g):
        s["acc"] = s["acc"] + g * g
        w -= lr * g / np.sqrt(s["acc"] + o["epsilon"])
    return step


def _naive_adamax(o: dict[str, Any], n: int):
    lr, s = o["learning_rate"], {"t": 0, "m": _zeros(n), "u": _zeros(n)}

    def step(w, g):
        b1 = o["beta_1"]
        s["t"] += 1
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["u"] = np.maximum(o["beta_2"] * s["u"], np.abs(g))
        w -= lr * s["m"] / ((1 - b1 ** s["t"]) * (s["u"] + o["epsilon"]))
    return step


def _naive_nadam(o: dict[str, Any], n: int):
    lr, s = o["learning_rate"], {"t": 0, "m": _zeros(n), "v": _zeros(n), "up": 1.0}

    def step(w, g):
        b1, b2 = o["beta_1"], o["beta_2"]
        s["t"] += 1
        t = s["t"]
        u_t, u_t1 = b1 * (1 - 0.5 * 0.96 ** t), b1 * (1 - 0.5 * 0.96 ** (t + 1))
        s["up"] *= u_t
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        m_hat = u_t1 * s["m"] / (1 - s["up"] * u_t1) + (1 - u_t) * g / (1 - s["up"])
        w -= lr * m_hat / (np.sqrt(s["v"] / (1 - b2 ** t)) + o["epsilon"])
    return step


_NAIVE: dict[str, Callable[[dict[str, Any], int], Callable[[np.ndarray, np.ndarray], None]]] = {
    "sgd": _naive_sgd, "rmsprop": _naive_rmsprop, "adadelta": _naive_adadelta, "adam": _naive_adam,
    "adamw": lambda o, n: _naive_adam(o, n, decoupled_decay=True), "adagrad": _naive_adagrad,
    "adamax": _naive_adamax, "nadam": _naive_nadam,
}


def _defaults(name: str) -> dict[str, Any]:
    from mpiopt.learn.optimizers import OPTIMIZERS

    return OPTIMIZERS[name].defaults()


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def timed(fn: Callable[[], Any], repeat: int, warmup: int = 3) -> float:
    """Median wall time of fn() in ms, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _time_mpiopt(name: str, opts: dict[str, Any], w0: np.ndarray, g: np.ndarray, repeat: int) -> float:
    from mpiopt.learn.optimizers import make_master_optimizer

    w = w0.copy()
    opt = make_master_optimizer({"name": name, **opts}, w0.size)
    return timed(lambda: opt.step(w, g), repeat)


def _time_numpy(name: str, opts: dict[str, Any], w0: np.ndarray, g: np.ndarray, repeat: int) -> float:
    w = w0.copy()
    naive = naive_step(name, opts, w0.size)
    return timed(lambda: naive(w, g), repeat)


def _time_keras(name: str, opts: dict[str, Any], w0: np.ndarray, g: np.ndarray, repeat: int) -> tuple[float, float]:
    """(eager, tf.function) ms of the Keras optimizer updating one variable."""
    import keras
    import tensorflow as tf

    var = keras.Variable(w0.copy())
    g_tf = tf.constant(g)
    keras_class = getattr(keras.optimizers, KERAS_CLASSES[name])
    kopt = keras_class(**opts)
    t_eager = timed(lambda: kopt.apply_gradients([(g_tf, var)]), repeat)
    kopt_fn = keras_class(**opts)
    kopt_fn.build([var])
    fn = tf.function(lambda: kopt_fn.apply_gradients([(g_tf, var)]))
    return t_eager, timed(fn, repeat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1e6, 1e7], help="numbers of float32 parameters")
    ap.add_argument("--repeat", type=int, default=20, help="timed updates per cell (median)")
    ap.add_argument("--only", nargs="*", help="optimizer labels to run (default: all)")
    args = ap.parse_args()

    import tensorflow as tf

    # One thread for TF, set before any op runs (it cannot be changed afterwards).
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras

    from mpiopt.learn.optimizers import DEFAULT_CHUNK_SIZE

    configs = [c for c in CONFIGS if not args.only or c[0] in args.only]
    print(f"Master update, float32, median of {args.repeat} updates (3 warm-up); {_cpu()}, "
          f"{os.cpu_count()} cores")
    print(f"numpy {np.__version__}, tensorflow {tf.__version__}, keras {keras.__version__} "
          f"(backend {keras.backend.backend()}); threads: TF intra_op=1 inter_op=1, OMP/BLAS=1, "
          "numpy ufuncs single-threaded")
    print(f"mpiopt: chunked in-place ufuncs, chunk {DEFAULT_CHUNK_SIZE} elements, no numexpr. "
          "numpy: whole-array formula with temporaries.")
    print("keras eager: optimizer.apply_gradients; keras fn: the same inside tf.function.")
    print("speedups are numpy ms / mpiopt ms and keras ms / mpiopt ms, keras = the faster of eager and tf.function\n")
    head = (f"{'optimizer':<21}| {'params':>6} | {'mpiopt ms':>9} | {'numpy ms':>8} | {'keras eager ms':>14} | "
            f"{'keras fn ms':>11} | {'speedup vs numpy':>16} | {'speedup vs keras':>16}")
    print(head)
    print("-" * len(head))
    rng = np.random.default_rng(0)
    for size in [int(x) for x in args.sizes]:
        w0 = rng.standard_normal(size).astype(np.float32)
        g = (rng.standard_normal(size) * 0.1).astype(np.float32)
        for label, name, opts in configs:
            # one measurement a function: each frees its buffers before the next one starts
            t_ours = _time_mpiopt(name, opts, w0, g, args.repeat)
            t_numpy = _time_numpy(name, opts, w0, g, args.repeat)
            t_eager, t_fn = _time_keras(name, opts, w0, g, args.repeat)
            t_keras = min(t_eager, t_fn)
            print(f"{label:<21}| {size / 1e6:>5g}M | {t_ours:>9.2f} | {t_numpy:>8.2f} | {t_eager:>14.2f} | "
                  f"{t_fn:>11.2f} | {t_numpy / t_ours:>15.1f}x | {t_keras / t_ours:>15.1f}x", flush=True)


if __name__ == "__main__":
    main()

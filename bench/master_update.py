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
from pathlib import Path
from typing import Any, Callable

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
    o = {**_defaults(name), **opts}
    lr = o["learning_rate"]
    s: dict[str, Any] = {"t": 0}
    z = lambda: np.zeros(n, np.float32)  # noqa: E731

    if name == "sgd":
        s["m"] = z()

        def step(w, g):
            if o["momentum"] == 0:
                w -= lr * g
                return
            s["m"] = o["momentum"] * s["m"] - lr * g
            w += o["momentum"] * s["m"] - lr * g if o["nesterov"] else s["m"]
    elif name == "rmsprop":
        s.update(v=z(), a=z(), mom=z())

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
    elif name == "adadelta":
        s.update(ag=z(), ad=z())

        def step(w, g):
            rho, eps = o["rho"], o["epsilon"]
            s["ag"] = rho * s["ag"] + (1 - rho) * g * g
            delta = -np.sqrt(s["ad"] + eps) * g / np.sqrt(s["ag"] + eps)
            s["ad"] = rho * s["ad"] + (1 - rho) * delta * delta
            w += lr * delta
    elif name in ("adam", "adamw"):
        s.update(m=z(), v=z(), vh=z())

        def step(w, g):
            b1, b2 = o["beta_1"], o["beta_2"]
            s["t"] += 1
            if name == "adamw":
                w -= w * o["weight_decay"] * lr
            alpha = lr * math.sqrt(1 - b2 ** s["t"]) / (1 - b1 ** s["t"])  # a Python float: stays float32
            s["m"] = b1 * s["m"] + (1 - b1) * g
            s["v"] = b2 * s["v"] + (1 - b2) * g * g
            v = s["v"]
            if o["amsgrad"]:
                s["vh"] = v = np.maximum(s["vh"], v)
            w -= alpha * s["m"] / (np.sqrt(v) + o["epsilon"])
    elif name == "adagrad":
        s["acc"] = np.full(n, o["initial_accumulator_value"], np.float32)

        def step(w, g):
            s["acc"] = s["acc"] + g * g
            w -= lr * g / np.sqrt(s["acc"] + o["epsilon"])
    elif name == "adamax":
        s.update(m=z(), u=z())

        def step(w, g):
            b1 = o["beta_1"]
            s["t"] += 1
            s["m"] = b1 * s["m"] + (1 - b1) * g
            s["u"] = np.maximum(o["beta_2"] * s["u"], np.abs(g))
            w -= lr * s["m"] / ((1 - b1 ** s["t"]) * (s["u"] + o["epsilon"]))
    elif name == "nadam":
        s.update(m=z(), v=z(), up=1.0)

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
    else:
        raise ValueError(name)
    return step


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

    from mpiopt.learn.optimizers import DEFAULT_CHUNK_SIZE, make_master_optimizer

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
            w = w0.copy()
            opt = make_master_optimizer({"name": name, **opts}, size)
            t_ours = timed(lambda: opt.step(w, g), args.repeat)
            del opt

            w = w0.copy()
            naive = naive_step(name, opts, size)
            t_numpy = timed(lambda: naive(w, g), args.repeat)
            del naive

            var = keras.Variable(w0.copy())
            g_tf = tf.constant(g)
            kopt = getattr(keras.optimizers, KERAS_CLASSES[name])(**opts)
            t_eager = timed(lambda: kopt.apply_gradients([(g_tf, var)]), args.repeat)
            kopt_fn = getattr(keras.optimizers, KERAS_CLASSES[name])(**opts)
            kopt_fn.build([var])
            fn = tf.function(lambda: kopt_fn.apply_gradients([(g_tf, var)]))
            t_fn = timed(lambda: fn(), args.repeat)
            del var, g_tf, kopt, kopt_fn, fn

            t_keras = min(t_eager, t_fn)
            print(f"{label:<21}| {size / 1e6:>5g}M | {t_ours:>9.2f} | {t_numpy:>8.2f} | {t_eager:>14.2f} | "
                  f"{t_fn:>11.2f} | {t_numpy / t_ours:>15.1f}x | {t_keras / t_ours:>15.1f}x", flush=True)


if __name__ == "__main__":
    main()

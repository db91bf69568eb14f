"""Training on a GPU: mixed precision and XLA on one rank, trials packed on one GPU, a group on one GPU.

    python bench/gpu.py [--quick] [--parts precision packing groups] [--epochs 6] [--batch 128]
                        [--models cnn wide] [--precisions float32 mixed xla mixed+xla] [--groups 1 2 4 8]
                        [--sizes 2 4] [--modes allreduce downpour]

1. precision: one rank trains the MNIST-1D CNN (`examples/mnist1d.py:build_cnn`) and a wide MLP
   of about 10M parameters (`build_wide` below) in float32, with `mixed_precision`, with
   `jit_compile` (XLA) and with both; samples/s over the epochs after the first (the first holds
   the tracing and XLA compilation, shown apart), and the best val_accuracy.
2. packing: K one-rank groups share one GPU (`training.ranks_per_gpu: 8`) and run a short random
   MNIST-1D search (`mpiexec -n K+1 mpiopt search`, 2 trials per group): trials per hour
   (completed trials over the span from the first start to the last end in the results table)
   against one group.
3. groups: a group of 2 and of 4 ranks on one GPU (`ranks_per_gpu: 4`, `mpiexec -n N mpiopt
   train`) in allreduce and downpour against one rank; samples/s as `mpiopt train` reports it.

Every run is a process (or an `mpiexec` job) of its own. It runs on the CPU as well and says so:
the figures are then the CPU's. `--quick` is a tiny configuration that only shows the script
works end to end. Prints tables; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()
MPIEXEC = Path(sys.executable).parent / "mpiexec"
PRECISIONS = {"float32": (False, False), "mixed": (True, False), "xla": (False, True), "mixed+xla": (True, True)}


# -- the models and data (also imported by the runs' search-space files) ------------------------------
def build_wide(units: int = 2304, layers: int = 3, activation: str = "relu"):
    """A wide MLP for MNIST-1D: 40 -> units x layers -> 10; 10.7M parameters at the defaults."""
    import keras

    model = keras.Sequential([keras.Input(shape=(40,))])
    for _ in range(int(layers)):
        model.add(keras.layers.Dense(int(units), activation=activation))
    model.add(keras.layers.Dense(10, activation="softmax"))
    return model


def load_data_quick():
    """MNIST-1D with 1000 samples (800 training, 200 validation): for `--quick`."""
    return runpy.run_path(str(ROOT / "examples" / "mnist1d.py"))["load_data"](num_samples=1000)


MODELS = {  # name: (file, builder, full arguments, quick arguments, what the table calls it)
    "cnn": (ROOT / "examples" / "mnist1d.py", "build_cnn", {"filters": 32, "blocks": 2, "units": 64},
            {"filters": 8, "blocks": 1, "units": 16}, "MNIST-1D CNN (2x Conv1D 32, dense 64)"),
    "wide": (HERE, "build_wide", {"units": 2304, "layers": 3}, {"units": 256, "layers": 2}, "wide MLP (3x 2304)"),
}


# -- 1. one rank, one precision -------------------------------------------------------------------------
def child(args: argparse.Namespace) -> None:
    """One rank trains one model in one precision; prints a JSON line."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from mpiopt._log import quiet_tensorflow
    from mpiopt.config import TRAINING_DEFAULTS
    from mpiopt.learn import DataSource, Job, train

    with quiet_tensorflow():
        import keras
        import tensorflow as tf
    path, builder, full, quick, _ = MODELS[args.model]
    build = runpy.run_path(str(path))[builder]
    data = load_data_quick() if args.quick else runpy.run_path(str(ROOT / "examples" / "mnist1d.py"))["load_data"]()
    src = DataSource(*data)
    mixed, jit = PRECISIONS[args.child]
    training = {**TRAINING_DEFAULTS, "mode": "allreduce", "epochs": args.epochs, "batch_size": args.batch,
                "optimizer": "adam", "learning_rate": args.lr, "checkpoint_every": 0,
                "mixed_precision": mixed, "jit_compile": jit}
    kwargs = quick if args.quick else full
    ends: list[float] = []
    t0 = time.perf_counter()
    out = train(None, Job(build=build, model_kwargs=kwargs, source=src, training=training,
                          loss="sparse_categorical_crossentropy", metrics=("accuracy",), seed=0,
                          on_epoch=lambda e, row: ends.append(time.perf_counter() - t0)))
    gpus = tf.config.list_physical_devices("GPU")
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus else None
    per_epoch = src.n_train()
    steady = (len(ends) - 1) * per_epoch / (ends[-1] - ends[0]) if len(ends) > 1 else float("nan")
    print(json.dumps({"params": build(**kwargs).count_params(), "first_s": ends[0] if ends else float("nan"),
                      "samples_s": steady, "val_accuracy": max((r.get("val_accuracy", 0.0) for r in out.history),
                                                               default=float("nan")),
                      "gpu": name, "policy": keras.config.dtype_policy().name}), flush=True)


def precision_table(args: argparse.Namespace) -> None:
    rows = []
    for model in args.models:
        for precision in args.precisions:
            cmd = [sys.executable, str(HERE), "--child", precision, "--model", model, "--epochs", str(args.epochs),
                   "--batch", str(args.batch), "--lr", str(args.lr)] + (["--quick"] if args.quick else [])
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            if p.returncode != 0:
                print(f"  {model} {precision} failed:\n{p.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append((model, precision, json.loads(p.stdout.strip().splitlines()[-1])))
            print(f"  ran {model} {precision}", file=sys.stderr, flush=True)
    if not rows:
        return
    device = f"on {rows[0][2]['gpu']}" if rows[0][2]["gpu"] else "on the CPU (no GPU found)"
    print(f"\n1. One rank {device}: batch {args.batch}, {args.epochs} epochs, adam at {args.lr}; samples/s over "
          f"epochs 2..{args.epochs} (training and validation), the first epoch (tracing, XLA compilation) apart")
    print(f"{'model':<40} {'params':>10} {'precision':<10} {'samples/s':>10} {'vs fp32':>8} {'1st epoch s':>11} "
          f"{'best val_acc':>12}")
    for model, precision, r in rows:
        base = next((b for m, p, b in rows if m == model and p == "float32"), None)
        rel = f"{r['samples_s'] / base['samples_s']:>7.2f}x" if base else "     n/a"
        label = MODELS[model][4] if not args.quick else f"{model} (quick)"
        print(f"{label:<40} {r['params']:>10,} {precision:<10} {r['samples_s']:>10.0f} {rel} {r['first_s']:>11.1f} "
              f"{r['val_accuracy']:>12.3f}")


# -- 2. packing one-rank groups on one GPU -------------------------------------------------------------------
def space(name: str, args: argparse.Namespace, training: str, parameters: str, search: str = "") -> str:
    data = f"{HERE}:load_data_quick" if args.quick else f"{ROOT}/examples/mnist1d.py:load_data"
    return f"""
name: {name}
objective:
  model: {ROOT}/examples/mnist1d.py:build_model
  data: {data}
  loss: sparse_categorical_crossentropy
  metrics: [accuracy]
  maximize: val_accuracy
parameters:
{parameters}
search: {{algorithm: random, seed: 0{search}}}
training: {{epochs: {args.epochs}, batch_size: {args.batch}, optimizer: adam, {training}}}
"""


def mpirun(n: int, cli: list[str], cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    t0 = time.perf_counter()
    p = subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, "-m", "mpiopt", *cli], cwd=cwd,
                       capture_output=True, text=True, timeout=timeout, env=env)
    return p, time.perf_counter() - t0


def packing_table(args: argparse.Namespace, work: Path) -> None:
    import mpiopt

    params = ("  learning_rate: {type: real, low: 1.0e-3, high: 3.0e-2, prior: log-uniform}\n"
              "  units: {type: integer, low: 32, high: 256, prior: log-uniform}")
    rows = []
    for k in args.groups:
        folder = work / f"pack{k}"
        folder.mkdir()
        trials = 2 * k
        (folder / "s.yaml").write_text(space("pack", args, "group_size: 1, ranks_per_gpu: 8", params,
                                             f", trials: {trials}, initial_points: {trials}"))
        p, wall = mpirun(k + 1, ["search", "s.yaml"], folder, timeout=7200)
        if p.returncode != 0:
            print(f"  {k} groups failed:\n{p.stderr[-2000:]}", file=sys.stderr)
            continue
        df = mpiopt.load_results(folder / "runs" / "pack")
        done = df[df.status == "completed"]
        span = (df.end.max() - df.start.min()).total_seconds()
        rows.append((k, len(done), len(df), span, wall, float(done.duration_s.median()), float(done.objective.max())))
        print(f"  ran {k} groups", file=sys.stderr, flush=True)
    if not rows:
        return
    print(f"\n2. Packing: K one-rank groups on one device (ranks_per_gpu: 8), a random MNIST-1D MLP search of 2 "
          f"trials per group, {args.epochs} epochs, batch {args.batch}")
    print(f"{'groups':>6} {'trials':>7} {'span s':>8} {'wall s':>8} {'trial s':>8} {'trials/h':>9} {'vs 1 group':>10} "
          f"{'best val_acc':>12}")
    base = next((r for r in rows if r[0] == 1), None)
    for k, done, total, span, wall, median, best in rows:
        per_hour = done / span * 3600 if span > 0 else float("nan")
        rel = f"{per_hour / (base[1] / base[3] * 3600):>9.2f}x" if base and base[3] > 0 else "       n/a"
        print(f"{k:>6} {f'{done}/{total}':>7} {span:>8.1f} {wall:>8.1f} {median:>8.1f} {per_hour:>9.0f} {rel} "
              f"{best:>12.3f}")


# -- 3. a group on one GPU -----------------------------------------------------------------------------------
def groups_table(args: argparse.Namespace, work: Path) -> None:
    model, kwargs = ("build_model", {"units": 64}) if args.group_model == "mlp" else ("build_cnn", {"filters": 32})
    params = "\n".join(f"  {k}: {{type: categorical, choices: [{v}]}}" for k, v in kwargs.items())
    runs = [("one rank", 1)] + [(mode, n) for n in args.sizes for mode in args.modes]
    rows = []
    for mode, n in runs:
        folder = work / f"group_{mode.replace(' ', '_')}_{n}"
        folder.mkdir()
        text = space("group", args, f"ranks_per_gpu: {max(args.sizes)}, learning_rate: {args.lr}", params)
        (folder / "s.yaml").write_text(text.replace("mnist1d.py:build_model", f"mnist1d.py:{model}"))
        cli = ["train", "s.yaml", "--out", "out"] + (["--set", f"mode={mode}"] if n > 1 else [])
        p, wall = mpirun(n, cli, folder, timeout=3600)
        found = re.search(r"([0-9.]+) samples/s", p.stdout)
        if p.returncode != 0 or not found:
            print(f"  {mode} x{n} failed:\n{p.stderr[-2000:]}", file=sys.stderr)
            continue
        acc = re.search(r"val_accuracy = ([0-9.]+)", p.stdout)
        rows.append((mode, n, float(found.group(1)), wall, float(acc.group(1)) if acc else float("nan")))
        print(f"  ran {mode} x{n}", file=sys.stderr, flush=True)
    if not rows:
        return
    what = "MNIST-1D MLP (64x2)" if args.group_model == "mlp" else "MNIST-1D CNN (2x Conv1D 32, dense 64)"
    print(f"\n3. A group on one device (ranks_per_gpu: {max(args.sizes)}): {what}, batch {args.batch} per rank, "
          f"{args.epochs} epochs, adam at {args.lr}; samples/s as `mpiopt train` reports it (all epochs)")
    print(f"{'mode':<10} {'ranks':>5} {'samples/s':>10} {'vs 1 rank':>9} {'wall s':>8} {'best val_acc':>12}")
    base = next((r[2] for r in rows if r[1] == 1), None)
    for mode, n, sps, wall, acc in rows:
        rel = f"{sps / base:>8.2f}x" if base else "     n/a"
        print(f"{mode:<10} {n:>5} {sps:>10.0f} {rel} {wall:>8.1f} {acc:>12.3f}")


def describe_device() -> str:
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        gpus = [ln for ln in p.stdout.splitlines() if ln.startswith("GPU")]
    except (OSError, subprocess.TimeoutExpired):
        gpus = []
    if not gpus:
        return f"no GPU found: every figure below is the CPU's ({os.cpu_count()} cores)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"{len(gpus)} GPU(s): {gpus[0]}" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", choices=sorted(PRECISIONS), help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=sorted(MODELS), default="cnn", help=argparse.SUPPRESS)
    ap.add_argument("--parts", nargs="+", choices=["precision", "packing", "groups"],
                    default=["precision", "packing", "groups"])
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["cnn", "wide"])
    ap.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=list(PRECISIONS),
                    help="mixed precision without XLA is very slow on a CPU")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4, 8], help="one-rank groups packed on one GPU")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4], help="ranks of a group on one GPU")
    ap.add_argument("--modes", nargs="+", default=["allreduce", "downpour"])
    ap.add_argument("--group-model", choices=["mlp", "cnn"], default="cnn")
    ap.add_argument("--quick", action="store_true",
                    help="tiny models, 1000 samples, 2 epochs, 1-2 groups, a group of 2: checks the script only")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.epochs, args.groups, args.sizes = min(args.epochs, 2), [1, 2], [2]
    print(describe_device() + (" (--quick: tiny sizes, the figures mean nothing)" if args.quick else ""), flush=True)
    with tempfile.TemporaryDirectory(prefix="mpiopt-bench-gpu-") as tmp:
        work = Path(tmp)
        if "precision" in args.parts:
            precision_table(args)
        if "packing" in args.parts:
            packing_table(args, work)
        if "groups" in args.parts:
            groups_table(args, work)


if __name__ == "__main__":
    main()

"""Training throughput, time to accuracy and accuracy at equal epochs on MNIST-1D.

One process against groups of 2 and 3 ranks in every mode, each run under its own `mpiexec`,
with the compute / communication / wait split taken from the ranks' traces.

    python bench/training_throughput.py [--epochs 15] [--target 0.5] [--sizes 1 2 3]

Prints tables; asserts nothing. Each rank runs with one TensorFlow intra-op and one inter-op
thread; on a machine with fewer cores than ranks the ranks share cores, which the tables show.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = Path(sys.executable).parent / "mpiexec"
MODES = ("downpour", "easgd", "gem", "allreduce")
# one learning rate per mode: gem's proxy is momentum SGD, easgd's workers step alone
RATES = {"single": 0.003, "downpour": 0.003, "easgd": 0.005, "gem": 0.03, "allreduce": 0.003}


def child(mode: str, epochs: int, batch: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from mpiopt._log import quiet_tensorflow
    from mpiopt.config import TRAINING_DEFAULTS
    from mpiopt.learn import DataSource, Job, train
    from mpiopt.transport import GroupComm, configure_waits, world

    with quiet_tensorflow():
        import keras  # noqa: F401
    comm = world()
    size = comm.Get_size()
    if size > 1:
        configure_waits(comm)
    group = GroupComm(comm) if size > 1 else None
    ex = runpy.run_path(str(ROOT / "examples" / "mnist1d.py"))
    src = DataSource(*ex["load_data"]())
    times: list[float] = []
    t0 = time.perf_counter()
    training = {**TRAINING_DEFAULTS, "mode": mode if mode != "single" else "allreduce", "epochs": epochs,
                "batch_size": batch, "learning_rate": RATES[mode], "checkpoint_every": 0}
    job = Job(build=ex["build_model"], model_kwargs={"units": 64, "layers": 2}, source=src, training=training,
              loss="sparse_categorical_crossentropy", metrics=("accuracy",), seed=0,
              on_epoch=lambda e, row: times.append(time.perf_counter() - t0))
    out = train(group, job)
    if group is not None:
        group.close()
    if comm.Get_rank() == 0:
        print(json.dumps({"history": out.history, "times": times, "timing": out.timing, "samples": out.samples,
                          "wall": out.wall_s}), flush=True)


def run(mode: str, size: int, epochs: int, batch: int) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--epochs", str(epochs), "--batch", str(batch)]
    if size > 1:
        cmd = [str(MPIEXEC), "-n", str(size), *cmd]
    env = {**os.environ, "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    if p.returncode != 0:
        raise SystemExit(f"{mode} x{size} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def split(timing: dict[str, dict[str, float]], mode: str) -> tuple[float, float, float]:
    """Per worker rank, mean seconds of compute, communication (send/allreduce) and wait."""
    ranks = [v for k, v in timing.items() if k != "master"] if mode not in ("single", "allreduce") else \
        list(timing.values())
    n = max(len(ranks), 1)
    compute = sum(r.get("compute", 0.0) + r.get("apply", 0.0) for r in ranks) / n
    comm = sum(r.get("send", 0.0) + r.get("allreduce", 0.0) for r in ranks) / n
    wait = sum(r.get("wait", 0.0) for r in ranks) / n
    return compute, comm, wait


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", metavar="MODE")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--target", type=float, default=0.5, help="val_accuracy for time-to-accuracy")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    if args.child:
        child(args.child, args.epochs, args.batch)
        return
    runs = []
    for size in args.sizes:
        for mode in (("single",) if size == 1 else MODES):
            r = run(mode, size, args.epochs, args.batch)
            runs.append((mode, size, r))
            print(f"  ran {mode} x{size}", file=sys.stderr, flush=True)
    base = next((r for m, s, r in runs if m == "single"), None)
    base_tps = base["wall"] / max(base["samples"], 1) if base else None
    print(f"MNIST-1D MLP (64x2), batch {args.batch}, {args.epochs} epochs, {os.cpu_count()} cores, "
          "1 TF thread per rank; time-to-accuracy: first epoch with val_accuracy >= "
          f"{args.target}")
    print(f"{'mode':<10} {'ranks':>5} {'samples/s':>10} {'us/sample':>10} {'vs 1 proc':>9} {'compute s':>10} "
          f"{'comm s':>8} {'wait s':>8} {'t-to-acc s':>10} {'best val_acc':>12}")
    for mode, size, r in runs:
        tps = r["wall"] / max(r["samples"], 1)
        c, m, w = split(r["timing"], mode)
        accs = [row.get("val_accuracy", 0.0) for row in r["history"]]
        tta = next((t for t, a in zip(r["times"], accs) if a >= args.target), None)
        rel = f"{tps / base_tps:>8.2f}x" if base_tps else "     n/a"
        print(f"{mode:<10} {size:>5} {r['samples'] / r['wall']:>10.0f} {tps * 1e6:>10.1f} {rel} {c:>10.2f} "
              f"{m:>8.2f} {w:>8.2f} {('%.1f' % tta) if tta else '-':>10} {max(accs):>12.3f}")


if __name__ == "__main__":
    main()

"""Training throughput, time to accuracy and accuracy at equal epochs on MNIST-1D.

One process against groups of 2 and 3 ranks in every mode, each run under its own `mpiexec`,
with the compute / communication / wait split taken from the ranks' traces. Every mode trains
with the SAME optimizer and learning rate as the one process: a mode must work with the settings
that train one process well.

    python bench/training_throughput.py [--model mlp|cnn] [--optimizer adam] [--lr 0.003] [--modes gem ...]
                                        [--epochs 15] [--batch 32] [--target 0.5] [--sizes 1 2 3] [--nodes 1 2]

With `--nodes 2` a group's ranks are split over two simulated nodes (`mpiexec -launcher fork
-hosts nodeA:A,nodeB:B`), so its messages take MPICH's network path instead of shared memory.

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
MODELS = {  # name: (builder in examples/mnist1d.py, its arguments, what the table calls it)
    "mlp": ("build_model", {"units": 64, "layers": 2}, "MNIST-1D MLP (64x2)"),
    "cnn": ("build_cnn", {"filters": 32, "blocks": 2, "units": 64}, "MNIST-1D CNN (2x Conv1D 32, dense 64)"),
}


def optimizer_spec(text: str) -> str | dict:
    """`adam`, or a JSON mapping such as `{"name": "sgd", "momentum": 0.9}`."""
    return json.loads(text) if text.lstrip().startswith("{") else text


def child(mode: str, args: argparse.Namespace) -> None:
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
    builder, kwargs, _ = MODELS[args.model]
    training = {**TRAINING_DEFAULTS, "mode": mode if mode != "single" else "allreduce", "epochs": args.epochs,
                "batch_size": args.batch, "optimizer": optimizer_spec(args.optimizer), "learning_rate": args.lr,
                "checkpoint_every": 0}
    job = Job(build=ex[builder], model_kwargs=kwargs, source=src, training=training,
              loss="sparse_categorical_crossentropy", metrics=("accuracy",), seed=0,
              on_epoch=lambda e, row: times.append(time.perf_counter() - t0))
    out = train(group, job)
    if group is not None:
        group.close()
    if comm.Get_rank() == 0:
        print(json.dumps({"history": out.history, "times": times, "timing": out.timing, "samples": out.samples,
                          "wall": out.wall_s}), flush=True)


def run(mode: str, size: int, args: argparse.Namespace, nodes: int = 1) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--model", args.model, "--optimizer", args.optimizer,
           "--lr", str(args.lr), "--epochs", str(args.epochs), "--batch", str(args.batch)]
    if size > 1:
        hosts = []
        if nodes > 1:  # the ranks split over simulated nodes, the first taking the remainder
            base, extra = divmod(size, nodes)
            counts = [base + extra] + [base] * (nodes - 1)
            hosts = ["-launcher", "fork", "-hosts", ",".join(f"node{i}:{n}" for i, n in enumerate(counts))]
        cmd = [str(MPIEXEC), *hosts, "-n", str(size), *cmd]
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
    ap.add_argument("--model", choices=sorted(MODELS), default="mlp")
    ap.add_argument("--optimizer", default="adam",
                    help='a name or a JSON mapping ({"name": "sgd", "momentum": 0.9}); all modes and one process')
    ap.add_argument("--lr", type=float, default=0.003, help="learning rate, every mode and the one process alike")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--target", type=float, default=0.5, help="val_accuracy for time-to-accuracy")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1], help="simulated nodes a group's ranks span")
    args = ap.parse_args()
    if args.child:
        child(args.child, args)
        return
    runs = []
    for size in args.sizes:
        for mode, nodes in [(m, k) for m in (("single",) if size == 1 else args.modes)
                            for k in (args.nodes if size > 1 else [1])]:
            r = run(mode, size, args, nodes)
            runs.append((mode if nodes == 1 else f"{mode}/{nodes}n", size, r))
            print(f"  ran {mode} x{size} on {nodes} node(s)", file=sys.stderr, flush=True)
    base = next((r for m, s, r in runs if m == "single"), None)
    base_tps = base["wall"] / max(base["samples"], 1) if base else None
    print(f"{MODELS[args.model][2]}, {args.optimizer} at learning rate {args.lr} in every mode, batch {args.batch}, "
          f"{args.epochs} epochs, {os.cpu_count()} cores, 1 TF thread per rank; time-to-accuracy: first epoch with "
          f"val_accuracy >= {args.target}")
    print(f"{'mode':<14} {'ranks':>5} {'samples/s':>10} {'us/sample':>10} {'vs 1 proc':>9} {'compute s':>10} "
          f"{'comm s':>8} {'wait s':>8} {'t-to-acc s':>10} {'best val_acc':>12}")
    for mode, size, r in runs:
        tps = r["wall"] / max(r["samples"], 1)
        c, m, w = split(r["timing"], mode.split("/")[0])
        accs = [row.get("val_accuracy", 0.0) for row in r["history"]]
        tta = next((t for t, a in zip(r["times"], accs, strict=True) if a >= args.target), None)
        rel = f"{tps / base_tps:>8.2f}x" if base_tps else "     n/a"
        print(f"{mode:<14} {size:>5} {r['samples'] / r['wall']:>10.0f} {tps * 1e6:>10.1f} {rel} {c:>10.2f} "
              f"{m:>8.2f} {w:>8.2f} {f'{tta:.1f}' if tta else '-':>10} {max(accs):>12.3f}")
    if base is None:
        return
    one = max(row.get("val_accuracy", 0.0) for row in base["history"])
    print(f"\nbest val_accuracy at equal epochs ({args.epochs}), every mode with the one process's optimizer and rate")
    print(f"{'mode':<10} {'ranks':>5} {'group':>7} {'one proc':>8} {'points':>7}")
    for mode, size, r in runs:
        if mode != "single":
            best = max(row.get("val_accuracy", 0.0) for row in r["history"])
            print(f"{mode:<10} {size:>5} {best:>7.3f} {one:>8.3f} {100 * (best - one):>+7.1f}")


if __name__ == "__main__":
    main()

"""k-fold trials (`objective.folds`) trained at once on sub-groups, or in turn by groups of one.

    python bench/kfold.py [--np 4] [--folds 3] [--trials 12] [--epochs 10] [--keep DIR]

Runs the MNIST-1D MLP example (searchspaces/mnist1d.yaml, with `objective.folds`, a budget of
--trials trials of --epochs epochs, no time limit and no early stopping) twice under
`mpiexec -n NP`, one run after the other so they do not share the cores:

- `groups of NP-1`: one group of every training rank; it splits into one sub-group a fold and
  trains the folds of a trial at once;
- `groups of 1`: NP-1 groups of one rank; each trains its trial's folds one after another.

Both layouts train the same number of folds on the same ranks. It reads each run's journal and
prints a table: the search's wall time (first trial out to last result in), trials per hour, the
median trial's length, and the best mean val_accuracy. OMP_NUM_THREADS=1 and every rank one
TensorFlow thread (mpiopt's default). Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = Path(sys.executable).parent / "mpiexec"


def write_space(folder: Path, group_size: int, folds: int, trials: int, epochs: int) -> Path:
    text = (ROOT / "searchspaces" / "mnist1d.yaml").read_text()
    text = text.replace("../examples/", f"{ROOT}/examples/")
    text = text.replace("  maximize: val_accuracy", f"  maximize: val_accuracy\n  folds: {folds}")
    text = text.replace("trials: 12", f"trials: {trials}").replace("epochs: 15", f"epochs: {epochs}")
    text = text.replace("group_size: 1", f"group_size: {group_size}")
    text = text.replace("  early_stopping: {monitor: val_accuracy, patience: 4}\n", "")
    text = text.replace("  time_limit: 300\n", "")
    path = folder / f"kfold_groups_of_{group_size}.yaml"
    path.write_text(text)
    return path


def run(space: Path, out: Path, ranks: int) -> float:
    """Run the search to its end; the job's wall time in seconds (TensorFlow's start-up included)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    t0 = time.perf_counter()
    with open(out.parent / f"{out.name}.log", "w") as log:
        subprocess.run([str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "mpiopt", "search", str(space),
                        "--out", str(out)], stdout=log, stderr=subprocess.STDOUT, env=env, check=True)
    return time.perf_counter() - t0


def summarize(out: Path) -> dict:
    events = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines() if line.strip()]
    starts = [e["time"] for e in events if e.get("event") == "start"]
    finished = [e for e in events if e.get("event") == "finish"]
    done = [e for e in finished if e["status"] == "completed"]
    span = max(e["end"] for e in finished) - min(starts)
    return {"trials": len(finished), "completed": len(done), "span_s": span,
            "per_hour": len(finished) / (span / 3600.0),
            "median_trial_s": statistics.median(e["end"] - e["start"] for e in finished),
            "best": max((e["objective"] for e in done), default=float("nan")),
            "best_std": max(done, key=lambda e: e["objective"]).get("objective_std") if done else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--keep", type=Path, help="keep the run directories here (default: a temporary folder)")
    args = ap.parse_args()
    workers = args.np - 1
    layouts = [(workers, "folds at once on sub-groups"), (1, "folds in turn")]
    print(f"MNIST-1D MLP, {args.folds} folds, {args.trials} trials of {args.epochs} epochs, mpiexec -n {args.np}, "
          f"{os.cpu_count()} cores\n")
    print("| layout | groups | trials (completed) | search wall s | job wall s | trials per hour "
          "| median trial s | best mean val_accuracy (std) |")
    print("|---" * 8 + "|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for group_size, how in layouts:
            space = write_space(folder, group_size, args.folds, args.trials, args.epochs)
            out = folder / f"groups_of_{group_size}"
            job_s = run(space, out, args.np)
            s = summarize(out)
            print(f"| groups of {group_size}: {how} | {workers // group_size} | {s['trials']} ({s['completed']}) "
                  f"| {s['span_s']:.1f} | {job_s:.1f} | {s['per_hour']:.0f} | {s['median_trial_s']:.1f} "
                  f"| {s['best']:.4f} ({s['best_std']:.4f}) |", flush=True)


if __name__ == "__main__":
    main()

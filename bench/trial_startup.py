"""What a trial costs beyond its epochs: one process trains the MNIST-1D CNN example again and again.

    python bench/trial_startup.py [--epochs 1 5] [--repeats 8] [--space searchspaces/mnist1d_cnn.yaml]

Each trial of a search builds its model and traces its training and validation steps anew; under
a scheduler most trials train one epoch, so this start-up is most of their cost. Trains the same
configuration (--repeats times, the first left out: it also imports and loads) for each of
--epochs, in one process with one TensorFlow thread (a group of one rank), without early
stopping, and prints the median wall and CPU time of a trial, and the start-up: the time of a
1-epoch trial less an epoch's (from the slope between the shortest and longest --epochs).
Asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the first configuration of bench/data/mnist1d_cnn_curves.jsonl, whose epochs that file times under Keras' fit
PARAMS = {"learning_rate": 0.002288113668475526, "filters": 35, "kernel_size": 6, "blocks": 2, "units": 59,
          "batch_size": 64}


def time_trials(space: Path, epochs: int, repeats: int, out: Path) -> tuple[float, float, float]:
    """(median wall s, median CPU s, val_accuracy) of `repeats` - 1 trials of `epochs` epochs."""
    from mpiopt.config import load_config
    from mpiopt.objective import TrialRunner

    cfg = load_config(space)
    cfg.training["epochs"] = epochs
    cfg.training.pop("early_stopping", None)
    runner = TrialRunner(cfg)
    walls, cpus = [], []
    for i in range(repeats):
        folder = out / f"{epochs}_{i}"
        folder.mkdir(parents=True)
        t, c = time.perf_counter(), time.process_time()
        result = runner.run(PARAMS, None, trial=i, trial_dir=folder)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
        if result.status != "completed":
            raise SystemExit(f"trial {i} of {epochs} epochs: {result.status}: {result.error}")
    return statistics.median(walls[1:]), statistics.median(cpus[1:]), result.metrics["val_accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--space", type=Path, default=ROOT / "searchspaces" / "mnist1d_cnn.yaml")
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error("--repeats: at least 2 (the first trial is left out)")
    os.environ.update(TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1", OMP_NUM_THREADS="1")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for epochs in args.epochs:
            rows[epochs] = time_trials(args.space, epochs, args.repeats, Path(tmp))
    print(f"{args.space.name}, {PARAMS}, one process, median of {args.repeats - 1} trials\n")
    print("| epochs | wall s | CPU s | val_accuracy |\n| --- | --- | --- | --- |")
    for epochs, (wall, cpu, acc) in rows.items():
        print(f"| {epochs} | {wall:.2f} | {cpu:.2f} | {acc:.3f} |")
    low, high = min(rows), max(rows)
    if high > low:
        per_epoch = (rows[high][0] - rows[low][0]) / (high - low)
        print(f"\nan epoch {per_epoch:.2f} s; start-up {rows[low][0] - low * per_epoch:.2f} s a trial")


if __name__ == "__main__":
    sys.exit(main())

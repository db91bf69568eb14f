"""A real search with and without a scheduler, for the same wall time: the MNIST-1D CNN example.

    python bench/scheduler_run.py [--np 5] [--minutes 8] [--epochs 27] [--schedulers none asha]
                                  [--targets 0.94 0.955] [--keep DIR]

Runs `mpiexec -n NP mpiopt search` on searchspaces/mnist1d_cnn.yaml (the example space, with
`training.epochs` set to --epochs, a trial budget it cannot finish, and `search.scheduler` set,
with min_epochs 1 and reduction_factor 3), stops it with SIGTERM after --minutes (as a batch
system's time limit would), and reads its journal: trials started, completed and pruned or paused,
epochs trained in all, the best val_accuracy of a trial trained to its end, and the time (from the
search's first trial) at which that best first reached each of --targets. Runs one search after another, so
they do not share the cores. Prints a table; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = Path(sys.executable).parent / "mpiexec"


def write_space(folder: Path, scheduler: str, epochs: int) -> Path:
    text = (ROOT / "searchspaces" / "mnist1d_cnn.yaml").read_text()
    text = text.replace("../examples/", f"{ROOT}/examples/").replace("trials: 12", "trials: 100000")
    text = text.replace("epochs: 10", f"epochs: {epochs}")
    text = text.replace("  seed: 0", f"  seed: 0\n  scheduler: {scheduler}\n  min_epochs: 1\n  reduction_factor: 3")
    path = folder / f"cnn_{scheduler}.yaml"
    path.write_text(text)
    return path


def run(space: Path, out: Path, ranks: int, seconds: float) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    with open(out.parent / f"{out.name}.log", "w") as log:
        job = subprocess.Popen([str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "mpiopt", "search", str(space),
                                "--out", str(out)], stdout=log, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
        try:
            job.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGTERM)
            job.wait(timeout=120)


def summarize(out: Path, targets: list[float]) -> dict:
    events = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()[1:] if line.strip()]
    t0 = min(e["time"] for e in events if e["event"] == "start")
    finished = [e for e in events if e["event"] == "finish"]
    done = [e for e in finished if e["status"] == "completed" and e.get("objective") is not None]
    last = {e["trial"]: e["status"] for e in finished}
    by_end = sorted(done, key=lambda e: e["end"])
    reached = [next((e["end"] - t0 for e in by_end if e["objective"] >= target), None) for target in targets]
    return {"started": len({e["trial"] for e in events if e["event"] == "start"}),
            "completed": len(done), "stopped": sum(s in ("pruned", "paused") for s in last.values()),
            "epochs": sum(1 for e in events if e["event"] == "report"),
            "best": max((e["objective"] for e in done), default=float("nan")),
            "to_target": reached}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=5)
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--epochs", type=int, default=27)
    ap.add_argument("--schedulers", nargs="+", default=["none", "asha"])
    ap.add_argument("--targets", type=float, nargs="+", default=[0.94, 0.955])
    ap.add_argument("--keep", type=Path, help="keep the run directories here (default: a temporary folder)")
    args = ap.parse_args()
    print(f"MNIST-1D CNN, {args.epochs} epochs, mpiexec -n {args.np}, {args.minutes:g} min each, "
          f"{os.cpu_count()} cores\n")
    print("| scheduler | trials started | trained to the end | pruned or paused | epochs trained "
          "| best val_accuracy | " + " | ".join(f"first >= {t} after" for t in args.targets) + " |")
    print("|---" * (6 + len(args.targets)) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for scheduler in args.schedulers:
            out = folder / f"run_{scheduler}"
            run(write_space(folder, scheduler, args.epochs), out, args.np, args.minutes * 60)
            r = summarize(out, args.targets)
            reached = " | ".join(f"{s:.0f} s" if s is not None else "not reached" for s in r["to_target"])
            print(f"| {scheduler} | {r['started']} | {r['completed']} | {r['stopped']} | {r['epochs']} "
                  f"| {r['best']:.3f} | {reached} |", flush=True)


if __name__ == "__main__":
    main()

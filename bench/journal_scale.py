"""A 100,000-trial search directory: resume, results, load_results, status and report, timed.

    python bench/journal_scale.py [--trials 100000] [--keep DIR]

Writes the run directory of a finished Hartmann-6 search (`algorithm: bayesian`, the default GP,
a function objective) with `--trials` trials in its journal, as the coordinator writes them (a
start and a finish event a trial, random points, their real values), then times, each in a fresh
process as a user would run it:

  resume      `mpiopt search SPACE --resume --trials N+1` (one process): from the command's start
              to the new trial's start event in the journal (the search ready to hand out), and
              to the command's end
  results     `mpiopt results DIR` (the whole command, printing the best trials)
  load        `mpiopt.load_results(DIR)` (the call alone, in a process that imported mpiopt)
  status      `mpiopt status DIR`
  report      `mpiopt report DIR` (every figure written)

Prints a table; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "spaces"))
from scale_functions import FILE as FUNCTIONS  # noqa: E402
from scale_functions import hartmann6  # noqa: E402

MPIOPT = [sys.executable, "-m", "mpiopt"]
SPACE = """name: big
objective: {{function: {functions}:hartmann6}}
parameters:
{params}
search: {{trials: {trials}, seed: 0}}
"""


def write_run(where: Path, trials: int) -> Path:
    """A real search of 20 trials, then its journal extended to `trials` (same event format)."""
    params = "\n".join(f"  x{i}: {{type: real, low: 0.0, high: 1.0}}" for i in range(1, 7))
    (where / "space.yaml").write_text(SPACE.format(functions=FUNCTIONS, params=params, trials=20))
    subprocess.run([*MPIOPT, "search", "space.yaml"], cwd=where, check=True, capture_output=True)
    run = where / "runs" / "big"
    rng = np.random.default_rng(0)
    t = time.time() - trials * 0.015
    with open(run / "trials.jsonl", "a") as f:
        for n in range(20, trials):
            p = {f"x{i}": float(v) for i, v in enumerate(rng.random(6), start=1)}
            y = hartmann6(p)
            f.write(json.dumps({"event": "start", "trial": n, "params": p, "group": 0, "ranks": 1, "time": t},
                               separators=(",", ":")) + "\n")
            f.write(json.dumps({"event": "finish", "trial": n, "status": "completed", "objective": y,
                                "metrics": {"objective": y}, "epochs": None, "error": None, "start": t,
                                "end": t + 0.01, "wait_s": 0.001, "dispatch_s": 0.001, "resumed_s": None,
                                "rung": None}, separators=(",", ":")) + "\n")
            t += 0.015
    (where / "space.yaml").write_text(SPACE.format(functions=FUNCTIONS, params=params, trials=trials))
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("trials: 20\n", f"trials: {trials}\n"))
    return run


def timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return time.perf_counter() - t0, p


def time_resume(where: Path, run: Path, trials: int) -> tuple[float, float]:
    """(seconds to the new trial's start event, seconds to the end) of a resume with one more trial."""
    t0 = time.time()
    wall, _ = timed([*MPIOPT, "search", "space.yaml", "--resume", "--trials", str(trials + 1)], where)
    with open(run / "trials.jsonl", "rb") as f:
        f.seek(max(0, os.path.getsize(run / "trials.jsonl") - 20000))
        events = [json.loads(line) for line in f.read().splitlines()[1:]]
    start = next(e["time"] for e in events if e.get("event") == "start" and e["trial"] == trials)
    return start - t0, wall


def time_load(run: Path) -> float:
    code = (f"import time, mpiopt; t = time.perf_counter(); df = mpiopt.load_results({str(run)!r}); "
            "print(time.perf_counter() - t, len(df))")
    _, p = timed([sys.executable, "-c", code], run)
    return float(p.stdout.split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100000)
    ap.add_argument("--keep", help="write the run directory here and keep it")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(a.keep or tmp)
        where.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        run = write_run(where, a.trials)
        size = os.path.getsize(run / "trials.jsonl") / 2**20
        print(f"{a.trials} trials, journal {size:.0f} MiB, written in {time.perf_counter() - t0:.0f} s", flush=True)
        rows = [("load", f"mpiopt.load_results: {time_load(run):.2f} s")]
        wall, p = timed([*MPIOPT, "results", str(run)], where)
        rows.append(("results", f"mpiopt results: {wall:.2f} s ({len(p.stdout.splitlines())} lines)"))
        wall, _ = timed([*MPIOPT, "status", str(run)], where)
        rows.append(("status", f"mpiopt status: {wall:.2f} s"))
        wall, _ = timed([*MPIOPT, "report", str(run)], where)
        rows.append(("report", f"mpiopt report: {wall:.2f} s"))
        ready, wall = time_resume(where, run, a.trials)
        rows.append(("resume", f"search --resume: ready to hand out after {ready:.2f} s, one more trial and "
                               f"done in {wall:.2f} s"))
        for name, line in rows:
            print(f"  {name:<8} {line}", flush=True)
        if not math.isfinite(ready):
            raise SystemExit("no new trial")


if __name__ == "__main__":
    main()

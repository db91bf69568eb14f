"""Medians over seeds of bench/scale.py: the default search against `ET` and random at scale.

    python bench/scale_seeds.py --groups 512 --searches default ET random --functions hartmann6 ackley20
                                --seeds 10 [--first-seed 0] [--wall S] [--out runs.jsonl]
    python bench/scale_seeds.py --summary runs-a.jsonl runs-b.jsonl ...     # the table only

Runs `bench/scale.py --json` once per (function, search, seed), each in a fresh process one after
the other (runs share the machine's cores, so never two at once in one invocation), appends each
run's JSON object to `--out`, and prints per group count, function and search: the median best
value [25th, 75th percentile] over seeds (and after 1,000 and 5,000 trials), the median trials
finished, utilization, dispatch p99 and CPU a trial, and the largest peak memory. `--summary`
reads such files (several invocations, e.g. one per search, can be merged) and prints the same
table. `--wall` is passed to scale.py (its default: 1.5 x trials / 68 s). Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

SCALE = Path(__file__).resolve().parent / "scale.py"


def run_one(groups: int, trials: int, search: str, function: str, seed: int, wall: float | None) -> dict:
    cmd = [sys.executable, str(SCALE), "--groups", str(groups), "--trials", str(trials), "--search", search,
           "--function", function, "--seed", str(seed), "--json"]
    if wall:
        cmd += ["--wall", str(wall)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()
    print(out[0], flush=True)  # scale.py's one-line summary of the run
    return json.loads(out[-1])


def read_runs(paths: list[Path]) -> list[dict]:
    return [json.loads(line) for p in paths for line in p.read_text().splitlines() if line.strip()]


def median_of(runs: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def best_at(runs: list[dict], trials: int) -> str:
    """The median best after `trials` trials, or "" where a run did not get that far."""
    values = [r["best_at"].get(str(trials)) for r in runs]
    return "" if None in values else f"{np.median(values):.4g}"


def summary_rows(runs: list[dict]) -> list[str]:
    by_case: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        by_case[(r["groups"], r["function"], r["search"])].append(r)
    rows = ["| groups | function | search | seeds | best: median [25th, 75th] | @1k | @5k | trials done | utilization "
            "| dispatch p99 (median, max) | CPU a trial | peak RSS (max) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (groups, function, search), rs in sorted(by_case.items()):
        best = np.array([r["best"] for r in rs])
        p99 = np.array([r["dispatch_p99_ms"] for r in rs])
        rows.append(
            f"| {groups:,} | {function} | {search} | {len(rs)} | {np.median(best):.4g} "
            f"[{np.percentile(best, 25):.4g}, {np.percentile(best, 75):.4g}] | {best_at(rs, 1000)} "
            f"| {best_at(rs, 5000)} | {median_of(rs, 'finished'):,.0f} "
            f"| {median_of(rs, 'utilization'):.3f} | {np.median(p99):.2f}, {p99.max():.2f} ms "
            f"| {median_of(rs, 'cpu_ms_per_trial'):.1f} ms | {max(r['peak_rss_mb'] for r in rs):.0f} MB |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=512)
    ap.add_argument("--trials", type=int, default=20000)
    ap.add_argument("--searches", nargs="+", default=["default", "ET", "random"])
    ap.add_argument("--functions", nargs="+", default=["hartmann6", "ackley20"])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--wall", type=float, help="each run's wall budget in seconds (scale.py's --wall)")
    ap.add_argument("--out", type=Path, help="append each run's JSON object to this file")
    ap.add_argument("--summary", type=Path, nargs="+", help="only print the table of these files' runs")
    a = ap.parse_args()
    if a.summary:
        print("\n".join(summary_rows(read_runs(a.summary))))
        return
    runs = []
    for function in a.functions:
        for search in a.searches:
            for seed in range(a.first_seed, a.first_seed + a.seeds):
                r = run_one(a.groups, a.trials, search, function, seed, a.wall)
                runs.append(r)
                if a.out:
                    with a.out.open("a") as f:
                        f.write(json.dumps(r) + "\n")
    print("\n".join(summary_rows(runs)))


if __name__ == "__main__":
    main()

"""The coordinator under load: group utilization and dispatch latency, ahead-of-time vs synchronous.

    python bench/coordinator.py [--layouts 64x1 33x1 33x4] [--sleeps 0.5 2] [--trials N]
                                [--modes ahead sync] [--scheduler none|asha|hyperband|median] [--keep DIR]
                                [--nodes 1 4] [--own-core] [--repeats N]

Runs `mpiexec -n RANKS mpiopt search bench/spaces/sleepy_hartmann6.yaml` (Hartmann-6 behind a
sleep of 0.5 or 2 s, GP + gp_hedge, 10 initial points) for each layout (RANKS x group size) and
sleep, in two modes in the same run:

  ahead  mpiopt's default: suggestions computed in a background thread, handed out at once, and
         sent to a group shortly before its trial is expected to end where serving a burst of
         results would keep groups waiting (see `SendAhead.lead` in mpiopt/_send_ahead.py)
  sync   MPIOPT_PREFETCH=0 MPIOPT_SEND_AHEAD=0: tell and ask on every result, the group waiting
         (MPI Opt's way)

With `--scheduler asha` (or hyperband, median) each trial reports 9 steps of its sleep, a value
falling towards Hartmann-6's, and the scheduler stops trials at its rungs: the coordinator then
judges a report every 1/9 of a trial besides handing out trials.

The budget is a whole number of trials per group, at least 300 (315 for 63 groups, 320 for 32,
304 for 8) unless --trials says otherwise: with a last partial wave, groups that drew no trial in it
sit idle at the end whatever the coordinator does (315 trials on 32 groups leave 5 groups idle for
the last half second, 1.5% of utilization), and that is the budget's doing, not the coordinator's.

The run directory is read back (`mpiopt.analysis.load_timeline`, `timeline`): group utilization (busy time over
groups x active time), how many trials were sent ahead and how many after a result, the
coordinator's dispatch latency (result received -> next trial sent) p50/p99 over the hand-outs
that followed a result, the start-up wave (search start -> the last
group's first trial sent), the group's wait (result sent -> next trial received, MPI included) p50/p99, the
coordinator process's CPU time (both threads), and where the suggestions came from.
With `--nodes K` (K > 1) the ranks are spread over K simulated nodes (`mpiexec -launcher fork
-hosts node0:A,node1:B,...`, the first node taking the remainder): groups are then planned node by
node and the coordinator's messages to all but its own node take MPICH's network path.
With `--own-core` the coordinator (rank 0) is bound to core 0 and the groups' ranks to the other
cores (`mpiexec -bind-to user:...`), as on a cluster node where each rank has a core: without it,
the coordinator's latency on an oversubscribed machine is mostly its wait for a core.
With `--repeats N` each configuration runs N times, a row each, then a pooled row: the p99 of
one run is over its 2-700 hand-outs after a result (sending ahead serves the others), so over
few it is one of the slowest two or three; pooled, it is over all of them.
Prints a table; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MPIEXEC = Path(sys.executable).parent / "mpiexec"
SPACE = ROOT / "bench" / "spaces" / "sleepy_hartmann6.yaml"


def run(ranks: int, size: int, sleep: float, trials: int, mode: str, out: Path, scheduler: str = "none",
        nodes: int = 1, own_core: bool = False) -> dict:
    from mpiopt.analysis import dispatch_after_result, load_timeline, timeline

    env = dict(os.environ, MPIOPT_BENCH_SLEEP=str(sleep), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if mode == "sync":
        env["MPIOPT_PREFETCH"] = "0"
        env["MPIOPT_SEND_AHEAD"] = "0"
    out.mkdir(parents=True)
    space = out.parent / f"{out.name}.yaml"  # the space with this layout's group size, beside its objective
    text = SPACE.read_text().replace("group_size: 1", f"group_size: {size}")
    if scheduler != "none":  # trials report 9 steps, judged by the scheduler
        text = (text.replace("hartmann6.py:hartmann6", "hartmann6.py:hartmann6_curve")
                .replace("  seed: 0", f"  seed: 0\n  scheduler: {scheduler}\n  min_epochs: 1\n  reduction_factor: 3")
                .replace("  group_size:", "  epochs: 9\n  group_size:"))
    space.write_text(text)
    obj = out.parent / "sleepy_hartmann6.py"
    if not obj.exists():
        obj.write_text((SPACE.parent / "sleepy_hartmann6.py").read_text())
    cmd = [str(MPIEXEC), *_hosts(ranks, nodes), *_binding(ranks, own_core), "-n", str(ranks), sys.executable,
           "-m", "mpiopt", "search", str(space), "--out", str(out / "run"), "--trials", str(trials)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    df = load_timeline(out / "run")
    _, summary = timeline(df)
    log = (out / "run" / "search.log").read_text()  # the coordinator's own figures are written there
    cpu = re.search(r"coordinator CPU ([0-9.]+) s \(([0-9]+)% of one core\)", log)
    search = re.search(r"search finished in ([0-9.]+) s", log)
    best = re.search(r"best objective = ([0-9.eE+-]+)", p.stdout)
    src = re.search(r"suggestions: (\d+) from the surrogate .*?(\d+) waits for a fresher round .*?last round (\d+) ms"
                    r".*?(?:p50 (\d+), max (\d+))?\), (\d+) from the initial design, (\d+) fallback", log)
    out_row = {"wall": wall, "search": float(search.group(1)), "best": float(best.group(1)), **summary,
                "cpu": float(cpu.group(1)), "cpu_pct": int(cpu.group(2)),
                "model": int(src.group(1)) if src else None, "waits": src.group(2) if src else None,
                "round_ms": src.group(3) if src else None, "stale": src.group(4) if src else None,
                "fallback": int(src.group(7)) if src else None, "after_ms": list(dispatch_after_result(df))}
    fresh = re.search(r"(\d+) waits for a round with the latest result", log)  # long trials only
    if fresh and out_row["waits"] is not None:
        out_row["waits"] += f" + {fresh.group(1)} fresh"
    return out_row


def _hosts(ranks: int, nodes: int) -> list[str]:
    """mpiexec's arguments that spread `ranks` over `nodes` simulated nodes (none for one node)."""
    if nodes <= 1:
        return []
    base, extra = divmod(ranks, nodes)
    counts = [base + extra] + [base] * (nodes - 1)
    return ["-launcher", "fork", "-hosts", ",".join(f"node{i}:{n}" for i, n in enumerate(counts))]


def _binding(ranks: int, own_core: bool) -> list[str]:
    """mpiexec's arguments that give rank 0 (the coordinator) core 0 to itself and spread the
    groups' ranks over the other cores, as on a cluster node where every rank has a core."""
    if not own_core:
        return []
    others = list(range(1, os.cpu_count() or 2)) or [0]
    cores = ["0"] + [str(others[i % len(others)]) for i in range(ranks - 1)]
    return ["-bind-to", "user:" + ",".join(cores)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layouts", nargs="+", default=["64x1", "33x1", "33x4"], help="RANKSxGROUP_SIZE")
    ap.add_argument("--sleeps", type=float, nargs="+", default=[0.5, 2.0])
    ap.add_argument("--trials", type=int, help="trials per run (default: the least multiple of the groups >= 300)")
    ap.add_argument("--modes", nargs="+", default=["ahead", "sync"])
    ap.add_argument("--scheduler", default="none", help="none, or asha | hyperband | median: trials report 9 steps")
    ap.add_argument("--keep", type=Path, help="keep the run directories under this folder (default: a temporary one)")
    ap.add_argument("--nodes", type=int, nargs="+", default=[1], help="simulated nodes to spread the ranks over")
    ap.add_argument("--own-core", action="store_true",
                    help="bind the coordinator to core 0 and the groups to the other cores")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each configuration, then a pooled row")
    args = ap.parse_args()
    print(f"Hartmann-6 behind a sleep, GP + gp_hedge, scheduler {args.scheduler}; {os.cpu_count()} cores\n")
    print("| nodes | ranks | groups | trials | trial s | mode | search s | utilization | sent ahead / after a result "
          "| dispatch p50 / p99 ms after a result | group wait p50 / p99 ms | first wave ms "
          "| coordinator CPU s (% core) | model / fallback suggestions (results newer than the fit, p50) "
          "| waits for a round / last round ms | best |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        if args.keep:
            tmp = args.keep
        for layout in args.layouts:
            ranks, size = (int(v) for v in layout.split("x"))
            groups = (ranks - 1) // size
            trials = args.trials or groups * -(-300 // groups)
            for sleep, mode, nodes in [(s, m, k) for s in args.sleeps for m in args.modes for k in args.nodes]:
                pooled = []
                for rep in range(args.repeats):
                    out = Path(tmp) / f"{layout}-{sleep}-{mode}-{nodes}" / str(rep)
                    r = run(ranks, size, sleep, trials, mode, out, args.scheduler, nodes, args.own_core)
                    pooled.append(r)
                    _print_row(r, nodes, ranks, groups, size, trials, sleep, mode)
                if args.repeats > 1:
                    _print_pooled(pooled, nodes, ranks, groups, size, trials, sleep, mode)


def _print_row(r: dict, nodes, ranks, groups, size, trials, sleep, mode) -> None:
    sugg = f"{r['model']} / {r['fallback']} ({r['stale']})" if r["model"] is not None else "on demand"
    rounds = f"{r['waits']} / {r['round_ms']}" if r["model"] is not None else "-"
    nan = float("nan")
    print(f"| {nodes} | {ranks} | {groups} x {size} | {trials} | {sleep:g} | {mode} | {r['search']:.1f} "
          f"| {r['utilization']:.3f} | {r.get('sent_ahead', 0)} / {r.get('sent_after', 0)} "
          f"| {r.get('dispatch_p50_ms', nan):.2f} / {r.get('dispatch_p99_ms', nan):.2f} "
          f"| {r['wait_p50_ms']:.2f} / {r['wait_p99_ms']:.2f} | {r.get('first_wave_ms', nan):.1f} "
          f"| {r['cpu']:.1f} ({r['cpu_pct']}%) "
          f"| {sugg} | {rounds} | {r['best']:.3f} |", flush=True)


def _print_pooled(runs: list[dict], nodes, ranks, groups, size, trials, sleep, mode) -> None:
    """One row for all runs: the dispatch percentiles over every hand-out after a result, and in
    how many runs the run's own p99 was under 10 ms."""
    ms = np.array([v for r in runs for v in r["after_ms"]])
    p50, p99 = np.percentile(ms, [50, 99]) if len(ms) else (float("nan"), float("nan"))
    under = sum(1 for r in runs if r.get("dispatch_p99_ms", 0.0) < 10.0)

    def med(key: str) -> float:
        return float(np.median([r[key] for r in runs]))

    print(f"| {nodes} | {ranks} | {groups} x {size} | {trials} | {sleep:g} | {mode}, {len(runs)} runs pooled "
          f"| {med('search'):.1f} (median) | {med('utilization'):.3f} (median) "
          f"| {sum(r.get('sent_ahead', 0) for r in runs)} / {len(ms)} "
          f"| {p50:.2f} / {p99:.2f} (max {ms.max() if len(ms) else float('nan'):.2f}; run p99 under 10 ms in "
          f"{under} of {len(runs)}) | | | | | | |", flush=True)

if __name__ == "__main__":
    main()

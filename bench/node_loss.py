"""A node lost mid-search with the survivors kept alive: how long until its trials run elsewhere.

    python bench/node_loss.py [--kills 10] [--hosts nodeA:3,nodeB:2] [--node 1] [--sleep 0.5]

Each kill is one search (Hartmann-6 behind a sleep, bench/spaces/sleepy_hartmann6.yaml, groups of
one) under `mpiexec -disable-auto-cleanup -launcher fork -hosts HOSTS`, i.e. simulated nodes on this
machine. Once 20 trials have finished, the ranks of host number --node get SIGKILL (its MPICH proxy
stays, as a dead node's would not matter). From the journal and the log it measures, per kill:

- noticed: the kill to the coordinator's "group G lost" line (log time, 1 s resolution: the
  figure is the whole second after the kill in which the line was written);
- rerun: the kill to the first new start event of a trial the lost groups held (journal time);
- the search's exit code (1: it finished but lost groups), trials recorded, and duplicates.

Prints one row a kill and the median; asserts nothing.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = Path(sys.executable).parent / "mpiexec"
MPIOPT = Path(sys.executable).parent / "mpiopt"
SPACE = ROOT / "bench" / "spaces" / "sleepy_hartmann6.yaml"


def events(run: Path) -> list[dict]:
    path = run / "trials.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return out


def kill_host(job: subprocess.Popen, host: int) -> int:
    """SIGKILL the ranks under the MPICH proxy of host number `host`; returns how many."""
    proxies = subprocess.run(["pgrep", "-P", str(job.pid), "-f", f"hydra_pmi_proxy.*--proxy-id {host}$"],
                             capture_output=True, text=True).stdout.split()
    ranks = [int(p) for q in proxies
             for p in subprocess.run(["pgrep", "-P", q], capture_output=True, text=True).stdout.split()]
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    return len(ranks)


def one_kill(folder: Path, hosts: str, host: int, sleep: float, trials: int) -> dict:
    folder.mkdir(parents=True)
    (folder / "sleepy_hartmann6.py").write_text((SPACE.parent / "sleepy_hartmann6.py").read_text())
    space = folder / "space.yaml"
    space.write_text(SPACE.read_text())
    run = folder / "run"
    n = sum(int(h.split(":")[1]) for h in hosts.split(","))
    env = {**os.environ, "MPIOPT_BENCH_SLEEP": str(sleep)}
    cmd = [str(MPIEXEC), "-disable-auto-cleanup", "-launcher", "fork", "-hosts", hosts, "-n", str(n), str(MPIOPT),
           "search", str(space), "--out", str(run), "--trials", str(trials)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while sum(e.get("event") == "finish" for e in events(run)) < 20:
        time.sleep(0.1)
    killed = time.time()
    ranks = kill_host(job, host)
    _, err = job.communicate(timeout=600)
    evs = events(run)
    held = {}  # trial -> group, for the trials started before the kill and not finished by then
    for e in evs:
        if e.get("event") == "start" and e["time"] < killed:
            held[e["trial"]] = e["group"]
        if e.get("event") == "finish" and e.get("end", 0) < killed:
            held.pop(e["trial"], None)
    lost = {int(g) for g in re.findall(r"group (\d+) lost:", err)}
    lost_trials = [t for t, g in held.items() if g in lost]
    reruns = [e["time"] for e in evs if e.get("event") == "start" and e["time"] > killed and e["trial"] in lost_trials]
    stamps = [line[:8] for line in err.splitlines() if " lost: " in line]
    noticed = None
    if stamps:
        day = datetime.datetime.fromtimestamp(killed).date()
        when = datetime.datetime.combine(day, datetime.time.fromisoformat(stamps[0])).timestamp()
        noticed = when + 1.0 - killed  # the line's second ends at most this long after the kill
    finishes = [e["trial"] for e in evs if e.get("event") == "finish"]
    return {"ranks": ranks, "lost": sorted(lost), "noticed": noticed,
            "rerun": min(reruns) - killed if reruns else None, "code": job.returncode,
            "trials": len(set(finishes)), "duplicates": len(finishes) - len(set(finishes))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--hosts", default="nodeA:3,nodeB:2")
    ap.add_argument("--node", type=int, default=1, help="the host (by its place in --hosts) whose ranks die")
    ap.add_argument("--sleep", type=float, default=0.5, help="seconds a trial sleeps")
    ap.add_argument("--trials", type=int, default=80)
    args = ap.parse_args()
    print(f"hosts {args.hosts}, host {args.node} killed after 20 trials, trials of {args.sleep} s, "
          f"budget {args.trials}\n")
    print("| kill | ranks killed | lost groups | noticed within s | lost trial running again after s | exit code "
          "| trials recorded | duplicates |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.kills):
            r = one_kill(Path(tmp) / str(k), args.hosts, args.node, args.sleep, args.trials)
            rows.append(r)
            fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
            print(f"| {k + 1} | {r['ranks']} | {', '.join(map(str, r['lost']))} | {fmt(r['noticed'])} "
                  f"| {fmt(r['rerun'])} | {r['code']} | {r['trials']} | {r['duplicates']} |", flush=True)
    for key in ("noticed", "rerun"):
        values = [r[key] for r in rows if r[key] is not None]
        if values:
            print(f"\n{key}: median {statistics.median(values):.1f} s, max {max(values):.1f} s "
                  f"over {len(values)} kills")


if __name__ == "__main__":
    main()

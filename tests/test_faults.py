"""Fault injection: kill -9 the whole job, the coordinator alone, or one group rank, at random
moments, again and again; resume each time; the search must end with exactly its budget."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mpiopt
from conftest import MPIEXEC
from mpiopt.journal import read_journal, replay

pytestmark = pytest.mark.mpi

SPACE = """
name: faults
objective: {function: objectives.py:branin}
parameters:
  x: {type: real, low: -5.0, high: 10.0}
  y: {type: real, low: 0.0, high: 15.0}
search: {initial_points: 4, trials: 60, seed: 0}
"""


def _ranks(tmp_path):
    """pid of the coordinator (from the run directory's lock; None while the lock is a killed
    job's) and of the other ranks."""
    lock = tmp_path / "runs" / "faults" / ".lock"
    try:  # read once: a starting search truncates a killed one's lock before it writes its own
        words = lock.read_text().split()
    except FileNotFoundError:
        words = []
    coordinator = int(words[1]) if len(words) > 1 else None
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    ranks = [int(line.split()[0]) for line in out.splitlines()
             if "-m mpiopt search" in line and "mpiexec" not in line and str(tmp_path) in line]
    if coordinator not in ranks:
        return None, ranks
    return coordinator, [p for p in ranks if p != coordinator]


def _wait_for_search(tmp_path, job, timeout=60.0):
    """The ranks' pids once the coordinator holds the run directory's lock and the journal holds
    a trial (start-up takes seconds more on a loaded machine); (None, []) if the job ends first.
    A job killed before its first trial leaves nothing to resume, which test_cli covers."""
    journal = tmp_path / "runs" / "faults" / "trials.jsonl"
    deadline = time.monotonic() + timeout
    while job.poll() is None and time.monotonic() < deadline:
        coordinator, others = _ranks(tmp_path)
        if coordinator is not None and others and journal.exists() and journal.stat().st_size:
            return coordinator, others
        time.sleep(0.1)
    return None, []


def test_repeated_kills_lose_and_duplicate_nothing(write_yaml, tmp_path):
    path = write_yaml(SPACE)
    journal = tmp_path / "runs" / "faults" / "trials.jsonl"
    rng = random.Random(7)
    env = {**os.environ, "MPIOPT_TEST_SLEEP": "0.4"}
    seen: dict[int, float] = {}  # objectives of finished trials: they must never change
    kinds = ["job", "coordinator", "group rank", "job", "group rank", "coordinator"]
    injected: list[str] = []
    for cycle, kind in enumerate(kinds):
        args = [str(MPIEXEC), "-n", "4", sys.executable, "-m", "mpiopt", "search", str(path)]
        if cycle:
            args.append("--resume")
        job = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
        coordinator, others = _wait_for_search(tmp_path, job)
        time.sleep(rng.uniform(0.5, 2.5))  # a random moment of the search, not of start-up
        if job.poll() is None:
            assert coordinator is not None, f"cycle {cycle}: the coordinator never took the lock"
            if kind == "job":
                os.killpg(job.pid, signal.SIGKILL)
            elif kind == "coordinator":
                os.kill(coordinator, signal.SIGKILL)
            else:
                os.kill(rng.choice(others), signal.SIGKILL)
            injected.append(kind)
        try:
            job.wait(timeout=60)  # MPI takes the rest of the job down: nothing hangs
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            pytest.fail(f"cycle {cycle}: the job did not end after killing the {kind}")
        os.killpg(job.pid, signal.SIGKILL) if job.poll() is None else None
        events, problems = read_journal(journal)
        assert all("torn last line" in p for p in problems), problems
        for n, rec in replay(events).items():
            if rec.status.is_finished():
                assert seen.setdefault(n, rec.objective) == rec.objective, f"trial {n} changed"
    assert set(injected) == {"job", "coordinator", "group rank"}, injected
    p = subprocess.run([str(MPIEXEC), "-n", "4", sys.executable, "-m", "mpiopt", "search", str(path), "--resume"],
                       cwd=tmp_path, env={**env, "MPIOPT_TEST_SLEEP": "0"}, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "faults")
    assert list(df.trial) == list(range(60)) and set(df.status) == {"completed"}
    for n, obj in seen.items():
        assert df.loc[df.trial == n, "objective"].item() == obj
    events, problems = read_journal(journal)
    assert problems == []  # every torn tail was cut off on resume
    finishes = sorted(e["trial"] for e in events if e["event"] == "finish")
    assert finishes == list(range(60))


def test_an_error_outside_trial_code_on_a_group_rank_ends_the_job(write_yaml, tmp_path):
    path = write_yaml(SPACE.replace("trials: 60", "trials: 12"))
    env = {**os.environ, "MPIOPT_TEST_SLEEP": "0.1"}
    faulty = Path(__file__).with_name("faulty_mpiopt.py")
    p = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, str(faulty), "5", "search", str(path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("mpiopt: internal error on world rank")]
    assert len(line) == 1 and "fault injected outside trial code at trial 5" in line[0], p.stderr
    p = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, "-m", "mpiopt", "search", str(path), "--resume"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    df = mpiopt.load_results(tmp_path / "runs" / "faults")
    assert list(df.trial) == list(range(12)) and set(df.status) == {"completed"}

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPACES = Path(__file__).resolve().parent / "spaces"


def mnist1d_objective(builder: str = "build_model") -> str:
    """The `objective:` block of a search space that trains an examples/mnist1d.py model."""
    return f"""objective:
  model: {ROOT}/examples/mnist1d.py:{builder}
  data: {ROOT}/examples/mnist1d.py:load_data
  loss: sparse_categorical_crossentropy
  metrics: [accuracy]
  maximize: val_accuracy
"""
def two_goals_space(name: str, goal: str, search: str) -> str:
    """A search of slow_branin.py's `two_goals` (copied as objectives.py by `write_yaml`) over a
    conditional space: momentum only with sgd, width2 only with two layers. `goal`: the
    objective's `minimize: ...` or `pareto: {...}` line."""
    return f"""
name: {name}
objective:
  function: objectives.py:two_goals
  {goal}
parameters:
  optimizer: {{choices: [sgd, adam]}}
  momentum: {{type: real, low: 0.0, high: 0.99, when: {{optimizer: sgd}}}}
  layers: {{choices: [1, 2]}}
  width1: {{type: integer, low: 1, high: 64}}
  width2: {{type: integer, low: 1, high: 64, when: {{layers: 2}}}}
search: {search}
"""


BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"


@pytest.fixture
def write_yaml(tmp_path):
    """Write a search-space file (next to a copy of the test objectives) and return its path."""
    (tmp_path / "objectives.py").write_text((SPACES / "slow_branin.py").read_text())

    def write(text: str, name: str = "space.yaml") -> Path:
        p = tmp_path / name
        p.write_text(textwrap.dedent(text))
        return p

    return write


def mpiexec(np: int, hosts: str | None = None, extra=()) -> list[str]:
    """`mpiexec -n NP`; with `hosts` ('nodeA:2,nodeB:2') one MPICH proxy a host name, so that the
    ranks see separate nodes."""
    return [str(MPIEXEC), *extra, *(("-launcher", "fork", "-hosts", hosts) if hosts else ()), "-n", str(np)]


def run_cli(args, *, cwd, np: int | None = None, timeout: float = 120, env=None,
            hosts: str | None = None) -> subprocess.CompletedProcess:
    """Run `mpiopt ARGS` (under `mpiexec -n NP`, on `hosts` if given, when np is given) and capture
    its output."""
    cmd = [sys.executable, "-m", "mpiopt", *map(str, args)]
    if np is not None:
        cmd = [*mpiexec(np, hosts), *cmd]
    full_env = {**os.environ, "MPIOPT_TEST_SLEEP": "0", **(env or {})}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.fixture
def cli_here(tmp_path, monkeypatch, capsys):
    """`mpiopt ARGS` run in this process, in tmp_path, as `run_cli` runs it in its own. For the
    commands that start TensorFlow: a test process starts it once, a subprocess each time (seconds)."""
    from mpiopt.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "0")

    def run(*args) -> subprocess.CompletedProcess:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run


# -- MPICH's shared-memory files of jobs the tests kill -----------------------------------------
# A rank killed with SIGKILL (as the fault tests do) never reaches MPI_Finalize, which is where
# MPICH removes its /dev/shm files; each holds megabytes of memory until the machine reboots.
_SHM = Path("/dev/shm")


def _mpich_shm_files() -> set[Path]:
    return set(_SHM.glob("mpich_shm_*")) if _SHM.is_dir() else set()


def _mapped_shm_files() -> set[str]:
    """The /dev/shm files any live process maps (a job still running keeps its files)."""
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped |= {line.split(maxsplit=5)[-1] for line in maps.read_text().splitlines() if " /dev/shm/" in line}
        except OSError:  # the process ended, or is not ours to read
            continue
    return mapped


def pytest_sessionstart(session):
    session.config.shm_before = _mpich_shm_files()


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller cleans up once
        return
    mapped = _mapped_shm_files()
    for f in _mpich_shm_files() - session.config.shm_before:
        if str(f) not in mapped:
            f.unlink(missing_ok=True)

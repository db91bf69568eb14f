"""The environment variables mpiopt reads, read in one place: its own settings (`SETTINGS`) and
the MPI launcher's rank and size (`launcher_rank`, `launcher_size`).

A bad value of a setting is the user's input being wrong: a `ConfigError` naming the variable,
what it expected and what it got (the CLI checks them all before anything else, so every rank
exits with code 2 and one line, before MPI starts). An empty value counts as unset, as in
`MPIOPT_FRESH_SHARE= mpiexec ...`.
"""
from __future__ import annotations

import difflib
import os

from ._errors import ConfigError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _raw(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def is_set(name: str) -> bool:
    return _raw(name) is not None


def env_float(name: str, default: float, low: float = 0.0, high: float = float("inf")) -> float:
    """A number from `low` to `high` (finite)."""
    raw = _raw(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high or value == float("inf"):
        within = f">= {low:g}" if high == float("inf") else f"from {low:g} to {high:g}"
        raise ConfigError(f"expected a number {within}, got {raw!r}", source="environment", field=name)
    return value


def env_int(name: str, default: int, low: int = 1) -> int:
    """A whole number at least `low`."""
    raw = _raw(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low:
        raise ConfigError(f"expected a whole number >= {low}, got {raw!r}", source="environment", field=name)
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...], upper: bool = False) -> str:
    """One of `choices` (compared in upper case where `upper`)."""
    raw = _raw(name)
    if raw is None:
        return default
    value = raw.upper() if upper else raw
    if value not in choices:
        raise ConfigError(f"expected one of {', '.join(choices)}, got {raw!r}", source="environment", field=name)
    return value


# name: (reader, default, its extra arguments, what it sets); the defaults live here only
SETTINGS: dict[str, tuple] = {
    "MPIOPT_LOG_LEVEL": (env_choice, "INFO", (LOG_LEVELS, True), "log level of every rank"),
    "MPIOPT_THREADS": (env_int, 1, (), "TensorFlow/OpenMP threads per rank when several ranks run"),
    "MPIOPT_PREFETCH": (env_choice, "1", (("0", "1"),), "0: ask the surrogate on demand, any number of groups"),
    "MPIOPT_SEND_AHEAD": (env_choice, "1", (("0", "1", "always"),), "0: never send a trial ahead"),
    "MPIOPT_FRESH_SHARE": (env_float, 0.0, (), "long trials: wait for a round with the latest result"),
    "MPIOPT_MAX_BACKOFF": (env_float, 0.001, (0.0, 1.0), "longest sleep (s) between polls of a waiting rank"),
    "MPIOPT_SPIN": (env_float, 0.0001, (0.0, 1.0), "how long (s) a waiting rank polls before it backs off"),
    "MPIOPT_COLLECTIVE_SPIN": (env_float, 0.02, (0.0, 1.0), "the same inside a group's collectives"),
    "MPIOPT_PROGRESS_S": (env_float, 60.0, (), "least seconds between a training trial's progress lines"),
    "MPIOPT_STRAGGLER_S": (env_float, 60.0, (), "a group's first rank warns of a rank this late after its own part"),
    # at least a few of the coordinator's pulses (every 2 s) long, or a healthy job would end
    "MPIOPT_COORDINATOR_SILENT_S": (env_float, 30.0, (6.0,), "groups end the job after this long without word"),
    "MPIOPT_TF_LOGS": (env_choice, "0", (("0", "1"),), "1: keep TensorFlow's start-up lines on stderr"),
}


_deferred: list[ConfigError] = []  # a bad value this rank saw, for the job's ranks to agree on


def get(name: str):
    """The variable's value, or its default (also where its bad value is deferred)."""
    reader, default, extra, _ = SETTINGS[name]
    try:
        return reader(name, default, *extra)
    except ConfigError:
        if not _deferred:
            raise
        return default


def check() -> None:
    """Read every variable once: raises ConfigError on the first bad one."""
    for name in SETTINGS:
        get(name)


def defer_check() -> None:
    """`check` for a rank of an MPI job, whose ranks may see different values (`mpiexec -env` on
    some): a bad value is kept for the ranks to agree on once MPI started (`deferred`), where a
    rank that ended alone would leave the others waiting for it; the defaults stand in meanwhile."""
    try:
        check()
    except ConfigError as exc:
        defer(exc)


def defer(error: ConfigError) -> None:
    """Keep a start-up error of this rank of an MPI job (a bad MPIOPT_* value, a file its node
    lacks) for every rank to learn once MPI started (`launch.agree_at_start`): a rank that ended
    alone would leave the others waiting in MPI's start for ever."""
    _deferred.append(error)


def misspelt() -> list[str]:
    """A warning for each set variable named like one of `SETTINGS` that is none of them
    (`MPIOPT_THREAD=4` sets nothing). Only near misses: other `MPIOPT_*` names (a test
    harness's own) are no concern of mpiopt's."""
    notes = []
    for name in sorted(os.environ):
        if name in SETTINGS or not name.upper().startswith("MPIOPT_") or not is_set(name):
            continue
        meant = name.upper() if name.upper() in SETTINGS else next(
            iter(difflib.get_close_matches(name.upper(), SETTINGS, n=1, cutoff=0.8)), None)
        if meant is not None:
            notes.append(f"{name} is not a variable mpiopt reads, so it sets nothing (did you mean {meant}?)")
    return notes


def deferred() -> ConfigError | None:
    """The first start-up error `defer_check` or `defer` kept, or None."""
    return _deferred[0] if _deferred else None


# The launcher's own variables (MPICH/Hydra, Open MPI, PMIx, Slurm, Intel MPI), first found wins. They
# are read before MPI starts, so they are not the user's input: one that is not a whole number is
# passed over, never an error.
# Slurm's srun over PMIx sets no size variable of PMIx's own: its step's task count stands in.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID")
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "MPI_LOCALNRANKS")


def _first_whole_number(names: tuple[str, ...], default: int) -> int:
    for name in names:
        raw = _raw(name)
        if raw is not None and raw.isdigit():
            return int(raw)
    return default


def launcher_rank() -> int:
    """This process's world rank as its launcher set it; 0 when no launcher started it."""
    return _first_whole_number(RANK_VARIABLES, 0)


def launcher_size() -> int:
    """The world size as the launcher set it; 1 when no launcher started this process."""
    return _first_whole_number(SIZE_VARIABLES, 1)

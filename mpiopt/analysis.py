"""Reading a run directory back: the results table as a pandas DataFrame (pandas imported lazily)."""
from __future__ import annotations

import errno
import logging
import math
import numbers
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ._errors import ConfigError
from ._results_view import by_status
from .trial import TrialStatus
from .pareto import Goals, reported_goal
from .journal import (CONFIG, JOURNAL, PARAM_COUNT, REPORTED_OBJECTIVE, RESULTS, STRETCH_COLUMNS, TRAIN_INFO, Merit,
                      front, is_live, read_heartbeat, read_journal, read_run_config, replay, result_rows, stretch_rows)

log = logging.getLogger(__name__)


def run_directory(path: str | os.PathLike) -> Path:
    """`path` as a run directory, or a one-line refusal: a file (the search-space file, most
    likely) or nothing there."""
    p = Path(path).expanduser()
    if p.is_file():
        raise ConfigError("is a file; expected a search's run directory (runs/<name>, or the search's --out)",
                          source=str(path))
    if not p.is_dir():
        raise ConfigError("no such run directory", source=str(path))
    return p


def _run_info(path: Path) -> dict[str, Any]:
    return read_run_config(path) or {}


def direction_of(path: str | os.PathLike) -> tuple[str, str]:
    """The figure of merit's (direction, metric) of a run directory (a Pareto search's: its first
    goal that the trials report, as in the `objective` column)."""
    obj = _run_info(Path(path)).get("objective") or {}
    first = reported_goal(goals_of(path))
    if first is not None:
        return first[1], first[0]
    for d in ("minimize", "maximize"):
        if d in obj:
            return d, obj[d]
    return "minimize", "objective"


def merit_of(path: str | os.PathLike) -> Merit:
    """The figure of merit as (metric, direction): what a trial's best epoch is picked by."""
    direction, metric = direction_of(path)
    return metric, direction


def goals_of(path: str | os.PathLike) -> Goals:
    """A Pareto search's (metric, direction) goals; () for a search of one figure of merit."""
    goals = (_run_info(Path(path)).get("objective") or {}).get("pareto")
    if not isinstance(goals, dict):
        return ()
    return tuple((str(m), str(d)) for m, d in goals.items() if d in ("minimize", "maximize"))


def load_results(path: str | os.PathLike):
    """The results table of a search (SPEC §5): a DataFrame, one row a trial.

    Built from the journal (the source of truth); a folder with only `results.csv` is read as is.
    Nothing is unpickled or executed.
    """
    import pandas as pd

    p = run_directory(path)
    journal = p / JOURNAL
    stretched: list[int] = []
    if journal.exists():
        params = list((_run_info(p).get("parameters") or {}).keys())
        trials = _trials(p)
        columns, rows = result_rows(trials.values(), params, live=is_live(p), goals=goals_of(p), merit=merit_of(p))
        df = pd.DataFrame(rows, columns=columns)
        stretched = [n for n, t in trials.items() if t.first_start is not None and t.first_start != t.start]
    elif (p / RESULTS).exists():
        df = pd.read_csv(p / RESULTS)
    else:
        raise ConfigError(f"holds no search results (no {JOURNAL})", source=str(path))
    space = _run_info(p).get("parameters") or {}
    df = _integer_params(_typed(df), space)
    df.attrs["direction"], df.attrs["metric"] = direction_of(p)  # what the plots take by default
    df.attrs["choices"] = numeric_choices(space)  # a plot's ticks there, not at values no trial can take
    df.attrs["categories"] = {name: list(spec["choices"]) for name, spec in space.items()  # a plot's order
                              if isinstance(spec, dict) and isinstance(spec.get("choices"), list)}
    # the trials that trained in several stretches (paused and promoted, or run again after a
    # crash): one row each here, so a timeline of them needs load_timeline's
    df.attrs["stretched"] = stretched
    return df


def numeric_choices(space: dict) -> dict[str, list]:
    """The categorical parameters of a resolved space whose choices are all numbers (a batch size
    of 32, 64 or 128), with their choices."""
    return {name: list(spec["choices"]) for name, spec in space.items()
            if isinstance(spec, dict) and isinstance(spec.get("choices"), list) and spec["choices"]
            and all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c)
                    for c in spec["choices"])}


def refresh_results_csv(path: str | os.PathLike) -> bool:
    """Rewrite the results.csv of a search that stopped without writing its last table (kill -9,
    a lost node), or write it where it is missing, from its journal: rows left `running` then say
    `interrupted` or `paused`, as `load_results` does. Only while no search may be running there
    (its lock held on this host, or its heartbeat fresh), and only where the folder can be
    written. Whether it was rewritten."""
    import time

    from ._files import atomic_write
    from .journal import results_csv
    from .status import liveness

    p = Path(path)
    if not (p / JOURNAL).exists() or is_live(p):
        return False
    if liveness(p, time.time()).state in ("running", "starting"):
        return False
    params = list((_run_info(p).get("parameters") or {}).keys())
    table = results_csv(_trials(p).values(), params, live=False, goals=goals_of(p), merit=merit_of(p))
    try:
        if (p / RESULTS).exists() and (p / RESULTS).read_bytes() == table:
            return False
        atomic_write(p / RESULTS, table)
    except OSError as exc:  # the table stays as the search left it
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):  # a read-only share: nothing to say
            log.debug("results.csv not rewritten: %s", exc)
        else:  # a full disk: pandas users would read a stale table
            log.warning("%s not rewritten from the journal: %s", p / RESULTS, exc.strerror or exc)
        return False
    return True


def _integer_params(df, space: dict):
    """Integer parameters, and categoricals of integers, as nullable integers: a conditional one
    is empty where inactive, which would make the column float; a real one never active is NaN."""
    import pandas as pd

    for name, spec in space.items():
        col = f"params_{name}"
        if not isinstance(spec, dict) or col not in df:
            continue
        if spec.get("type") == "integer" or _integer_choices(spec):
            values = df[col].dropna()
            if (values == values.round()).all():  # whole numbers, as an integer parameter's are
                df[col] = df[col].astype("Int64")
        elif spec.get("type") == "real":
            df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


def _integer_choices(spec: dict) -> bool:
    choices = spec.get("choices")
    return isinstance(choices, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in choices)


def _typed(df):
    """`df` with its times as datetimes and its counts as nullable integers."""
    import pandas as pd

    for col in ("start", "end"):
        if col in df:
            df[col] = pd.to_datetime(df[col].replace("", None), utc=True, format="ISO8601")
    for col in ("objective", "objective_std", "duration_s", "dispatch_ms", "wait_ms"):
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    for col in ("epochs", "rung", "group", "ranks"):
        if col in df:
            df[col] = df[col].astype("Int64")
    count = pd.to_numeric(df[PARAM_COUNT], errors="coerce") if PARAM_COUNT in df else None
    if count is not None and (count.dropna() % 1 == 0).all():  # a model's parameter count (a function's may be any)
        df[PARAM_COUNT] = count.astype("Int64")
    return df


def load_timeline(path: str | os.PathLike):
    """What each group trained when: a DataFrame, one row a stretch of training (a trial from a
    hand-out to its group's result: a paused trial's promotion is a stretch of its own), with
    `trial`, `status` (how the stretch ended), `epochs` (reached by its end), `start`, `end`,
    `group`, `ranks`, `dispatch_ms` and `wait_ms`. The input of `timeline` and `plot_timeline`."""
    import pandas as pd

    p = Path(path)
    if not (p / JOURNAL).exists():  # a folder with only results.csv (or none: the error says so)
        df = load_results(p)
        return df[[c for c in STRETCH_COLUMNS if c in df]]
    events = _events(p)
    last_beat = _last_runs_beat(read_heartbeat(p), events)
    live = is_live(p)
    df = _typed(pd.DataFrame(stretch_rows(events, live=live, last_beat=last_beat), columns=STRETCH_COLUMNS))
    df.attrs["live"] = live  # its running stretches have no end yet
    df.attrs["lost"] = lost_intervals(events)
    df.attrs["runs"] = run_spans(events, last_beat)
    return df


def _last_runs_beat(beat: dict | None, events) -> float | None:
    """When the journal's last run beat last (a killed run ran until then at least); None where
    the heartbeat is another's: a later run that was stopped before its `session` record."""
    sessions = [e["time"] for e in events if e.get("event") == "session" and isinstance(e.get("time"), (int, float))]
    since = beat.get("since") if beat else None
    if not sessions or not isinstance(since, (int, float)) or since > sessions[-1]:
        return None
    return beat["time"]


def run_spans(events, last_beat: float | None = None) -> list[tuple[float, float, int | None]]:
    """When the search ran: a (from, until, groups) span for each run of it (the first, each
    --resume), from its `session` record to its last record (the last run's: or its last
    heartbeat, if later), so the time between a kill and its --resume is no part of any, with the
    number of groups the run had (None where the journal does not say); [] for a journal written
    before those records."""
    spans: list[list] = []
    marked = False
    for e in events:
        at = e.get("time", e.get("end"))  # a `finish` has the group's end instead
        if not isinstance(at, (int, float)):
            continue
        if e.get("event") == "session" or not spans:  # records before the first: a run of their own
            marked |= e.get("event") == "session"
            groups = e.get("groups")
            spans.append([float(at), float(at), groups if isinstance(groups, int) else None])
        else:
            spans[-1][1] = max(spans[-1][1], float(at))
    if spans and last_beat is not None:
        spans[-1][1] = max(spans[-1][1], float(last_beat))
    return [(a, b, g) for a, b, g in spans] if marked else []


def lost_intervals(events) -> dict[int, list[tuple[float, float | None]]]:
    """Per group, the (from, until) times it was lost (its node died; until None: for good), from
    the journal's `lost` and `back` events: `timeline` leaves that time out of the group's. It was
    lost from when it went silent, `silent_s` before the coordinator noticed."""
    out: dict[int, list[tuple[float, float | None]]] = {}
    for e in events:
        group, at = e.get("group"), e.get("time")
        if not isinstance(group, int) or not isinstance(at, (int, float)):
            continue
        if e.get("event") == "lost":
            silent = e.get("silent_s")
            silent = float(silent) if isinstance(silent, (int, float)) and silent > 0 else 0.0
            out.setdefault(group, []).append((float(at) - silent, None))
        elif e.get("event") == "back" and out.get(group) and out[group][-1][1] is None:
            out[group][-1] = (out[group][-1][0], float(at))
    return out


def load_history(path: str | os.PathLike):
    """Every trial's per-epoch reports (SPEC §5): a DataFrame, one row a trial and epoch, with
    `trial`, `epoch` and one column a metric. An epoch reported twice (a trial re-run from its
    checkpoint after a crash) keeps its last report, the one later epochs went on from (a
    scheduler judged the first)."""
    import pandas as pd

    rows: dict[tuple[int, int], dict] = {}
    for e in _events(Path(path)):
        if e.get("event") == "report" and isinstance(e.get("trial"), int) and isinstance(e.get("epoch"), int):
            rows[(e["trial"], e["epoch"])] = {"trial": e["trial"], "epoch": e["epoch"], **(e.get("metrics") or {})}
    df = pd.DataFrame([rows[k] for k in sorted(rows)])
    return df if len(df) else pd.DataFrame({"trial": pd.Series(dtype="int64"), "epoch": pd.Series(dtype="int64")})


def best_trials(df, direction: str, top: int | None = None):
    """Completed trials, best first (a Pareto search's by its first goal, and of a tie, those on
    the front first); then the rest in trial order, or, where a scheduler judged them, the
    highest rung first and, at a rung, the best by what they were judged on (`judged_column`)."""
    done = df[df["status"] == "completed"]
    by = ["objective", "pareto"] if "pareto" in df else ["objective"]
    done = done.sort_values(by, ascending=[direction == "minimize", False][:len(by)], kind="stable")
    rest = df[df["status"] != "completed"]
    judged = judged_column(df)
    if judged is not None:
        rest = rest.sort_values(["rung", judged], ascending=[False, direction == "minimize"], na_position="last",
                                kind="stable")
    out = __import__("pandas").concat([done, rest])
    return out.head(top) if top else out


def front_first(df, goals):
    """A Pareto search's trials: those on its front (the `pareto` column), then the rest, each
    part by the first goal."""
    import pandas as pd

    first, direction = goals[0]
    on = df["pareto"].eq(True)

    def by_first_goal(rows):
        return rows.sort_values(first if first in df else "objective", ascending=direction == "minimize",
                                na_position="last", kind="stable")

    return pd.concat([by_first_goal(df[on]), by_first_goal(df[~on])])


def judged_column(df) -> str | None:
    """Where a scheduler judged trials, the column of what it judged each by (`reported_column`);
    else None."""
    if "rung" not in df or not df["rung"].notna().any():
        return None
    return reported_column(df)


def reported_column(df) -> str | None:
    """The column of the figure of merit as each trial reported it, whatever its status: a model's
    metric (`val_loss`, ...), or a function's `reported_objective` where the figure of merit is its
    `objective`; None where the table has neither."""
    metric = df.attrs.get("metric")
    if metric in df and metric != "objective":
        return metric
    return REPORTED_OBJECTIVE if REPORTED_OBJECTIVE in df and metric in (None, "objective") else None


def _hand_outs(df):
    """`dispatch_ms` split three ways (Series): each group's first trial (it answers no result,
    wait_ms is empty: the start-up wave), the trials sent ahead (negative), and the rest, the
    hand-outs that followed a result."""
    import pandas as pd

    d = pd.to_numeric(df["dispatch_ms"], errors="coerce")
    first = df["wait_ms"].isna() if "wait_ms" in df else pd.Series(False, index=df.index)
    later = d[~first].dropna()
    return d[first].dropna(), later[later < 0], later[later >= 0]


def dispatch_after_result(df):
    """The coordinator's part (ms) of each hand-out that followed a result (a Series; see `timeline`)."""
    return _hand_outs(df)[2]


def timeline(df):
    """Group utilization of a search, from its stretches of training (`load_timeline`; the results
    table does where no trial was paused): per group, trials, stretches and busy seconds; overall,
    the busy share. A paused trial continues on whichever group is free, so a trial can count on
    several groups: the groups' `trials` can add up to more than the search's.

    Utilization is busy time over (groups x active time), where active time is the time the
    search ran (`df.attrs["runs"]`, from `load_timeline`: from each run's first record to its last),
    so a group waiting for its next trial counts as idle and the pause between a kill and its
    --resume does not, and a group counts only the runs that had it (a --resume with fewer or
    more groups); for a table without them (`load_results`, or a journal from before runs were
    marked) it is the union of the trials' intervals. A group lost with its node
    (`df.attrs["lost"]`) counts only its time alive, and the summary's `lost` names it.
    `dispatch_ms` is the coordinator's part of a hand-out (result received -> next trial sent);
    negative for a trial sent ahead, that long before the group's previous result came in (the
    latency is then reported over the hand-outs that did follow a result, and the ones sent ahead
    are counted apart: `sent_ahead`, and how early, `ahead_p50_ms`);
    `wait_ms` is what the group saw (result sent -> next trial received), MPI included. The
    first trial of each group (no result before it) is counted apart: `first_wave_ms` is the
    longest time from the search's start to a group's first trial going out.
    `runs` is how many runs the search had (the first and each --resume; 1 for a table that does
    not say), `span_s` the time from the first's start to the last's end.
    Returns (per-group DataFrame, summary dict).
    """
    import pandas as pd

    done = df.dropna(subset=["start", "end", "group"])
    if done.empty:
        return pd.DataFrame(columns=["group", "trials", "stretches", "busy_s", "utilization"]), {}
    runs = df.attrs.get("runs") or \
        [(a, b, None) for a, b in
         _union(sorted((s.timestamp(), e.timestamp()) for s, e in zip(done.start, done.end, strict=True)))]
    active = sum(b - a for a, b, _ in runs)
    lost = df.attrs.get("lost") or {}
    busy = _busy_s(done, lost)
    per = done.assign(busy_s=busy).groupby("group").agg(trials=("trial", "nunique"), stretches=("trial", "size"),
                                                        busy_s=("busy_s", "sum"))
    per = per.reset_index()
    groups = set(per.group)
    alive = per.group.map(lambda g: _alive_s(int(g), runs, lost.get(int(g), ())))
    per["utilization"] = (per.busy_s / alive).where(alive > 0)
    summary = {"groups": int(len(per)), "trials": int(done.trial.nunique()), "stretches": int(len(done)),
               "active_s": active, "runs": len(df.attrs.get("runs") or []) or 1, "span_s": runs[-1][1] - runs[0][0],
               "lost": sorted(g for g in lost if g in groups),
               "utilization": float(per.busy_s.sum() / alive.sum()) if alive.sum() > 0 else float("nan")}
    if "dispatch_ms" in df and df["dispatch_ms"].notna().any():
        first_wave, early, after = _hand_outs(df)
        summary["sent_ahead"] = int(len(early))
        summary["sent_after"] = int(len(after))
        if not early.empty:
            summary["ahead_p50_ms"] = float(-early.quantile(0.5))
        if not after.empty:
            summary["dispatch_p50_ms"] = float(after.quantile(0.5))
            summary["dispatch_p99_ms"] = float(after.quantile(0.99))
        if not first_wave.empty:
            summary["first_wave_ms"] = float(first_wave.max())
    if "wait_ms" in df and df["wait_ms"].notna().any():
        w = pd.to_numeric(df["wait_ms"], errors="coerce").dropna()
        summary["wait_p50_ms"] = float(w.quantile(0.5))
        summary["wait_p99_ms"] = float(w.quantile(0.99))
    return per, summary


def _busy_s(done, lost: dict[int, list[tuple[float, float | None]]]):
    """Each stretch's seconds, less those after its group went silent (a trial on a node that
    died ends where the coordinator noticed, seconds later)."""
    busy = (done.end - done.start).dt.total_seconds()
    if not lost:
        return busy
    cut = [sum(_overlap([(s.timestamp(), e.timestamp())], a, b) for a, b in lost.get(int(g), ()))
           for s, e, g in zip(done.start, done.end, done.group, strict=True)]
    return busy - cut


def _alive_s(group: int, runs: list[tuple[float, float, int | None]],
             lost: list[tuple[float, float | None]]) -> float:
    """How long `group` could train: the runs that had it (a --resume with fewer groups had not),
    less the time it was lost with its node."""
    had = [(a, b) for a, b, groups in runs if groups is None or group < groups]
    return sum(b - a for a, b in had) - sum(_overlap(had, a, b) for a, b in lost)


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted intervals merged where they overlap."""
    merged: list[tuple[float, float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _overlap(merged: list[tuple[float, float]], start: float, until: float | None) -> float:
    """How much of the merged intervals falls from `start` to `until` (None: to the end)."""
    end = float("inf") if until is None else until
    return sum(max(0.0, min(e, end) - max(s, start)) for s, e in merged)


def _events(path: Path) -> list[dict]:
    """The events of a run directory's journal (what cannot be read is logged); not to be changed."""
    return _read(path)["events"]


def _trials(path: Path) -> dict:
    """The trial records of a run directory, from its journal; not to be changed."""
    read = _read(path)
    if read.get("trials") is None:
        read["trials"] = replay(read["events"])
    return read["trials"]


def _read(path: Path) -> dict:
    """The journal read (and replayed, on demand) once while it stays as it is: `results` and
    `report` take several views of it, and a journal of 30,000 trials takes seconds to read.
    Only the latest journal is kept, so a notebook going through many runs holds one."""
    journal = run_directory(path) / JOURNAL
    try:
        st = journal.stat()
    except FileNotFoundError:
        raise ConfigError(f"holds no search (no {JOURNAL})", source=str(path)) from None
    key = (str(journal.resolve()), st.st_size, st.st_mtime_ns)
    if _LATEST.get("key") != key:
        events, problems = read_journal(journal)
        for msg in problems:
            if msg not in _WARNED:  # once a process: a report reads the journal for each of its views
                _WARNED.add(msg)
                log.warning(msg)
        _LATEST.clear()
        _LATEST.update(key=key, events=events, trials=None)
    return _LATEST


_WARNED: set[str] = set()  # the journal problems this process has warned of
_LATEST: dict = {}  # the journal `_read` read last: its key (path, size, time), events and trials


def best_trial(path: str | os.PathLike) -> int:
    """The number of the best completed trial of a run directory."""
    p = Path(path)
    direction, _ = direction_of(p)
    sign = 1.0 if direction == "minimize" else -1.0
    trials = _trials(p)
    done = [t for t in trials.values() if t.status.value == "completed" and t.objective is not None]
    if not done:
        so_far = by_status(t.shown_status(live=is_live(p)).value for t in trials.values())
        raise ConfigError(f"no trial has completed ({so_far or 'none has started'})", source=str(path))
    goals = goals_of(p)
    on = front(list(trials.values()), goals) if goals else set()  # of a tie on the first goal, one on the front
    return min(done, key=lambda t: (sign * t.objective, t.trial not in on, t.trial)).trial


def trial_params(path: str | os.PathLike, trial: int | str = "best") -> tuple[dict[str, Any], int]:
    """(parameters, number) of trial `trial` (a number, or 'best') of a run directory."""
    p = run_directory(path)
    number = _trial_number(p, trial)
    trials = _trials(p)
    if number not in trials:
        raise ConfigError(f"no trial {number} (the search has trials 0-{max(trials, default=-1)})", source=str(path))
    return dict(trials[number].params), number


def _trial_number(path: Path, trial: int | str) -> int:
    """`trial` as a number: 'best', a whole number, or its digits (`--trial 3`); 1.7 or True is
    no trial number."""
    if isinstance(trial, str) and trial.strip().lower() == "best":
        return best_trial(path)
    whole = isinstance(trial, numbers.Integral) and not isinstance(trial, bool)
    if not (whole or isinstance(trial, str) and re.fullmatch(r"\s*-?\d+\s*", trial)):
        raise ConfigError(f"trial: expected a trial number or 'best', got {trial!r}")
    number = int(trial)
    if number < 0:
        raise ConfigError(f"trial: expected a trial number >= 0, got {number}")
    return number


def run_config(path: str | os.PathLike):
    """The configuration a run directory's search ran with (its config.yaml), as a `Config`.

    Paths in it are relative to the search-space file it was read from, as they were then."""
    from .config import parse_config

    p = Path(path)
    raw = dict(_run_info(p))
    if not raw:
        raise ConfigError(f"holds no readable {CONFIG}", source=str(path))
    source = Path(raw.pop("source", p / CONFIG))
    return parse_config(raw, path=source, source=str(p / CONFIG))


def load_model(path: str | os.PathLike, trial: int | str = "best"):
    """Trial `trial` (a number, or 'best') of a search, rebuilt and holding its best weights.

    The model is built by the search's own `build_model` with the trial's parameters and
    compiled as the search compiled it; its weights are those of the trial's best epoch
    (`trials/<id>/best.weights.h5`; a trial killed while it trained: its checkpoint's). For a
    model trained by `mpiopt train`, pass its folder and the number of the trial it retrained is
    not needed: `load_model("runs/x/train-trial-7")` (a training stopped before its end: the best
    epoch of its checkpoint).
    """
    p = Path(path)
    trained = (p / TRAIN_INFO).exists() and not (p / JOURNAL).exists()  # a folder of `mpiopt train`
    if trained:
        cfg, params = _train_config(p)
    else:
        params, number = trial_params(p, trial)
        cfg = run_config(p)
    if cfg.objective.kind != "model":
        what = "training's" if trained else "search's"
        raise ConfigError(f"the {what} objective is a function: there is no model to load", source=str(path))
    # the weights' paths are absolute: they are read after build_model ran, which may chdir
    return _rebuild(cfg, params, _trained_weights(p.absolute()) if trained else _trial_weights(p, number))


@dataclass(frozen=True)
class _Checkpointed:
    """A trial's best weights (and non-trainable state) as its checkpoint holds them: flat."""

    weights: Any
    state: Any

    def load_into(self, model) -> None:
        from .learn._flat import FlatModel

        FlatModel(model).set_kept(self.weights, self.state)  # as training's end puts them in


def _trained_weights(folder: Path) -> Path | _Checkpointed:
    """The best weights of a folder of `mpiopt train`: its best.weights.h5, written as the training
    ended, or, for one stopped before (Ctrl-C, a batch job's end), those of its checkpoint."""
    from .learn import _checkpoint

    weights = folder / "best.weights.h5"
    if weights.exists():
        return weights
    found = _checkpoint.load(folder)
    if found is not None and "best_weights" in found[0]:
        return _Checkpointed(found[0]["best_weights"], found[0].get("best_state"))
    raise ConfigError(f"the training kept no weights (no {weights.name}, no checkpoint of its best: it ended before "
                      "its first epoch did, or before its first checkpoint)", source=str(folder))


def _trial_weights(p: Path, number: int) -> Path | _Checkpointed:
    """Trial `number`'s best weights: its best.weights.h5, written with each of its results, or,
    where the search holds no result of its latest stretch (killed while it trained), those of
    its checkpoint, the best of all the epochs the checkpoint holds."""
    from .learn import _checkpoint

    weights = p.absolute() / "trials" / str(number) / "best.weights.h5"
    found = _checkpoint.load(weights.parent) if _trials(p)[number].status == TrialStatus.RUNNING else None
    if found is not None and "best_weights" in found[0]:
        return _Checkpointed(found[0]["best_weights"], found[0].get("best_state"))
    if not weights.exists() and (weights.parent / "fold_1").is_dir():
        trained = p / f"train-trial-{number}"  # where `mpiopt train --trial N --from DIR` writes
        fix = f"mpiopt.load_model({str(trained)!r}) loads the one `mpiopt train` trained on all of it" \
            if (trained / weights.name).exists() else \
            f"`mpiopt train SPACE --trial {number} --from {p}` trains that one"
        raise ConfigError(f"trial {number} is a k-fold trial: it kept one model per fold (fold_<k>/"
                          f"{weights.name}), none trained on all the data; {fix}", source=str(weights.parent))
    if not weights.exists():
        raise ConfigError(f"trial {number} kept no weights (no {weights.name}, no checkpoint of its best: a function "
                          "objective, or a trial that did not finish an epoch)", source=str(weights.parent))
    return weights


def _train_config(path: Path):
    """(config, parameters) of a folder written by `mpiopt train`."""
    info_path = path / TRAIN_INFO
    try:
        info = yaml.safe_load(info_path.read_text("utf-8")) or {}
    except (OSError, yaml.YAMLError):
        raise ConfigError(f"no readable {TRAIN_INFO}", source=str(path)) from None
    from .config import parse_config

    raw = dict(info.get("config") or {})
    source = Path(raw.pop("source", path / TRAIN_INFO))
    return parse_config(raw, path=source, source=str(info_path)), dict(info.get("params") or {})


def _rebuild(cfg, params: dict[str, Any], weights: Path | _Checkpointed):
    from .config import import_callable
    from .learn._engine import compiled_with_an_optimizer
    from .objective import import_keras_quietly

    import_keras_quietly()  # before the user's build_model
    build = import_callable(cfg.objective.model, cfg.base_dir, source=str(cfg.path), field="objective.model")
    model = build(**cfg.model_kwargs(params))
    if not model.weights:  # one that makes its weights on its first call: built as training builds it
        model(_first_training_input(cfg), training=False)
    if isinstance(weights, Path):
        model.load_weights(str(weights))
    else:
        weights.load_into(model)
    if not compiled_with_an_optimizer(model) and cfg.objective.loss is not None:
        # compiled after the weights are in: the file also holds the untouched state of the stand-in
        # optimizer the search compiled with (its master's optimizer trained the weights), which
        # would overwrite this one's learning rate
        model.compile(optimizer=_keras_optimizer(cfg.trial_training(params)), loss=cfg.objective.loss,
                      metrics=list(cfg.objective.metrics))
    return model


def _first_training_input(cfg):
    """The first training input of the search's data, to build a model on (a subclassed one, or a
    Sequential without keras.Input, has no weights to load into before its first call)."""
    from .learn._data import load_source
    from .objective import data_loader

    return load_source(cfg.objective.data, cfg.base_dir, data_loader(cfg)).first(1)


def _keras_optimizer(training: dict[str, Any]):
    """The Keras optimizer the trial trained with (training.optimizer at its learning_rate), so
    that a loaded model fine-tunes as the search trained it (Keras' own default is RMSprop)."""
    import keras

    from .learn._engine import training_optimizer

    spec = training_optimizer(training)
    return keras.optimizers.get({"class_name": spec.pop("name"), "config": spec})

"""Reading a run directory back: the results table as a pandas DataFrame (pandas imported lazily)."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import yaml

from ._errors import ConfigError
from .journal import CONFIG, JOURNAL, RESULTS, is_live, read_journal, replay, result_rows

log = logging.getLogger(__name__)


def _run_info(path: Path) -> dict[str, Any]:
    try:
        return yaml.safe_load((path / CONFIG).read_text("utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}


def direction_of(path: str | os.PathLike) -> tuple[str, str]:
    """The figure of merit's (direction, metric) of a run directory."""
    obj = _run_info(Path(path)).get("objective") or {}
    for d in ("minimize", "maximize"):
        if d in obj:
            return d, obj[d]
    return "minimize", "objective"


def load_results(path: str | os.PathLike):
    """The results table of a search (SPEC §5): a DataFrame, one row a trial.

    Built from the journal (the source of truth); a folder with only `results.csv` is read as is.
    Nothing is unpickled or executed.
    """
    import pandas as pd

    p = Path(path)
    if not p.is_dir():
        raise ConfigError("no such run directory", source=str(path))
    journal = p / JOURNAL
    if journal.exists():
        events, problems = read_journal(journal)
        for msg in problems:
            log.warning(msg)
        params = list((_run_info(p).get("parameters") or {}).keys())
        columns, rows = result_rows(replay(events).values(), params, live=is_live(p))
        df = pd.DataFrame(rows, columns=columns)
    elif (p / RESULTS).exists():
        df = pd.read_csv(p / RESULTS)
    else:
        raise ConfigError(f"holds no search results (no {JOURNAL})", source=str(path))
    for col in ("start", "end"):
        if col in df:
            df[col] = pd.to_datetime(df[col].replace("", None), utc=True, format="ISO8601")
    for col in ("objective", "duration_s"):
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    for col in ("epochs", "group", "ranks"):
        if col in df:
            df[col] = df[col].astype("Int64")
    return df


def best_trials(df, direction: str, top: int | None = None):
    """Completed trials, best first (then the rest in trial order)."""
    done = df[df["status"] == "completed"].sort_values("objective", ascending=direction == "minimize", kind="stable")
    rest = df[df["status"] != "completed"]
    out = __import__("pandas").concat([done, rest])
    return out.head(top) if top else out

"""How `mpiopt results` shows the trials of a run: the table, JSON records, YAML, the timeline.

pandas and numpy are imported where a table is at hand already, so that `mpiopt` starts quickly.
"""
from __future__ import annotations

import datetime
import math
import numbers
from collections import Counter
from collections.abc import Iterable
from typing import Any

ERROR_WIDTH = 70  # characters of the error column in the table view (the whole line: --format csv)


def format_hours(hours: float, digits: int = 0) -> str:
    """A duration for people: 45 s, 12 min, 3.4 h (`digits` of seconds and minutes: 4.2 s, 1.5 min)."""
    seconds = hours * 3600.0
    if seconds < 90:
        return f"{seconds:.{digits}f} s"
    if seconds < 5400:
        return f"{seconds / 60:.{digits}f} min"
    return f"{hours:.1f} h"


def counted(n: int, thing: str) -> str:
    """'1 paused trial', '3 paused trials'."""
    return f"{n} {thing}{'s' * (n != 1)}"


def first_few(items: Iterable[Any], most: int) -> str:
    """'3, 5, 8', or the first `most` and how many more: '3, 5, 8 and 9 more'."""
    items = list(items)
    shown = ", ".join(map(str, items[:most]))
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def by_status(statuses: Iterable[str]) -> str:
    """'58 completed, 2 failed': trials counted by status, in the order of the statuses' names (as
    the search's closing line and `mpiopt status` count them)."""
    return ", ".join(f"{n} {status}" for status, n in sorted(Counter(statuses).items()))


def params_text(params: dict[str, Any]) -> str:
    """A trial's parameters on one line for people: reals to 6 significant digits (the table and
    `--best --format yaml` keep every digit)."""
    return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def format_rate(per_hour: float, unit: str) -> str:
    """A rate for people, in the unit of time that keeps its number short: 120 trials/h,
    45 trials/min, 16 trials/s (a search of seconds would say 58840 trials/h)."""
    if per_hour < 1000:
        return f"{per_hour:.0f} {unit}/h"
    if per_hour < 36000:
        return f"{per_hour / 60:.0f} {unit}/min"
    return f"{per_hour / 3600:.0f} {unit}/s"


def table(top, goals: list[str] | None = None, judged: str | None = None) -> str:
    """The trials of `top` as a text table: parameters without their `params_` prefix, errors cut;
    with `goals` (a Pareto search's metrics), those instead of the status and objective; with
    `judged`, that column beside the objective (what a scheduler judged trials by)."""
    lead = ["trial", *goals] if goals else ["trial", "status", "objective", "objective_std",
                                            *([judged] if judged else [])]
    cols = lead + param_columns(top) + \
        ["epochs", "rung"] + (["duration_s"] if "duration_s" not in lead else []) + ["group"]
    view = blank_missing(short_param_names(top[[c for c in cols if c in top.columns]]))
    if "error" in top and top["error"].notna().any():
        errors = top["error"].fillna("").astype(str)
        view = view.assign(error=errors.map(lambda e: e if len(e) <= ERROR_WIDTH else e[:ERROR_WIDTH - 3] + "..."))
    return text_table(view)


def text_table(view) -> str:
    """`view` as aligned text: numbers to the right under a header to the right, text to the
    left under a header to the left (pandas' to_string mixes the two where a column has gaps)."""
    columns = [(str(c), *_cells(view[c])) for c in view.columns]  # (header, cells, numeric)
    widths = [max(len(header), *map(len, cells)) for header, cells, _ in columns]
    rows = zip(*[[header, *cells] for header, cells, _ in columns], strict=True)
    return "\n".join("  ".join(cell.rjust(width) if numeric else cell.ljust(width)
                               for cell, (_, _, numeric), width in zip(row, columns, widths, strict=True)).rstrip()
                     for row in rows)


def param_columns(df) -> list[str]:
    """The table's parameter columns (`params_<name>`), in its order."""
    return [c for c in df.columns if c.startswith("params_")]


def _cells(series) -> tuple[list[str], bool]:
    """A column's cells as text, and whether it holds numbers (its empty cells aside). Floats get
    as many decimals as the column needs, up to 6, or 6 significant digits where a value is too
    small or too large for that."""
    values = [v for v in series if not _blank(v)]
    numeric = bool(values) and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values)
    if not numeric:
        return ["" if _blank(v) else str(v) for v in series], False
    floats = [float(v) for v in values if not float(v).is_integer() or isinstance(v, float)]
    if not floats:
        return ["" if _blank(v) else str(int(v)) for v in series], True
    tiny_or_huge = any(0 < abs(v) < 1e-4 or abs(v) >= 1e9 for v in floats)
    decimals = max(_decimals(v) for v in floats)

    def cell(v) -> str:
        if _blank(v):
            return ""
        return f"{float(v):.6g}" if tiny_or_huge else f"{float(v):.{decimals}f}"

    return [cell(v) for v in series], True


def _decimals(v: float) -> int:
    """Decimals that show `v` to 6 places, trailing zeros dropped (at least one)."""
    text = f"{v:.6f}".rstrip("0")
    return max(1, len(text.partition(".")[2]))


def _blank(v) -> bool:
    if v is None or (isinstance(v, str) and v == ""):
        return True
    try:
        return bool(v != v)  # NaN, NaT
    except (TypeError, ValueError):  # pandas' NA has no truth value
        return True


def short_param_names(view):
    """`view` with its parameters named without their `params_` prefix, except one named like
    another column (a searched `epochs` beside the epochs trained): two columns of one name
    cannot be told apart."""
    taken = set(view.columns)
    return view.rename(columns={c: c.removeprefix("params_") for c in view.columns
                                if c.startswith("params_") and c.removeprefix("params_") not in taken})


def blank_missing(view):
    """`view` with the missing values of its columns that are not floats (an inactive parameter, a
    function's epochs) as empty cells, as pandas prints a missing float, not `<NA>` or `None`."""
    from pandas.api.types import is_float_dtype

    view = view.copy()
    for c in view.columns:
        if not is_float_dtype(view[c]) and view[c].isna().any():
            view[c] = view[c].astype(object).where(view[c].notna(), "")
    return view


def as_csv(df) -> str:
    """Rows as CSV, times written as results.csv writes them (ISO 8601, milliseconds, UTC)."""
    from pandas.api.types import is_datetime64_any_dtype

    times = {c: df[c].map(lambda t: "" if t is None or t != t else t.isoformat(timespec="milliseconds"))
             for c in df.columns if is_datetime64_any_dtype(df[c])}
    return df.assign(**times).to_csv(index=False)


def records(df) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: floats exact (pandas' to_json keeps 15 digits), times ISO 8601,
    missing values null."""
    return [{k: _json_value(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def _json_value(v: Any) -> Any:
    import numpy as np
    import pandas as pd

    if v is pd.NaT:  # checked first: NaT is a datetime too
        return None
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return None
    try:
        if v != v:  # a NaN of another type
            return None
    except TypeError:  # pandas' NA has no truth value
        return None
    return v


def as_yaml(value) -> str:
    """`value` as YAML, through libyaml where PyYAML has it: its pure-Python emitter takes
    seconds for a table of thousands of trials."""
    import yaml

    from .config import yaml_dumper

    return yaml.dump(value, Dumper=yaml_dumper(fast=True), sort_keys=False, allow_unicode=True)


def best_yaml(run_dir: str, top, direction: str, metric: str) -> str:
    """The best trial as YAML: its parameters and the training settings it ran with."""
    from .analysis import run_config, trial_params
    from .config import function_training_keys

    number = int(top.iloc[0]["trial"])
    params, _ = trial_params(run_dir, number)
    cfg = run_config(run_dir)
    training = cfg.trial_training(params)
    ranks = top.iloc[0].get("ranks")
    if ranks is not None and ranks == ranks:  # the ranks it trained on: leftover ranks join groups
        training["group_size"] = int(ranks)
    if cfg.objective.kind == "function":
        training = {k: training[k] for k in function_training_keys(cfg.search.scheduler)}
    head = f"# the best trial of {run_dir}: {direction} {metric} = {float(top.iloc[0]['objective']):.6g}\n"
    return head + as_yaml({"trial": number, metric: _as_reported(float(top.iloc[0]["objective"])),
                           "parameters": params, "training": training})


def _as_reported(value: float) -> float:
    """A metric a model computed in float32 as it printed there (0.663, not 0.6629999876022339)."""
    import numpy as np

    if not math.isfinite(value) or abs(value) > float(np.finfo(np.float32).max):
        return value
    single = np.float32(value)
    return float(str(single)) if float(single) == value else value


def timeline_line(run_dir: str, summary: dict[str, Any]) -> str:
    """One line over the groups of a search: utilization, and the dispatch figures it has."""
    groups, trials = summary["groups"], summary["trials"]
    line = f"{run_dir}: {groups} group{'s' * (groups != 1)}, {trials} trial{'s' * (trials != 1)}"
    if summary["stretches"] > trials:
        line += (f" in {summary['stretches']} stretches (a trial promoted from a pause, or run again after a kill, "
                 "trains in several, on any group)")
    line += f", active {summary['active_s']:.1f} s; group utilization {summary['utilization']:.3f}"
    if summary.get("lost"):
        lost = summary["lost"]
        line += f" (group{'s' * (len(lost) > 1)} {', '.join(map(str, lost))} lost with a node: counted while alive)"
    if "dispatch_p50_ms" in summary:
        after = summary.get("sent_after", 0)
        few = f" (over {counted(after, 'hand-out')} after a result)" if after < 100 else ""
        line += (f"; dispatch latency p50 {summary['dispatch_p50_ms']:.2f} ms, p99 {summary['dispatch_p99_ms']:.2f} ms"
                 f"{few}")
    if summary.get("sent_ahead"):
        line += (f"; {summary['sent_ahead']} trials sent ahead (p50 {summary['ahead_p50_ms']:.1f} ms before the "
                 f"group's previous result)")
    if "first_wave_ms" in summary:
        line += f"; every group's first trial out within {summary['first_wave_ms']:.2f} ms"
    if "wait_p50_ms" in summary:
        line += f"; group wait p50 {summary['wait_p50_ms']:.2f} ms, p99 {summary['wait_p99_ms']:.2f} ms"
    return line

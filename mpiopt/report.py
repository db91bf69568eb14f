"""`mpiopt report DIR`: one PNG a plot and a self-contained report.html (the images inlined), made
from the run directory only, whether the search finished, is running, or was killed."""
from __future__ import annotations

import base64
import html
import io
import logging
import math
import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import _results_view as view
from . import plots
from ._errors import ConfigError
from ._files import atomic_write, missing_folders, refuse_a_file_in_the_way, remove_made
from .analysis import (_run_info, best_trials, direction_of, front_first, goals_of, judged_column, load_history,
                       load_results, load_timeline, reported_column, timeline)
from .journal import PARAM_COUNT
from .status import liveness
from .trial import TrialStatus

log = logging.getLogger(__name__)
MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from (current )?font")


@dataclass
class Section:
    """One plot of the report: its image, or why it could not be drawn."""

    slug: str
    title: str
    png: bytes | None = None
    reason: str | None = None


def log_params(info: dict) -> set[str]:
    """The parameters with a log-uniform prior in a run's resolved configuration."""
    return {name for name, spec in (info.get("parameters") or {}).items()
            if isinstance(spec, dict) and spec.get("prior") == "log-uniform"}


def _plots(df, history, stretches, direction: str, metric: str, logs: set[str],
           goals) -> list[tuple[str, str, Callable]]:
    front = [("pareto", "Pareto front", lambda: plots.plot_pareto(df, goals))] if goals else []
    return front + [
        ("history", "Optimization history", lambda: plots.plot_history(df, direction=direction, metric=metric)),
        ("importance", "Parameter importance", lambda: plots.plot_importance(df, metric=metric, log_params=logs)),
        ("parallel", "Parallel coordinates",
         lambda: plots.plot_parallel(df, direction=direction, metric=metric, log_params=logs)),
        ("slices", "Slices", lambda: plots.plot_slices(df, direction=direction, metric=metric, log_params=logs)),
        ("curves", "Learning curves", lambda: plots.plot_curves(history, df, metric=metric, direction=direction)),
        ("timeline", "Group timeline", lambda: plots.plot_timeline(stretches, now=_now_if_live(stretches))),
    ]


def _now_if_live(stretches):
    """Now, where the search runs (its running trials' bars reach it); else None."""
    import pandas as pd

    return pd.Timestamp.now(tz="UTC") if stretches.attrs.get("live") else None


def _draw(slug: str, title: str, make: Callable, lacking: set[str]) -> Section:
    """One plot; the characters its font has no glyph for are added to `lacking` (matplotlib
    warns of each, on every plot, with a line of its source)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fig = make()
        except plots.PlotUnavailable as why:
            return Section(slug, title, reason=str(why))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
    for w in caught:
        glyph = MISSING_GLYPH.match(str(w.message))
        if glyph:
            lacking.add(chr(int(glyph[1])))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return Section(slug, title, png=buf.getvalue())


def _say_lacking(lacking: set[str]) -> None:
    """One line for the characters no plot could draw (a parameter named in Chinese)."""
    from matplotlib import rcParams

    if lacking:
        family = rcParams["font.family"][0]
        font = (rcParams.get(f"font.{family}") or [family])[0]  # the first font of the family, which drew
        log.warning("the plots' font (%s) has no glyph for %s: drawn as boxes (matplotlib's font.family can name "
                    "a font that has them, in a matplotlibrc)", font, " ".join(sorted(lacking)))


# file names a user may give --out that would become folders: images and documents
NOT_A_PAGE = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".txt", ".md")


def write_report(path: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Write the plots and report.html of the search in `path` to the folder `out` (default
    `path/report`); an `out` ending in .html names the page, written alone (it embeds the plots).
    Returns the page's path."""
    run = Path(path)
    target = Path(out) if out is not None else run / "report"
    page, pngs = target / "report.html", True
    if target.suffix.lower() in (".html", ".htm"):  # the page alone: it embeds its plots
        target, page, pngs = target.parent, target, False
    elif target.suffix.lower() in NOT_A_PAGE:
        raise ConfigError(f"--out {out}: the report is an HTML page (name it .html) or a folder of the page and "
                          "its plots (a name without a suffix)")
    df = load_results(run)
    history = load_history(run)
    stretches = load_timeline(run)
    info = _run_info(run)
    direction, metric = direction_of(run)
    goals = goals_of(run)
    refuse_a_file_in_the_way(target, source=f"--out {target}")
    lacking: set[str] = set()
    sections = [_draw(*spec, lacking) for spec in _plots(df, history, stretches, direction, metric, log_params(info),
                                                              goals)]
    _say_lacking(lacking)
    made, written = missing_folders(target), []
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        remove_made([], made)
        raise ConfigError(f"--out {target}: cannot write here: {exc.strerror or exc}") from None
    try:
        for s in sections:
            if s.png is not None and pngs:
                written.append(target / f"{s.slug}.png")
                atomic_write(written[-1], s.png, durable=False)
        usage = timeline(stretches)[1]
        text = _html(run, info, df, usage, direction, metric, goals, sections)
        atomic_write(page, text.encode("utf-8"), durable=False)
    except BaseException:  # a full disk: a new folder goes again; an old report's files stay as they are
        if made:
            remove_made(written, made)
        raise
    return page


# -- the page -------------------------------------------------------------------------------------
def _trials_text(df, budget: int | None) -> str:
    """Finished trials against the budget they count in, and those started and not finished."""
    finished = int(df["status"].map(lambda s: TrialStatus.parse(s).is_finished()).sum())
    text = f"{finished} finished" + (f" of a budget of {budget}" if budget else "")
    return text + (f" ({len(df) - finished} more started)" if len(df) > finished else "")


def summary_rows(run: Path, info: dict, df, usage: dict, direction: str, metric: str) -> list[tuple[str, str]]:
    budget = (info.get("search") or {}).get("trials")
    done = best_trials(df, direction)
    best = done[done["status"] == "completed"].head(1)
    alive = liveness(run, time.time())
    rows = [("search", str(info.get("name", run.name))),
            ("state", alive.state + (f": {alive.stopped}" if alive.stopped else "")),
            ("trials", _trials_text(df, budget)),
            ("by status", view.by_status(df["status"]))]
    if "pareto" in df.columns:
        rows.append(("Pareto front", f"{int(df['pareto'].astype(bool).sum())} trials (the table's pareto column)"))
    if not best.empty:
        b = best.iloc[0]
        params = view.params_text({c[len("params_"):]: b[c] for c in df.columns
                                   if c.startswith("params_") and not _missing(b[c])})  # an inactive one: left out
        rows.append((f"best {metric} ({direction})", f"{b['objective']:.6g} at trial {int(b['trial'])}: {params}"))
    if usage.get("active_s"):  # the time the search ran, and, where it was stopped and resumed, from start to end
        rows.append(("wall time", _wall_time(usage)))
    if math.isfinite(usage.get("utilization", math.nan)):  # none where the trials took no measurable time
        rows.append(("group utilization", f"{usage['utilization']:.0%} of {view.counted(usage['groups'], 'group')}"))
    scheduler = (info.get("search") or {}).get("scheduler")
    if scheduler and scheduler != "none":
        rows.append(("scheduler", str(scheduler)))
    return rows


def _wall_time(usage: dict) -> str:
    running = view.format_hours(usage["active_s"] / 3600, digits=1)
    if usage["runs"] < 2:
        return running
    span = view.format_hours(usage["span_s"] / 3600, digits=1)
    return f"{running} running, in {usage['runs']} runs ({span} from the first start to the last end)"


def _missing(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def _top_table(df, direction: str, goals=(), top: int = 10) -> str:
    """The best completed trials (a Pareto search's front first, as `mpiopt results` lists it);
    with none completed, the first trials that ended otherwise and why (an empty objective column
    says nothing)."""
    completed = df["status"] == TrialStatus.COMPLETED.value
    if completed.any():
        # objective_std of a k-fold search, pareto (and the weight count, a usual goal) of a Pareto search
        cols = ["trial", "status", "objective", "objective_std", judged_column(df), "pareto", *view.param_columns(df),
                PARAM_COUNT, "epochs", "rung", "duration_s", "group"]
        return _table(front_first(df, goals).head(top) if goals else best_trials(df, direction, top), cols)
    ended = df[[TrialStatus.parse(s).is_finished() for s in df["status"]]]
    if ended.empty:
        return _started_table(df, direction, top)
    errors_first = ended.sort_values("error", key=lambda e: e.isna(), kind="stable") if "error" in ended else ended
    return ("<p>No trial completed. The first that ended otherwise, errors first:</p>"
            + _table(errors_first.head(top),
                     ["trial", "status", *view.param_columns(df), "epochs", "rung", "group", "error"]))


def _started_table(df, direction: str, top: int) -> str:
    """With no trial finished (a search killed early, or just started): those started, where they
    reported any (a killed search's trials) best first by the best epoch each reported, as
    `mpiopt status` tells the best so far; else in the order they started."""
    if df.empty:
        return "<p>No trial has started yet.</p>"
    by = reported_column(df)
    by = by if by is not None and df[by].notna().any() else None
    rows = df if by is None else df.sort_values(by, ascending=direction == "minimize", na_position="last",
                                                kind="stable")
    said = ", by the best epoch each reported" if by is not None else ""
    return (f"<p>No trial has finished yet. Those started{said}:</p>"
            + _table(rows.head(top), ["trial", "status", by, *view.param_columns(df), "epochs", "group"]))


def _table(df, cols: list[str]) -> str:
    """The rows of `df` in the columns `cols` it has, as the report's HTML table of trials."""
    shown = view.short_param_names(df[[c for c in cols if c in df.columns]])
    return view.blank_missing(shown).to_html(index=False, na_rep="", float_format=lambda v: f"{v:.6g}", border=0,
                                             classes="top")


def _html(run: Path, info: dict, df, usage: dict, direction: str, metric: str, goals,
          sections: list[Section]) -> str:
    esc = html.escape
    summary = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>"
                      for k, v in summary_rows(run, info, df, usage, direction, metric))
    figures = []
    for s in sections:
        if s.png is not None:
            data = base64.b64encode(s.png).decode("ascii")
            body = f'<img src="data:image/png;base64,{data}" alt="{esc(s.title)}">'
        else:
            body = f'<p class="unavailable">Not drawn: {esc(s.reason or "")}.</p>'
        figures.append(f'<section id="{s.slug}"><h2>{esc(s.title)}</h2>{body}</section>')
    name = esc(str(info.get("name", run.name)))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mpiopt report: {name}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
.wide {{ overflow-x: auto; }}
th, td {{ padding: 0.2em 0.8em; text-align: left; border-bottom: 1px solid #ddd; font-size: 0.9em; }}
img {{ max-width: 100%; }}
.unavailable {{ color: #a33; }}
</style></head>
<body><h1>mpiopt report: {name}</h1>
<table class="summary">{summary}</table>
<h2>Top trials</h2>
<div class="wide">{_top_table(df, direction, goals)}</div>
{''.join(figures)}
</body></html>
"""

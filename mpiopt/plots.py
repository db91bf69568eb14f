"""Plots of a search, from its results table and per-epoch history (`mpiopt.load_results`,
`mpiopt.load_history`). Each function returns a `matplotlib.figure.Figure` (no pyplot state);
matplotlib is imported only when a plot is made, so a search never pays for it.

A plot that the data cannot support (no completed trial, no per-epoch reports...) raises
`PlotUnavailable` with the reason; `mpiopt report` shows that reason in the plot's place.
"""
from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ._results_view import param_columns

STATUS_COLOURS = {"completed": "tab:blue", "pruned": "tab:gray", "paused": "tab:orange", "failed": "tab:red",
                  "diverged": "tab:purple", "timeout": "tab:brown", "interrupted": "tab:pink",
                  "running": "tab:green"}
# enough completed trials for a random forest to say more than noise about the parameters
MIN_FOR_IMPORTANCE = 8
WEAK_FIT = 0.5  # the forest's out-of-bag R² under which importance shares are called unreliable
# Past these sizes a plot draws a part of a search (`_thinned`: the best trials and an even draw of
# the rest): 100,000 markers take minutes to render and show no more than 2,000 do.
MAX_POINTS = 2000  # markers of a scatter plot
MAX_LINES = 500  # lines of parallel coordinates and learning curves
INACTIVE_AT = -0.12  # where parallel coordinates put a parameter a trial's conditions left inactive
MAX_FIT = 2000  # trials the importance model is fitted on
MAX_GROUPS = 64  # groups of the timeline
MAX_PARETO_PANELS = 6  # pairs of goals drawn: every pair of four goals
SHORT_NAME = 28  # characters of a name or value on an axis


class PlotUnavailable(ValueError):
    """The data cannot support this plot; the message says why."""


def _figure(width: float = 8.0, height: float = 4.5):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _is_categorical(series) -> bool:
    """Strings and booleans get an axis of categories; numbers (numeric choices too) a numeric one."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return is_bool_dtype(series) or not is_numeric_dtype(series)


def _completed(df, metric: str = "objective"):
    """The completed trials, holding in the column `objective` the value a plot draws: the
    figure of merit, or the table's column `metric`."""
    if "status" not in df.columns:
        raise TypeError("the plots take the results table (mpiopt.load_results; plot_curves takes "
                        "mpiopt.load_history's first), which has a `status` column; this table has none")
    if metric != "objective":
        if metric not in df.columns:
            _refuse_an_unknown_metric(df, metric)
            raise PlotUnavailable(f"no trial has reported {metric} yet")
        df = df.assign(objective=df[metric])
    done = df[(df["status"] == "completed") & df["objective"].notna()]
    if done.empty:
        raise PlotUnavailable("no trial has completed")
    return done


def _refuse_an_unknown_metric(df, metric: str) -> None:
    """ValueError for a `metric` that is no column of the table and not its run's figure of merit
    (which a search has before any trial reports it): a misspelt name, most likely."""
    if metric == df.attrs.get("metric"):
        return
    known = [c for c in df.columns if c not in ("trial", "epoch", "status", "start", "end", "error", "group", "ranks")
             and not str(c).startswith("params_")]
    raise ValueError(f"metric: {metric!r} is no column of this table (its metrics: {', '.join(map(str, known))})")


def _goal_pairs(goals) -> list[tuple[str, str]]:
    """(metric, direction) pairs from a mapping or pairs of two goals or more; ValueError otherwise."""
    pairs = list(goals.items()) if isinstance(goals, dict) else [tuple(g) for g in goals]
    if len(pairs) < 2 or any(len(g) != 2 for g in pairs):
        raise ValueError(f"goals: expected two goals or more, as {{metric: 'minimize' or 'maximize', ...}}, "
                         f"got {goals!r}"[:200])
    bad = next((d for _, d in pairs if d not in ("minimize", "maximize")), None)
    if bad is not None:
        raise ValueError(f"goals: expected 'minimize' or 'maximize', got {bad!r}")
    return pairs


def _direction(df, direction: str | None, metric: str) -> str:
    """A plot's direction: the one given, or the run's for its figure of merit (`load_results`
    puts it in the table's attrs). Anything else must be said: a maximized accuracy's direction
    would draw the worst loss as the best so far."""
    if direction is not None:
        if direction not in ("minimize", "maximize"):
            raise ValueError(f"direction: expected 'minimize' or 'maximize', got {direction!r}")
        return direction
    run, run_metric = df.attrs.get("direction"), df.attrs.get("metric")
    if run is None:
        raise ValueError("direction: this table does not say its run's direction (only a table straight from "
                         "mpiopt.load_results does: a merge with another table and read_csv drop it); pass "
                         "direction='minimize' or 'maximize'")
    if metric not in ("objective", run_metric):
        raise ValueError(f"direction: {metric} is not the run's figure of merit ({run} {run_metric}); pass "
                         "direction='minimize' or 'maximize' for it")
    return run


def _label(df, metric: str) -> str:
    """What a plot calls `metric`: the figure of merit by its run's name for it (val_accuracy)."""
    return (df.attrs.get("metric") or metric) if metric == "objective" else metric


def _with_times(df):
    """`df` with `start` and `end` as datetimes: a results.csv read with pandas holds them as text."""
    import pandas as pd
    from pandas.api.types import is_datetime64_any_dtype

    times = {c: pd.to_datetime(df[c], utc=True, format="ISO8601") for c in ("start", "end")
             if c in df and not is_datetime64_any_dtype(df[c])}
    return df.assign(**times) if times else df


def _log_names(df, log_params: Iterable[str]) -> set[str]:
    """The parameters drawn in log scale; a name that is not one of the table's is a mistake."""
    names = {log_params} if isinstance(log_params, str) else set(log_params)
    known = [c[len("params_"):] for c in param_columns(df)]
    unknown = sorted(names - set(known))
    if unknown:
        raise ValueError(f"log_params: {unknown[0]!r} is not a parameter of this table ({', '.join(known)})")
    taken = {n: df[f"params_{n}"].dropna().infer_objects() for n in names}  # a parameter never active took none
    words = sorted(n for n, values in taken.items() if len(values) and _is_categorical(values))
    if words:
        raise ValueError(f"log_params: {words[0]!r} is categorical; only a numeric parameter has a log scale")
    return names


def _best_so_far(values: np.ndarray, direction: str) -> np.ndarray:
    return np.minimum.accumulate(values) if direction == "minimize" else np.maximum.accumulate(values)


def _thinned(done, limit: int, direction: str = "minimize"):
    """`done`, or past `limit` rows: its best `limit // 10` rows and an even draw (seeded) of the
    others, `limit` in all, in their order."""
    if len(done) <= limit:
        return done
    rank = done["objective"].rank(method="first", ascending=direction == "minimize").to_numpy()
    keep = rank <= limit // 10
    others = np.flatnonzero(~keep)
    keep[np.random.default_rng(0).choice(others, size=limit - int(keep.sum()), replace=False)] = True
    return done[keep]


def _completed_of(done, df) -> str:
    """'635 completed trials of 8,000': under a scheduler the completed trials are the few that
    survived its rungs, which the plots of completed trials are fitted or drawn on alone."""
    return f"{len(done):,} completed trial{'s' * (len(done) != 1)}" + (f" of {len(df):,}" if len(done) < len(df)
                                                                         else "")


def _drawn(shown, done) -> str:
    """A title's note when a plot draws only part of the trials."""
    return f", {len(shown):,} of {len(done):,} drawn" if len(shown) < len(done) else ""


def _steps(x: np.ndarray, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points of a best-so-far line where it changes (and its last), enough to draw its steps."""
    keep = np.ones(len(best), dtype=bool)
    keep[1:] = best[1:] != best[:-1]
    keep[-1] = True
    return x[keep], best[keep]


def _category_index(series, given: list | None = None) -> tuple[list[str], np.ndarray]:
    """A categorical parameter's categories it took, as labels in the order its space gave them
    (`given`; else by name), and each trial's index among them (NaN where it is inactive)."""
    label = _category_label([*series.dropna(), *(given or [])])
    labels = series.map(label, na_action="ignore")
    taken = sorted(labels.dropna().unique())
    if given:
        rank = {label(c): i for i, c in enumerate(given)}
        taken = sorted(taken, key=lambda v: (rank.get(v, len(rank)), v))
    return taken, labels.map({v: i for i, v in enumerate(taken)}).to_numpy(float)


def _category_label(values: list) -> Callable[[Any], str]:
    """A choice's label: its text, quoted where it reads as another choice ('1' beside 1). Python
    holds True == 1 == 1.0, so the choices themselves cannot key a category."""
    others = {str(v) for v in values if not isinstance(v, str)}
    return lambda v: repr(v) if isinstance(v, str) and v in others else str(v)


def _short(text: str, limit: int = SHORT_NAME) -> str:
    """A long name or value cut in its middle for an axis ('a_really_quite…for_testing_layout')."""
    text = str(text)
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return f"{text[:head]}…{text[len(text) - (limit - 1 - head):]}"


# -- optimization history -------------------------------------------------------------------------
def plot_history(df, *, direction: str | None = None, metric: str = "objective"):
    """Each completed trial's `metric` (default: the figure of merit) and the best so far, against
    the trial number and against wall time since the search's first trial started."""
    from matplotlib.ticker import MaxNLocator

    df = _with_times(df)
    done = _completed(df, metric).sort_values("end")
    direction = _direction(df, direction, metric)
    shown = _thinned(done, MAX_POINTS, direction)
    fig = _figure(10.0, 4.2)
    by_trial, by_time = fig.subplots(1, 2, sharey=True)
    ordered = done.sort_values("trial")
    by_trial.scatter(shown["trial"], shown["objective"], s=14, color="tab:blue", label="trial")
    by_trial.step(*_steps(ordered["trial"].to_numpy(), _best_so_far(ordered["objective"].to_numpy(float), direction)),
                  where="post", color="tab:red", label="best so far")
    by_trial.set_xlabel("trial")
    by_trial.xaxis.set_major_locator(MaxNLocator(integer=True))
    first, last = float(ordered["trial"].min()), float(ordered["trial"].max())
    if last - first < 2:  # too narrow for whole ticks: matplotlib falls back to fractions of a trial
        by_trial.set_xticks(sorted(set(ordered["trial"])))
        by_trial.set_xlim(first - 1, last + 1)
    by_trial.set_ylabel(_label(df, metric))
    t0 = df["start"].dropna().min()
    per, unit = _elapsed_unit((done["end"].max() - t0).total_seconds())

    def elapsed(rows):
        return (rows["end"] - t0).dt.total_seconds().to_numpy() / per

    by_time.scatter(elapsed(shown), shown["objective"], s=14, color="tab:blue")
    by_time.step(*_steps(elapsed(done), _best_so_far(done["objective"].to_numpy(float), direction)), where="post",
                 color="tab:red")
    by_time.set_xlabel(f"{unit} since the search started")
    others = int((df["status"] != "completed").sum())
    by_trial.legend(title=f"{len(done)} completed, {others} not", fontsize="small")
    fig.suptitle(f"Optimization history ({direction} {_label(df, metric)}{_drawn(shown, done)})")
    return fig


def _elapsed_unit(span_s: float) -> tuple[float, str]:
    """Seconds a unit, and its name, for a time axis spanning `span_s`: seconds, minutes or hours,
    whichever keeps its ticks short."""
    if span_s >= 7200:
        return 3600.0, "hours"
    return (1.0, "seconds") if span_s < 120 else (60.0, "minutes")  # NaN (no end yet): minutes


# -- Pareto front -----------------------------------------------------------------------------------
def plot_pareto(df, goals):
    """A Pareto search's completed trials on each pair of its goals (up to MAX_PARETO_PANELS
    pairs), the trials of the front (the table's `pareto` column) in red. With two goals the front
    is joined in order of the first; with more, a pair's view of it is no line (a trial on the
    front may be beaten on both goals of the pair), so its points stand alone.
    `goals`: as `objective.pareto` gives them, `{metric: "minimize" | "maximize", ...}` (or pairs)."""
    goals = _goal_pairs(goals)
    done = df[df["status"] == "completed"]
    pairs = [(a, b) for i, a in enumerate(goals) for b in goals[i + 1:]][:MAX_PARETO_PANELS]
    missing = [m for m, _ in goals if m not in done.columns]
    if "pareto" not in df.columns:
        raise PlotUnavailable("not a Pareto search (its table has no pareto column: objective.pareto makes one)")
    if done.empty or missing:
        raise PlotUnavailable("no trial has completed" if done.empty else f"no column for {', '.join(missing)}")
    cols = min(3, len(pairs))
    rows = math.ceil(len(pairs) / cols)
    fig = _figure(4.2 * cols + 0.6, 3.6 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    on = done[done["pareto"].astype(bool)]
    style = "o-" if len(goals) == 2 else "o"
    for ax, ((x, dx), (y, dy)) in zip(axes, pairs, strict=False):
        ax.scatter(done[x], done[y], s=14, color="tab:gray", alpha=0.6, label=f"{len(done)} completed")
        line = on.sort_values(x)
        ax.plot(line[x], line[y], style, color="tab:red", markersize=5, label=f"front of all goals ({len(on)})")
        ax.set_xlabel(f"{x} ({dx})")
        ax.set_ylabel(f"{y} ({dy})")
        for values, set_scale in ((done[x], ax.set_xscale), (done[y], ax.set_yscale)):
            if _spans_decades(values.to_numpy(float)):  # parameter counts, durations
                set_scale("log")
        ax.legend(fontsize="small")
    for ax in axes[len(pairs):]:
        ax.set_visible(False)
    shown = "" if len(pairs) == len(goals) * (len(goals) - 1) // 2 else f" ({len(pairs)} pairs of goals drawn)"
    fig.suptitle(f"Pareto front{shown}")
    return fig


def _spans_decades(values: np.ndarray, ratio: float = 100.0) -> bool:
    """Positive values `ratio` apart or more (two decades): drawn on a log axis."""
    values = values[np.isfinite(values)]
    return bool(len(values)) and values.min() > 0 and values.max() >= ratio * values.min()


# -- parameter importance -------------------------------------------------------------------------
def parameter_importance(df, *, metric: str = "objective", log_params: Iterable[str] = ()) -> dict[str, float]:
    """Each parameter's share of the variation of `metric` (default: the figure of merit), by
    permutation importance of a random forest fitted on the completed trials (scikit-learn; a draw
    of MAX_FIT of them past that), normalised to sum to 1."""
    return _importance(df, metric, log_params)[0]


def _importance(df, metric: str, log_params: Iterable[str]) -> tuple[dict[str, float], float]:
    """`parameter_importance`, and the share of the variation the forest explains out of bag (its
    R²): near 0 or below, the forest found no pattern, and the shares are noise."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.inspection import permutation_importance

    logs = _log_names(df, log_params)
    done = _completed(df, metric)
    names = param_columns(df)
    if len(done) < MIN_FOR_IMPORTANCE:
        raise PlotUnavailable(f"needs at least {MIN_FOR_IMPORTANCE} completed trials, has {len(done)}")
    done = done.sample(n=MAX_FIT, random_state=0) if len(done) > MAX_FIT else done
    X = np.column_stack([_numeric(done[c], c[len("params_"):] in logs) for c in names])
    y = done["objective"].to_numpy(float)
    with warnings.catch_warnings():  # a trial in every tree's sample has no out-of-bag prediction: left out
        warnings.simplefilter("ignore", UserWarning)
        forest = RandomForestRegressor(n_estimators=200, min_samples_leaf=2, random_state=0, oob_score=True).fit(X, y)
    raw = permutation_importance(forest, X, y, n_repeats=10, random_state=0).importances_mean
    raw = np.clip(raw, 0.0, None)
    total = raw.sum()
    share = raw / total if total > 0 else np.full(len(names), 1.0 / len(names))
    return {c[len("params_"):]: float(s) for c, s in zip(names, share, strict=True)}, float(forest.oob_score_)


def _numeric(series, log: bool) -> np.ndarray:
    """A parameter column as numbers: categories by their index, log-uniform ones in log scale."""
    if _is_categorical(series):
        return _category_index(series)[1]
    values = series.to_numpy(float)
    return np.log(values) if _in_log_scale(series, log) else values


def _in_log_scale(series, log: bool) -> bool:
    """Whether a numeric parameter asked for in log scale can be: every value it took is
    positive (a trial where it is inactive, NaN, takes none)."""
    values = series.to_numpy(float)
    return log and bool((values[~np.isnan(values)] > 0).all())


def plot_importance(df, *, metric: str = "objective", log_params: Iterable[str] = ()):
    """The parameters by importance (`parameter_importance`), most important on top. It takes no
    direction: a share of the variation is the same whichever way the search goes."""
    share, explained = _importance(df, metric, log_params)
    names = sorted(share, key=share.get)
    fig = _figure(7.0, 1.5 + 0.45 * len(names))
    ax = fig.subplots()
    weak = explained < WEAK_FIT
    ax.barh([_short(n) for n in names], [share[n] for n in names], color="tab:gray" if weak else "tab:blue")
    ax.set_xlabel(f"share of {_short(_label(df, metric))}'s variation\n(random-forest permutation importance; "
                  f"the forest explains {max(explained, 0.0):.0%} of it out of bag)")
    ax.set_xlim(0, 1)
    title = f"Parameter importance ({_completed_of(_completed(df, metric), df)})"
    if weak:  # too few trials, or a few outliers the forest cannot place: the bars would mislead
        title += "\nunreliable: the forest finds little pattern in these trials"
    fig.suptitle(title)
    return fig


# -- parallel coordinates -------------------------------------------------------------------------
def plot_parallel(df, *, direction: str | None = None, metric: str = "objective", log_params: Iterable[str] = ()):
    """One line a completed trial across every parameter's axis, coloured by `metric` (default: the
    figure of merit; the best trials drawn last, on top)."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    names = param_columns(df)
    if len(names) < 2:
        raise PlotUnavailable("needs two parameters or more (plot_slices draws the one)")
    every = _completed(df, metric)
    direction = _direction(df, direction, metric)
    logs = _log_names(df, log_params)
    done = _thinned(every, MAX_LINES, direction)
    done = done.sort_values("objective", ascending=direction != "minimize")  # best last
    axes_values, labels = [], []
    for c in names:
        name = c[len("params_"):]
        unit, ticks = _unit_axis(done[c], name in logs, df.attrs.get("choices", {}).get(name),
                                 df.attrs.get("categories", {}).get(name))
        axes_values.append(unit)
        labels.append((name, ticks))
    fig = _figure(max(6.0, 1.6 * len(names) + 2), 4.5)
    ax = fig.subplots()
    values = done["objective"].to_numpy(float)
    lo, hi = values.min(), values.max()
    pad = 0.0 if hi > lo else max(abs(lo) * 1e-3, 1e-9)  # trials that all tie: a narrow bar around their value
    norm = Normalize(lo - pad, hi + pad)
    cmap = colormaps["viridis_r" if direction == "minimize" else "viridis"]
    xs = np.arange(len(names))
    for row, v in zip(np.column_stack(axes_values), values, strict=True):
        ax.plot(xs, row, color=cmap(norm(v)), alpha=0.8, linewidth=1.2)
    for x, (_, ticks) in zip(xs, labels, strict=True):
        ax.axvline(x, color="black", linewidth=0.6)
        for pos, text in ticks:
            ax.text(x + 0.03, pos, _short(text, 16), fontsize=7, va="center")
    ax.set_xticks(xs, [_short(name, 20) for name, _ in labels])
    ax.set_yticks([])
    inactive_shown = any(pos == INACTIVE_AT for _, ticks in labels for pos, _ in ticks)
    ax.set_ylim((INACTIVE_AT if inactive_shown else 0.0) - 0.05, 1.05)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=_label(df, metric))
    ax.set_title(f"Parallel coordinates ({_completed_of(every, df)}{_drawn(done, every)})")
    return fig


def _unit_axis(series, log: bool, choices: list | None = None,
               categories: list | None = None) -> tuple[np.ndarray, list[tuple[float, str]]]:
    """A parameter scaled to [0, 1] for its axis, with a few labelled ticks (numeric `choices`: one
    at each value taken); a trial where the parameter is inactive (a conditional space) sits
    below, at `INACTIVE_AT`."""
    inactive = series.isna().to_numpy()
    if _is_categorical(series):
        cats, index = _category_index(series, categories)
        scale, at = (1 / (len(cats) - 1), 0.0) if len(cats) > 1 else (0.0, 0.5)  # one category: mid-axis
        unit, ticks = index * scale + at, [(i * scale + at, v) for i, v in enumerate(cats)]
    else:
        raw = _numeric(series, log)
        known = raw[~inactive]
        lo, hi = (float(known.min()), float(known.max())) if known.size else (0.0, 0.0)
        span = hi - lo if hi > lo else 1.0
        ends = [(0.0, lo), (1.0, hi)] if hi > lo else [(0.0, lo)] if known.size else []
        shown = math.exp if _in_log_scale(series, log) else float
        if choices:
            ends = [((v - lo) / span, v) for v in np.unique(known)]
        unit, ticks = (raw - lo) / span, [(p, f"{shown(v):.3g}") for p, v in ends]
    if inactive.any():
        unit = np.where(inactive, INACTIVE_AT, unit)
        ticks = [*ticks, (INACTIVE_AT, "inactive")]
    return unit, ticks


# -- slices ---------------------------------------------------------------------------------------
def plot_slices(df, *, direction: str | None = None, metric: str = "objective", log_params: Iterable[str] = ()):
    """`metric` (default: the figure of merit) against each parameter (one panel a parameter),
    coloured by trial number."""
    from matplotlib.ticker import MaxNLocator, NullFormatter
    from pandas.api.types import is_integer_dtype

    every = _completed(df, metric)
    direction = _direction(df, direction, metric)
    logs = _log_names(df, log_params)
    done = _thinned(every, MAX_POINTS, direction)
    names = param_columns(df)
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig = _figure(max(4.0 * cols, 7.0), 3.2 * rows)  # a single panel as wide as its title
    panels = np.atleast_1d(fig.subplots(rows, cols, sharey=True, squeeze=False)).ravel()
    rng = np.random.default_rng(0)
    first, last = float(done["trial"].min()), float(done["trial"].max())
    pad = 0.5 if first == last else 0.0  # one trial: a colour bar around it, not -0.1 to 0.1
    for ax, c in zip(panels, names, strict=False):
        name = c[len("params_"):]
        if _is_categorical(done[c]):
            cats, index = _category_index(done[c], df.attrs.get("categories", {}).get(name))
            x = index + rng.uniform(-0.15, 0.15, len(done))
            texts = [_short(v, 16) for v in cats]
            long = sum(map(len, texts)) > 24  # more than the panel holds level: slanted
            ax.set_xticks(range(len(cats)), texts, rotation=30 if long else 0, ha="right" if long else "center")
            ax.set_xlim(-0.5, len(cats) - 0.5)  # every category's tick, whatever the points' spread
        else:
            x = done[c].to_numpy(float)
            taken = np.unique(x[~np.isnan(x)])
            choices = df.attrs.get("choices", {}).get(name)
            if len(taken) == 1:  # every point at one value: one tick there (matplotlib's spread them over 1e-3)
                ax.set_xticks(taken, [f"{taken[0]:.4g}"])
            elif choices:  # numeric choices (a batch size): a tick at each, none between
                ax.set_xticks(choices, [f"{c:g}" for c in choices])
            elif name in logs and _spans_decades(x, 10):  # a log axis within a decade labels its ticks unreadably
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(NullFormatter())  # 2x10^-3, 3x10^-3, ... run into each other
            elif is_integer_dtype(done[c]):  # an integer parameter (Int64 in load_results) has whole ticks
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        points = ax.scatter(x, done["objective"], c=done["trial"], cmap="viridis", edgecolors="black",
                            linewidths=0.3, s=18, vmin=first - pad, vmax=last + pad)
        ax.set_xlabel(_short(name))
    for ax in panels[len(names):]:
        ax.set_visible(False)
    for ax in panels[::cols]:
        ax.set_ylabel(_label(df, metric))
    fig.colorbar(points, ax=list(panels[:len(names)]), label="trial",
                 ticks=[first] if pad else MaxNLocator(integer=True))
    fig.suptitle(f"Slices: {_label(df, metric)} against each parameter ({direction}, {_completed_of(every, df)}"
                 f"{_drawn(done, every)})")
    return fig


# -- learning curves ------------------------------------------------------------------------------
def plot_curves(history, df, *, metric: str = "objective", direction: str | None = None):
    """Every trial's per-epoch `metric` (`mpiopt.load_history`), coloured by the trial's status;
    a trial stopped or paused by a scheduler ends in a cross."""
    from matplotlib.ticker import MaxNLocator

    if "epoch" not in history.columns or "status" not in df.columns:
        raise TypeError("plot_curves(history, df): the per-epoch table (mpiopt.load_history) first, then the results "
                        "table (mpiopt.load_results)")
    if metric == "objective" and metric not in history.columns:  # the reports name the figure of merit
        metric = df.attrs.get("metric", metric)
    reported = [c for c in history.columns if c not in ("trial", "epoch")]
    if metric == "objective" and metric not in reported and reported and not history.empty:
        # a table that is not load_results' own (read from results.csv) does not name its figure of merit
        raise PlotUnavailable(f"this table does not say which reported metric is the figure of merit: pass metric= "
                              f"one of {', '.join(reported)}")
    if history.empty or metric not in history.columns:
        raise PlotUnavailable(f"no per-epoch reports of {metric} (the objective does not report, or no trial has yet)")
    direction = _direction(df, direction, metric)
    status = df.set_index("trial")["status"].to_dict()
    fig = _figure(8.0, 4.5)
    ax = fig.subplots()
    counts: dict[str, int] = {}
    curves = history.groupby("trial")
    drawn = _drawn_curves(curves, metric, direction)
    for trial, rows in curves:
        if drawn is not None and trial not in drawn:
            continue
        rows = rows[np.isfinite(rows[metric].astype(float))]  # a diverged trial's NaN epoch has no point
        if rows.empty:
            continue
        s = status.get(trial, "running")
        counts[s] = counts.get(s, 0) + 1
        colour = STATUS_COLOURS.get(s, "black")
        ax.plot(rows["epoch"], rows[metric], color=colour, alpha=0.6, linewidth=1.0,
                marker="." if len(rows) == 1 else None)  # one point: a line of one point shows nothing
        if s in ("pruned", "paused"):
            ax.plot(rows["epoch"].iloc[-1], rows[metric].iloc[-1], "x", color=colour, markersize=6)
    from matplotlib.lines import Line2D

    every = Counter(status.get(trial, "running") for trial in curves.groups)  # drawn or not
    ax.legend([Line2D([], [], color=STATUS_COLOURS.get(s, "black")) for s in counts],
              [f"{s} ({n:,}{f' of {every[s]:,}' if n < every[s] else ''})" for s, n in counts.items()],
              fontsize="small")
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no half epochs on a short curve
    ax.set_ylabel(metric)
    note = f", {len(drawn):,} of {curves.ngroups:,} trials drawn" if drawn is not None else ""
    ax.set_title(f"Learning curves ({direction} {metric}{note})")
    return fig


def _stopped_spans(runs: list[tuple[float, float, int | None]]) -> list[tuple[float, float]]:
    """The (from, until) times between one run of a search and the next (`load_timeline`'s runs)."""
    return [(before[1], after[0]) for before, after in itertools.pairwise(runs) if after[0] > before[1]]


def _drawn_curves(curves, metric: str, direction: str) -> set | None:
    """The trials whose curves are drawn past MAX_LINES (None: all): by their last value, as `_thinned`."""
    if curves.ngroups <= MAX_LINES:
        return None
    last = curves[metric].last().rename("objective").to_frame()
    return set(_thinned(last, MAX_LINES, direction).index)


# -- the group timeline ---------------------------------------------------------------------------
def plot_timeline(df, *, now=None):
    """A Gantt chart: each group's stretches of training (`mpiopt.load_timeline`; the results
    table does where no trial was paused) against time, coloured by how each ended, with the
    utilization and, hatched, the time no search ran (from a kill to its --resume). A stretch
    without an end (running, or cut off by a kill) is drawn up to `now` (default: the latest
    time in the table)."""
    from matplotlib.ticker import MaxNLocator

    from .analysis import timeline

    missing = [c for c in ("trial", "status", "start", "group") if c not in df.columns]
    if missing:
        raise TypeError(f"plot_timeline(df): the table of mpiopt.load_timeline(DIR) (or load_results'); this one has "
                        f"no {', '.join(missing)}")
    if "objective" in df.columns and df.attrs.get("stretched"):
        raise ValueError(f"plot_timeline(df): trial {df.attrs['stretched'][0]} trained in several stretches (paused "
                         "and promoted, or run again after a crash), which the results table shows as one row; pass "
                         "mpiopt.load_timeline(DIR)")
    df = _with_times(df)
    every = df.dropna(subset=["start", "group"])
    if every.empty:
        raise PlotUnavailable("no trial has started")
    t0 = every["start"].min()
    groups = np.sort(every["group"].unique())
    started = every[every["group"].isin(groups[:MAX_GROUPS])]
    end = started["end"].fillna(now if now is not None else every[["start", "end"]].max().max())
    drawn = min(len(groups), MAX_GROUPS)
    # groups past 24 get thinner rows, so that the most drawn still fit a screen
    fig = _figure(10.0, 1.5 + 0.35 * min(drawn, 24) + 0.1 * max(0, drawn - 24))
    ax = fig.subplots()
    seen: set[str] = set()
    # white edges part the bars of a group, until they are so many that the edges hide them
    edge = 0.4 if len(started) <= 100 * drawn else 0.0
    # one collection of bars a group and status (barh would make an artist a trial)
    per, unit = _elapsed_unit((end.max() - t0).total_seconds())
    for (status, group), rows in started.assign(stop=end).groupby(["status", "group"]):
        left = (rows["start"] - t0).dt.total_seconds().to_numpy() / per
        width = (rows["stop"] - rows["start"]).dt.total_seconds().to_numpy() / per
        ax.broken_barh(list(zip(left, width, strict=True)), (int(group) - 0.4, 0.8),
                       facecolors=STATUS_COLOURS.get(status, "black"), edgecolor="white", linewidth=edge,
                       label=None if status in seen else status)
        seen.add(status)
    for stopped, resumed in _stopped_spans(df.attrs.get("runs") or []):  # between a kill (or a stop) and its --resume
        ax.axvspan((stopped - t0.timestamp()) / per, (resumed - t0.timestamp()) / per, facecolor="none",
                   edgecolor="silver", hatch="//", linewidth=0, label=None if "stopped" in seen else "stopped")
        seen.add("stopped")
    ax.set_xlabel(f"{unit} since the search started")
    ax.set_ylabel("group")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # one group: its number, no fractions
    ax.invert_yaxis()
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, not on them
    _, summary = timeline(df)
    share = summary.get("utilization", float("nan"))
    shown = f" (the first {MAX_GROUPS} of {len(groups)} groups drawn)" if len(groups) > MAX_GROUPS else ""
    running = " while a search ran" if "stopped" in seen else ""
    ax.set_title((f"Groups over time: utilization {share:.0%}{running}" if share == share else "Groups over time")
                 + shown)
    return fig

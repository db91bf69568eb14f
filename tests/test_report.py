"""Plots, `mpiopt report` and `mpiopt status` on a real run directory (tests/fixtures/report_run:
an ASHA search under mpiexec with completed, pruned and failed trials), in-process."""
from __future__ import annotations

import json
import re
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mpiopt
from mpiopt import plots
from mpiopt.cli import main
from mpiopt.journal import HEARTBEAT
from mpiopt.report import summary_rows, write_report
from mpiopt.status import status_text

FIXTURE = Path(__file__).parent / "fixtures" / "report_run"


@pytest.fixture(scope="module")
def df():
    return mpiopt.load_results(FIXTURE)


@pytest.fixture(scope="module")
def history():
    return mpiopt.load_history(FIXTURE)


def completed(df):
    return df[df.status == "completed"]


def test_the_fixture_has_what_the_plots_show(df):
    assert {"completed", "pruned", "failed"} <= set(df.status) and len(completed(df)) >= 8


def test_plots_of_completed_trials_say_how_few_of_the_trials_they_are(df):
    # under a scheduler the completed trials are the survivors of its rungs
    of = f"{len(completed(df)):,} completed trials of {len(df):,}"
    assert of in plots.plot_parallel(df).axes[0].get_title()
    assert of in plots.plot_slices(df)._suptitle.get_text()
    assert of in plots.plot_importance(df)._suptitle.get_text()
    every = completed(df)
    assert f"{len(every):,} completed trials)" in plots.plot_parallel(every).axes[0].get_title()
    assert ", 1 completed trial of " in plots.plot_slices(df[df.trial <= every.trial.min()])._suptitle.get_text()


def test_plots_cut_long_names_keep_the_spaces_order_of_categories_and_want_two_parameters(df):
    long = "a_really_quite_extraordinarily_long_parameter_name"
    table = df.rename(columns={"params_x": f"params_{long}"})
    table.attrs = {**df.attrs, "categories": {"kind": ["c", "b", "a"]}}
    shown = "a_really_quit…parameter_name"
    assert len(shown) == plots.SHORT_NAME and shown in [t.get_text() for t in plots.plot_importance(table)
                                                        .axes[0].get_yticklabels()]
    slices = plots.plot_slices(table)
    assert [ax.get_xlabel() for ax in slices.axes[:3]] == [shown, "y", "kind"]
    taken = sorted(set(completed(df)["params_kind"]), key=["c", "b", "a"].index)
    assert [t.get_text() for t in slices.axes[2].get_xticklabels()] == taken
    with pytest.raises(plots.PlotUnavailable, match="needs two parameters or more"):
        plots.plot_parallel(df.drop(columns=["params_y", "params_kind"]))


def test_plots_take_the_direction_of_the_run_the_table_came_from(tmp_path):
    run = copy_run(tmp_path)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("minimize: objective", "maximize: objective"))
    table = mpiopt.load_results(run)
    assert table.attrs["direction"] == "maximize"
    fig = plots.plot_history(table)
    best_line = fig.axes[0].lines[0].get_ydata()
    assert best_line[-1] == pytest.approx(completed(table).objective.max()) and np.all(np.diff(best_line) >= 0)
    assert "maximize" in fig._suptitle.get_text()
    # the figure of merit by its run's name for it, not the table's column `objective`
    config.write_text(config.read_text().replace("maximize: objective", "maximize: val_accuracy"))
    table = mpiopt.load_results(run)
    fig = plots.plot_history(table)
    assert "(maximize val_accuracy)" in fig._suptitle.get_text() and fig.axes[0].get_ylabel() == "val_accuracy"
    assert plots.plot_slices(table)._suptitle.get_text().startswith("Slices: val_accuracy against")


def test_a_direction_the_table_cannot_tell_must_be_said_and_be_one_of_two(df, tmp_path):
    import pandas as pd

    for plot in (plots.plot_history, plots.plot_parallel, plots.plot_slices):
        with pytest.raises(ValueError, match=r"direction: expected 'minimize' or 'maximize', got 'min'"):
            plot(df, direction="min")
        with pytest.raises(ValueError, match=r"direction: loss is not the run's figure of merit \(minimize "
                           r"objective\); pass direction="):
            plot(df, metric="loss")  # a maximized accuracy's direction is not its loss's
        merged = df.merge(pd.DataFrame({"trial": df.trial, "note": "n"}), on="trial")  # a table of the user's
        assert merged.attrs == {}
        with pytest.raises(ValueError, match=r"direction: this table does not say its run's direction .*a merge "
                           "with another table and read_csv drop it"):
            plot(merged)
        plot(merged, direction="minimize")
    with pytest.raises(ValueError, match=r"direction: expected"):
        plots.plot_curves(mpiopt.load_history(FIXTURE), df, direction="up")
    # the table as results.csv holds it, read with pandas: its times are text
    copy = copy_run(tmp_path)
    assert main(["results", str(copy)]) == 0
    from_csv = pd.read_csv(copy / "results.csv")
    fig = plots.plot_history(from_csv, direction="minimize")
    assert len(fig.axes[1].collections[0].get_offsets()) == len(completed(df))
    plots.plot_timeline(from_csv)


def test_plot_mistakes_say_what_is_wrong(df, history):
    with pytest.raises(ValueError, match=r"log_params: 'widht' is not a parameter of this table \(x, y, kind\)"):
        plots.plot_slices(df, log_params=["widht"])
    with pytest.raises(TypeError, match=r"plot_curves\(history, df\): the per-epoch table"):
        plots.plot_curves(df, history)
    with pytest.raises(TypeError, match=r"the plots take the results table \(mpiopt.load_results"):
        plots.plot_history(history)
    assert plots.plot_slices(df, log_params="x").axes[0].get_xscale() == "linear"  # one name; x spans under a decade
    # a model's reports name its figure of merit (val_accuracy), not `objective`: the default curves are its
    named = df.copy()
    named.attrs = {"direction": "minimize", "metric": "score"}
    fig = plots.plot_curves(history.rename(columns={"objective": "score"}), named)
    assert fig.axes[0].get_ylabel() == "score"


def test_history_plots_every_completed_trial_and_the_best_so_far(df):
    fig = plots.plot_history(df, direction="minimize")
    by_trial, by_time = fig.axes
    assert len(by_trial.collections[0].get_offsets()) == len(completed(df))
    assert len(by_time.collections[0].get_offsets()) == len(completed(df))
    best_line = by_trial.lines[0].get_ydata()
    assert best_line[-1] == pytest.approx(completed(df).objective.min())
    assert np.all(np.diff(best_line) <= 0)  # the best so far of a minimisation never rises
    assert by_time.get_xlabel() == "seconds since the search started"  # a search of seconds: no 0.00002 minutes


def test_the_plots_draw_the_metric_they_are_given(df):
    fig = plots.plot_history(df, direction="minimize", metric="loss")
    drawn = fig.axes[0].collections[0].get_offsets()[:, 1]
    assert sorted(drawn) == pytest.approx(sorted(completed(df).loss)) and fig.axes[0].get_ylabel() == "loss"
    assert not np.allclose(sorted(drawn), sorted(completed(df).objective))
    for plot in (plots.plot_history, plots.plot_parallel, plots.plot_slices, plots.plot_importance):
        # a misspelt metric is the caller's mistake, not data the plot lacks: no PlotUnavailable
        with pytest.raises(ValueError, match=r"metric: 'val_loss' is no column of this table \(its metrics: "
                                             r"objective, reported_objective, loss,") as raised:
            plot(df, metric="val_loss")
        assert not isinstance(raised.value, plots.PlotUnavailable)
        # the run's own figure of merit before any trial reported it: a plot to come
        named = df.drop(columns="loss")
        named.attrs = {**df.attrs, "metric": "loss"}
        with pytest.raises(plots.PlotUnavailable, match="no trial has reported loss yet"):
            plot(named, metric="loss")


def test_a_notebooks_wrong_inputs_are_named(df, monkeypatch, tmp_path):
    # a table of paused and promoted trials: one row a trial, so its timeline needs load_timeline's
    stretched = df.copy()
    stretched.attrs = {**df.attrs, "stretched": [4]}
    with pytest.raises(ValueError, match=r"trial 4 trained in several stretches .* pass mpiopt.load_timeline\(DIR\)"):
        plots.plot_timeline(stretched)
    with pytest.raises(TypeError, match=r"plot_timeline\(df\): .* this one has no status, start, group"):
        plots.plot_timeline(mpiopt.load_history(FIXTURE))
    # a misspelt log parameter is named before the plot counts its trials; a category has no log scale
    with pytest.raises(ValueError, match="log_params: 'xx' is not a parameter of this table"):
        plots.plot_importance(df.head(3), log_params=["xx"])
    with pytest.raises(ValueError, match="log_params: 'kind' is categorical"):
        plots.plot_slices(df, direction="minimize", log_params=["kind"])
    # trial numbers: whole numbers or their digits; ConfigError, as mpiopt names it
    for wrong in (1.7, True, "one"):
        with pytest.raises(mpiopt.ConfigError, match=f"trial: expected a trial number or 'best', got {wrong!r}"):
            mpiopt.best_params(FIXTURE, wrong)
    assert mpiopt.best_params(FIXTURE, "3") == mpiopt.best_params(FIXTURE, np.int64(3))
    monkeypatch.setenv("HOME", str(FIXTURE.parent))
    assert mpiopt.best_params(f"~/{FIXTURE.name}") == mpiopt.best_params(FIXTURE)
    assert "ConfigError" in mpiopt.__all__


def test_importance_gives_each_parameter_a_share(df):
    share = plots.parameter_importance(df)
    assert set(share) == {"x", "y", "kind"} and sum(share.values()) == pytest.approx(1.0)
    fig = plots.plot_importance(df, metric="loss")
    bars = fig.axes[0].patches
    assert len(bars) == 3 and sum(b.get_width() for b in bars) == pytest.approx(1.0)
    assert fig.axes[0].get_xlabel().startswith("share of loss's variation")


def test_importance_says_why_with_few_completed_trials(df):
    few = df[df.trial <= completed(df).trial.iloc[2]]
    with pytest.raises(plots.PlotUnavailable, match="at least 8 completed trials, has 3"):
        plots.plot_importance(few)


def test_parallel_coordinates_draw_a_line_a_completed_trial_across_every_parameter(df):
    fig = plots.plot_parallel(df, direction="minimize")
    ax = fig.axes[0]
    trial_lines = [line for line in ax.lines if len(line.get_xdata()) == 3]
    assert len(trial_lines) == len(completed(df))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y", "kind"]
    assert len(fig.axes) == 2  # and the colour bar of the figure of merit


def test_parallel_coordinates_and_slices_of_a_conditional_space(df):
    # `y` is inactive in some trials (its column empty): their lines go on through its axis, at
    # the `inactive` mark below it, and the other trials' axis is scaled on the active values;
    # a category no point stands near still has its tick
    cond = df.copy()
    cond.loc[cond.trial % 3 == 0, "params_y"] = np.nan
    ax = plots.plot_parallel(cond, direction="minimize").axes[0]
    trial_lines = [line for line in ax.lines if len(line.get_xdata()) == 3]
    assert len(trial_lines) == len(completed(df)) and not any(np.isnan(line.get_ydata()).any() for line in trial_lines)
    on_y = sorted(line.get_ydata()[1] for line in trial_lines)
    assert on_y[0] == plots.INACTIVE_AT and on_y[-1] == 1.0 and ax.get_ylim()[0] < plots.INACTIVE_AT
    assert "inactive" in [t.get_text() for t in ax.texts] and "nan" not in [t.get_text() for t in ax.texts]
    kind = plots.plot_slices(cond, direction="minimize").axes[2]
    left, right = kind.get_xlim()
    assert left < 0 and right > len(kind.get_xticks()) - 1


def test_a_conditional_log_uniform_axis_is_in_log_scale_and_labelled_with_its_values(df):
    cond = df.copy()
    cond["params_y"] = np.where(cond.trial % 3 == 0, np.nan, 10.0 ** (cond.trial % 4 - 3))  # 0.001 .. 1
    active = cond.loc[completed(cond).index, "params_y"].dropna()
    ax = plots.plot_parallel(cond, direction="minimize", log_params=["y"]).axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert f"{active.min():.3g}" in labels and f"{active.max():.3g}" in labels  # the values, not their logs
    on_y = sorted(line.get_ydata()[1] for line in ax.lines if len(line.get_xdata()) == 3)
    middle = [u for u in on_y if 0 < u < 1]
    spread = np.log10(sorted(set(active)))
    assert middle and all(np.isclose((np.log10(v) - spread[0]) / (spread[-1] - spread[0]), middle).any()
                          for v in set(active) if spread[0] < np.log10(v) < spread[-1])  # evenly in decades


def test_slices_draw_one_panel_a_parameter_categorical_ones_too(df):
    fig = plots.plot_slices(df, direction="minimize")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_xlabel() in ("x", "y", "kind")]
    assert [ax.get_xlabel() for ax in panels] == ["x", "y", "kind"]
    for ax in panels:
        assert len(ax.collections[0].get_offsets()) == len(completed(df))
    kinds = sorted(completed(df).params_kind.unique())
    assert [t.get_text() for t in panels[2].get_xticklabels()] == kinds


def test_an_integer_parameters_slice_has_whole_ticks(df):
    import pandas as pd

    with_n = df.assign(params_n=pd.array([2 + i % 2 for i in range(len(df))], dtype="Int64"))  # 2 and 3 only
    fig = plots.plot_slices(with_n, direction="minimize")
    ax = next(ax for ax in fig.axes if ax.get_xlabel() == "n")
    fig.canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_learning_curves_draw_every_reporting_trial_and_mark_the_pruned(df, history):
    fig = plots.plot_curves(history, df)
    ax = fig.axes[0]
    curves = [line for line in ax.lines if line.get_marker() != "x"]
    crosses = [line for line in ax.lines if line.get_marker() == "x"]
    assert len(curves) == history.trial.nunique()
    assert len(crosses) == (df.status == "pruned").sum()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"pruned ({(df.status == 'pruned').sum()})" in labels


def test_a_diverged_trials_curve_is_drawn_up_to_its_nan_epoch():
    import pandas as pd

    nan, inf = float("nan"), float("inf")
    df = pd.DataFrame({"trial": [0, 1, 2, 3], "status": ["diverged", "diverged", "completed", "diverged"],
                       "objective": [nan, nan, 0.5, nan]})
    history = pd.DataFrame({"trial": [0, 0, 1, 1, 1, 2, 2, 3], "epoch": [1, 2, 1, 2, 3, 1, 2, 1],
                            "loss": [1.0, nan, 1.0, 0.9, inf, 1.0, 0.5, nan]})
    ax = plots.plot_curves(history, df, metric="loss", direction="minimize").axes[0]
    diverged = [line for line in ax.lines if line.get_color() == plots.STATUS_COLOURS["diverged"]]
    # one finite epoch shows as a dot (a line of one point shows nothing), two as a line; trial 3,
    # NaN from its first epoch, has no curve, and the legend counts the curves drawn
    assert sorted((len(line.get_xdata()), line.get_marker()) for line in diverged) == [(1, "."), (2, "None")]
    assert "diverged (2 of 3)" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_learning_curves_thinned_count_in_the_legend_of_how_many(df, history, monkeypatch):
    monkeypatch.setattr(plots, "MAX_LINES", 3)
    labels = [t.get_text() for t in plots.plot_curves(history, df).axes[0].get_legend().get_texts()]
    every = df[df.trial.isin(history.trial)].status.value_counts()
    assert sum(int(label.split("(")[1].split()[0].rstrip(")")) for label in labels) == 3
    assert any(f" of {every[label.split()[0]]})" in label for label in labels)


def test_learning_curves_say_why_without_reports(df):
    with pytest.raises(plots.PlotUnavailable, match="no per-epoch reports"):
        plots.plot_curves(mpiopt.load_history(FIXTURE).iloc[0:0], df)


def test_learning_curves_of_a_table_read_from_csv_ask_which_metric(df):
    # results.csv does not say which of a model's reported metrics is the figure of merit
    history = mpiopt.load_history(FIXTURE).rename(columns={"objective": "val_accuracy"}).assign(val_loss=1.0)
    with pytest.raises(plots.PlotUnavailable, match="pass metric= one of val_accuracy, loss, val_loss"):
        plots.plot_curves(history, df.copy())
    assert plots.plot_curves(history, df, metric="val_accuracy", direction="maximize").axes[0].lines


def test_timeline_draws_a_bar_a_trial_on_its_group_with_the_utilization(df):
    fig = plots.plot_timeline(df)
    ax = fig.axes[0]
    bars = [path.get_extents() for c in ax.collections for path in c.get_paths()]
    assert len(bars) == len(df)
    assert {round((b.y0 + b.y1) / 2) for b in bars} == set(df.group.astype(int))
    assert "utilization" in ax.get_title()


def test_numeric_choices_get_a_tick_each_and_none_between(df):
    from mpiopt.analysis import numeric_choices

    assert numeric_choices({"batch_size": {"type": "categorical", "choices": [32, 64, 128]},
                            "act": {"choices": ["relu", "tanh"]}, "flag": {"choices": [True, False]},
                            "x": {"type": "real", "low": 0.0, "high": 1.0}}) == {"batch_size": [32, 64, 128]}
    batch = df.assign(params_batch=[(32, 64, 128)[i % 3] for i in range(len(df))])
    batch.attrs = {**df.attrs, "choices": {"batch": [32, 64, 128]}}
    ax = next(a for a in plots.plot_slices(batch, direction="minimize").axes if a.get_xlabel() == "batch")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "64", "128"]
    parallel = plots.plot_parallel(batch, direction="minimize").axes[0]
    assert {"32", "64", "128"} <= {t.get_text() for t in parallel.texts}


def test_timeline_hatches_the_time_between_a_kill_and_its_resume(df):
    starts = plots._with_times(df)["start"]
    t0 = starts.min().timestamp()
    stopped = plots.plot_timeline(df.copy()).axes[0]
    assert "stopped" not in [t.get_text() for t in stopped.get_legend().get_texts()]
    resumed = df.copy()
    resumed.attrs["runs"] = [(t0, t0 + 1.0, None), (t0 + 3.0, starts.max().timestamp() + 60, None)]
    ax = plots.plot_timeline(resumed).axes[0]
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 1 and hatched[0].get_extents().x1 > hatched[0].get_extents().x0
    assert "stopped" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_title().endswith("while a search ran")


def test_the_summary_tells_the_wall_time_of_a_resumed_search_running_and_from_start_to_end(tmp_path):
    from mpiopt.report import _wall_time

    assert _wall_time({"active_s": 90.0, "runs": 1, "span_s": 90.0}) == "1.5 min"
    assert _wall_time({"active_s": 4.2, "runs": 1, "span_s": 4.2}) == "4.2 s"  # not "0.1 min"
    assert _wall_time({"active_s": 4.2, "runs": 2, "span_s": 9000.0}) == \
        "4.2 s running, in 2 runs (2.5 h from the first start to the last end)"
    assert _wall_time({"active_s": 90.0, "runs": 2, "span_s": 600.0}) == \
        "1.5 min running, in 2 runs (10.0 min from the first start to the last end)"


def test_timeline_of_one_group_labels_the_group_not_fractions(df):
    ax = plots.plot_timeline(df.assign(group=0)).axes[0]
    low, high = sorted(ax.get_ylim())
    assert [t for t in ax.get_yticks() if low <= t <= high] == [0]


def test_a_slice_of_one_value_has_one_tick_and_curves_whole_epochs(df, history):
    one = df.assign(params_x=2.5)
    ax = next(a for a in plots.plot_slices(one, direction="minimize").axes if a.get_xlabel() == "x")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2.5"]
    short = history[history.epoch <= 2]
    ax = plots.plot_curves(short, df).axes[0]
    low, high = ax.get_xlim()
    assert all(float(t).is_integer() for t in ax.get_xticks() if low <= t <= high)


def test_the_summary_gives_reals_to_six_digits_and_counts_groups(tmp_path):
    from mpiopt.report import summary_rows

    run = copy_run(tmp_path)
    table = mpiopt.load_results(run)
    rows = dict(summary_rows(run, {}, table, {"utilization": 0.5, "groups": 1}, "minimize", "objective"))
    assert rows["group utilization"] == "50% of 1 group"
    assert rows["best objective (minimize)"].endswith(": x=3.6063, y=0.0439723, kind=a")


def test_the_best_trial_as_yaml_gives_the_ranks_it_trained_on(tmp_path):
    import yaml

    from mpiopt._results_view import best_yaml

    run = copy_run(tmp_path)
    config = run / "config.yaml"
    spaces = Path(__file__).parent / "spaces"  # the copy's function path, as the fixture's resolves
    config.write_text(config.read_text().replace("group_size: 1", "group_size: 2")  # 1 rank a group, as it ran
                      .replace("../../spaces/", f"{spaces}/"))
    table = mpiopt.load_results(run)
    top = table[table.status == "completed"].sort_values("objective").head(1)
    assert yaml.safe_load(best_yaml(str(run), top, "minimize", "objective"))["training"]["group_size"] == 1


def big_table(n: int, groups: int):
    """A results table of `n` completed trials of a 2-parameter search on `groups` groups."""
    import pandas as pd

    rng = np.random.default_rng(0)
    start = pd.Timestamp("2026-01-01") + pd.to_timedelta(np.arange(n) * 0.01, unit="s")
    x = rng.random(n)
    return pd.DataFrame({"trial": np.arange(n), "status": "completed", "objective": (x - 0.3) ** 2 + rng.random(n),
                         "params_x": x, "params_y": rng.random(n), "group": np.arange(n) % groups, "start": start,
                         "end": start + pd.to_timedelta(1.0, unit="s")})


def test_plots_of_a_large_search_draw_its_best_trials_and_a_sample_of_the_rest():
    df = big_table(20000, 500)
    df.attrs["direction"] = "minimize"  # as load_results says it
    fig = plots.plot_history(df)
    by_trial = fig.axes[0]
    points = by_trial.collections[0].get_offsets()
    assert len(points) == plots.MAX_POINTS and "2,000 of 20,000 drawn" in fig.texts[0].get_text()
    best = np.sort(df.objective)[:plots.MAX_POINTS // 10]
    assert set(best) <= set(points[:, 1])  # the best trials are always drawn
    assert by_trial.lines[0].get_ydata().min() == df.objective.min()  # the best-so-far line from every trial
    ax = plots.plot_timeline(df).axes[0]
    assert len(ax.collections) == plots.MAX_GROUPS and "the first 64 of 500 groups" in ax.get_title()
    ax = plots.plot_parallel(df).axes[0]
    assert len(ax.lines) == plots.MAX_LINES + 2  # and an axis a parameter
    fig = plots.plot_slices(df)
    assert all(len(c.get_offsets()) == plots.MAX_POINTS for a in fig.axes[:2] for c in a.collections)


def test_the_search_never_imports_matplotlib_and_no_plot_needs_pyplot():
    # in a fresh interpreter: other tests' libraries may load pyplot into this one
    import subprocess
    import sys

    code = ("import sys, mpiopt, mpiopt.cli, mpiopt.coordinator, mpiopt.status\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'sklearn')))\n"
            f"mpiopt.plot_timeline(mpiopt.load_results({str(FIXTURE)!r}))\n"
            "print('matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "False"]


# -- the report -------------------------------------------------------------------------------------
def copy_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    return run


def test_report_writes_a_png_a_plot_and_inlines_them(tmp_path):
    run = copy_run(tmp_path)
    assert main(["report", str(run)]) == 0
    out = run / "report"
    names = {p.name for p in out.glob("*.png")}
    assert names == {"history.png", "importance.png", "parallel.png", "slices.png", "curves.png", "timeline.png"}
    page = (out / "report.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 6 and "Not drawn" not in page
    assert "best objective (minimize)" in page and "Top trials" in page
    assert "40 finished of a budget of 40<" in page


def test_a_report_that_fails_to_write_leaves_no_new_folder_and_an_old_report_whole(tmp_path, monkeypatch):
    import errno

    from mpiopt import report

    run = copy_run(tmp_path)
    real = report.atomic_write

    def full_at_the_page(path, data, **kw):
        if path.name == "report.html":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data, **kw)

    monkeypatch.setattr(report, "atomic_write", full_at_the_page)
    with pytest.raises(OSError, match="No space"):
        write_report(run, tmp_path / "new" / "deeper" / "report")
    assert not (tmp_path / "new").exists()  # the folders it made went with the plots it wrote
    monkeypatch.setattr(report, "atomic_write", real)
    old = write_report(run, tmp_path / "old")
    monkeypatch.setattr(report, "atomic_write", full_at_the_page)
    with pytest.raises(OSError, match="No space"):
        write_report(run, tmp_path / "old")
    assert old.exists() and len(list((tmp_path / "old").glob("*.png"))) == 6  # an old report is not undone


@pytest.mark.parametrize("code,said", [("ENOSPC", True), ("EROFS", False)])
def test_a_results_table_left_stale_by_a_full_disk_is_said_and_a_read_only_one_is_not(tmp_path, monkeypatch,
                                                                                      caplog, code, said):
    import errno

    from mpiopt import _files
    from mpiopt.analysis import refresh_results_csv

    run = copy_run(tmp_path)
    (run / "results.csv").unlink()

    def failing(path, data, **kw):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    monkeypatch.setattr(_files, "atomic_write", failing)
    with caplog.at_level("WARNING"):
        assert refresh_results_csv(run) is False
    assert ("results.csv not rewritten from the journal: No space left on device" in caplog.text) is said


def test_report_of_a_killed_search_with_no_completed_trial_says_why(tmp_path):
    run = copy_run(tmp_path)
    lines = (run / "trials.jsonl").read_text().splitlines()
    first_completed = next(i for i, line in enumerate(lines) if '"status":"completed"' in line)
    # a kill leaves the journal's first lines, and the last one torn
    (run / "trials.jsonl").write_text("\n".join(lines[:first_completed]) + "\n" + lines[first_completed][:20])
    page = write_report(run, tmp_path / "elsewhere").read_text()
    assert page.count("Not drawn: no trial has completed") == 4  # history, importance, parallel, slices
    assert page.count('<img src="data:image/png;base64,') == 2  # curves and timeline still drawn
    assert "interrupted" in page
    shown = mpiopt.load_results(run).status
    finished = int(shown.isin(["failed", "pruned", "timeout", "diverged"]).sum())
    assert 0 < finished < len(shown)
    assert f"{finished} finished of a budget of 40 ({len(shown) - finished} more started)" in page


def test_report_with_no_completed_trial_lists_the_failures_and_their_errors(tmp_path):
    run = copy_run(tmp_path)
    kept = [line for line in (run / "trials.jsonl").read_text().splitlines() if '"status":"completed"' not in line]
    (run / "trials.jsonl").write_text("\n".join(kept) + "\n")
    page = write_report(run, tmp_path / "elsewhere").read_text()
    top = page.split("<h2>Top trials</h2>")[1].split("<section")[0]
    assert "No trial completed. The first that ended otherwise, errors first:" in top
    assert "<th>error</th>" in top and "<th>objective</th>" not in top
    assert "<td>failed</td>" in top and "<td>completed</td>" not in top


def test_a_parameter_named_like_a_column_of_the_table_keeps_its_prefix():
    from mpiopt import _results_view as view
    from mpiopt.report import _top_table

    df = mpiopt.load_results(FIXTURE).assign(params_epochs=3)  # a searched `epochs` beside the epochs trained
    header = view.table(df).splitlines()[0].split()
    assert "params_epochs" in header and header.count("epochs") == 1 and "x" in header
    page = _top_table(df, "minimize")
    assert "<th>params_epochs</th>" in page and page.count("<th>epochs</th>") == 1
    assert "<th>rung</th>" in page  # as mpiopt results shows it, where a scheduler judged trials
    assert "<th>rung</th>" not in _top_table(df.drop(columns="rung"), "minimize")


def test_the_top_trials_show_a_k_fold_spread_and_a_pareto_mark_where_the_search_has_them():
    from mpiopt.report import _top_table

    df = mpiopt.load_results(FIXTURE)
    assert "<th>objective_std</th>" not in _top_table(df, "minimize") and "<th>pareto</th>" not in _top_table(
        df, "minimize")
    marked = df.assign(objective_std=0.1, pareto=df.trial % 2 == 0)
    page = _top_table(marked, "minimize")
    assert "<th>objective_std</th>" in page and "<th>pareto</th>" in page
    # a Pareto search's: its front first, as mpiopt results lists it, whatever the first goal says
    front = marked.assign(pareto=marked.objective.rank(method="first") > 3)  # all but the 3 best by the first goal
    page = _top_table(front, "minimize", [("objective", "minimize")])
    shown = [int(n) for n in re.findall(r"<tr>\s*<td>(\d+)</td>", page)]
    on = front[front.pareto].sort_values("objective")
    assert shown[:len(on)] == list(on.trial)[:10] and not set(shown[len(on):]) & set(on.trial)


def test_the_top_trials_of_a_search_with_none_finished_are_those_started_best_reported_first():
    from mpiopt.report import _top_table

    df = mpiopt.load_results(FIXTURE)
    killed = df[df.reported_objective.notna()].assign(status="interrupted")
    page = _top_table(killed, "minimize")
    assert "No trial has finished yet. Those started, by the best epoch each reported:" in page
    shown = [int(n) for n in re.findall(r"<tr>\s*<td>(\d+)</td>", page)]
    assert shown == list(killed.sort_values("reported_objective").trial[:10])
    assert "No trial has started yet." in _top_table(df.iloc[0:0], "minimize")


def test_report_out_may_name_the_page(tmp_path):
    page = write_report(copy_run(tmp_path), tmp_path / "shared" / "search.html")
    assert page == tmp_path / "shared" / "search.html" and page.is_file()
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == ["search.html"]  # it embeds its plots


def test_report_out_named_like_an_image_is_refused(tmp_path, capsys):
    assert main(["report", str(copy_run(tmp_path)), "--out", str(tmp_path / "plots" / "page.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the report is an HTML page (name it .html) or a folder" in err[0]
    assert not (tmp_path / "plots").exists()


@pytest.mark.parametrize("out", ["space.yaml", "space.yaml/report"])
def test_report_out_where_a_file_is_in_the_way_is_refused(tmp_path, capsys, out):
    run = copy_run(tmp_path)
    (tmp_path / "space.yaml").write_text("kept\n")
    assert main(["report", str(run), "--out", str(tmp_path / out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mpiopt: error: --out {tmp_path / out}: cannot write here: {tmp_path / 'space.yaml'} exists and "
                   "is not a directory"]
    assert (tmp_path / "space.yaml").read_text() == "kept\n"


def test_report_of_a_missing_directory_is_a_one_line_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such run directory" in err[0]


# -- status -----------------------------------------------------------------------------------------
def beat(run: Path, state: str, age_s: float, **more) -> None:
    (run / HEARTBEAT).write_text(json.dumps({"state": state, "time": time.time() - age_s, "host": "n1", "pid": 7,
                                             **more}))


def test_status_of_a_finished_search(tmp_path):
    run = copy_run(tmp_path)
    beat(run, "ended", 120)
    text = status_text(str(run))
    assert "ended 2 min ago\n" in text
    stopped = "search stopped: 7 trials failed (search.max_failures: 7); the most common error (7 of 7): E"
    beat(run, "ended", 120, stopped=stopped)  # a search that ended before its budget says why
    assert status_text(str(run)).splitlines()[0].endswith(f"ended 2 min ago: {stopped}")
    assert dict(summary_rows(run, {}, mpiopt.load_results(run), {}, "minimize", "objective"))["state"] == \
        f"ended: {stopped}"
    assert "40 of 40 finished (100%): 10 completed, 7 failed, 23 pruned" in text
    lost = "every group was lost with its node (their ranks went silent)"  # the trials left need a --resume
    beat(run, "ended", 120, stopped=lost, space="space.yaml", ranks=5, nodes=2)
    assert status_text(str(run)).splitlines()[0] == (
        f"{run}: ended 2 min ago: {lost}; `mpiexec -n 5 mpiopt search space.yaml --out {run} --resume` continues "
        "it on 5 ranks on the 2 nodes it ran on, as it ran (or your batch system's launcher; --np starts every "
        "rank here)")
    assert "best objective: 8.34627 at trial 39 (x=3.6063, y=0.0439723, kind=a)" in text and "groups:" not in text
    journal = run / "trials.jsonl"
    journal.write_bytes(journal.read_bytes()[:-30])  # killed mid-write: status says so, as results does
    assert status_text(str(run)).splitlines()[-1].endswith("skipped a torn last line (the search was stopped "
                                                           "mid-write)")
    (run / "config.yaml").unlink()  # a run directory copied without it
    assert "trials: 39 finished (the budget is unknown: no readable config.yaml): 9 completed" in status_text(str(run))
    for garbage in ("garbage", "[]", '{"state": "running", "time": null}', '{"state": "running", "time": "x"}'):
        (run / "heartbeat.json").write_text(garbage)
        assert status_text(str(run)).splitlines()[0].endswith("its heartbeat.json is unreadable: whether it runs is "
                                                              "unknown"), garbage


def test_status_of_a_search_gone_silent_on_a_full_file_system_says_it_may_have_stopped_on_it(tmp_path,
                                                                                               monkeypatch):
    import shutil
    from collections import namedtuple

    run = copy_run(tmp_path)
    beat(run, "running", 300)  # its last heartbeat: the one of the stop could not be written
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(20 * 2**20, 20 * 2**20 - 4096, 4096))
    assert "no heartbeat for 5 min (killed, or its node lost, or stopped on its full file system (0.0 MiB free)); " \
        in status_text(str(run))


def test_status_of_a_killed_search_says_so_and_how_to_go_on(tmp_path):
    run = copy_run(tmp_path)
    lines = (run / "trials.jsonl").read_text().splitlines()
    (run / "trials.jsonl").write_text("\n".join(lines[:60]) + "\n")
    beat(run, "running", 300)
    text = status_text(str(run))
    assert "not running: no heartbeat for 5 min" in text and "--resume" in text
    assert "interrupted (run again on --resume)" in text and "full file system" not in text
    # a job across nodes goes on across the same nodes: --np, every rank here, makes other groups
    beat(run, "running", 300, ranks=5, nodes=2)
    first = status_text(str(run)).splitlines()[0]
    assert "`mpiexec -n 5 mpiopt search" in first and "continues it on 5 ranks on the 2 nodes it ran on" in first
    assert "--np 5" not in first
    beat(run, "running", 300, ranks=5, nodes=1)
    assert "--resume --np 5` continues it on 5 ranks, as it ran" in status_text(str(run)).splitlines()[0]
    # a budget lowered by --trials, which a plain --resume would not keep: the command keeps it
    (tmp_path / "space.yaml").write_text("search: {trials: 60}\n")
    beat(run, "running", 300, space=str(tmp_path / "space.yaml"))
    assert "--resume --trials 40` continues it" in status_text(str(run)).splitlines()[0]
    (tmp_path / "space.yaml").write_text("search: {trials: 30}\n")  # raised: a plain --resume keeps it
    assert "--resume` continues it" in status_text(str(run)).splitlines()[0]


def test_results_of_a_killed_search_rewrite_the_table_it_left_running(tmp_path, capsys):
    import pandas as pd

    from mpiopt.journal import read_journal, replay, results_csv

    run = copy_run(tmp_path)
    lines = (run / "trials.jsonl").read_text().splitlines()
    (run / "trials.jsonl").write_text("\n".join(lines[:60]) + "\n")
    params = ["x", "y", "kind"]
    # the last table the search wrote before kill -9: a view of a live search
    (run / "results.csv").write_bytes(results_csv(replay(read_journal(run / "trials.jsonl")[0]).values(), params,
                                                  live=True))
    assert "running" in set(pd.read_csv(run / "results.csv").status)
    beat(run, "running", 1)  # a search that may still run (on another node): its table is left alone
    assert main(["results", str(run)]) == 0
    assert "running" in set(pd.read_csv(run / "results.csv").status)
    beat(run, "running", 300)  # stopped: the table now says what the journal says
    assert main(["results", str(run)]) == 0
    table = pd.read_csv(run / "results.csv")
    assert "running" not in set(table.status) and "interrupted" in set(table.status)
    assert list(table.status) == list(mpiopt.load_results(run).status)
    (run / "results.csv").unlink()  # deleted: written again from the journal
    assert main(["results", str(run)]) == 0
    assert pd.read_csv(run / "results.csv").equals(table)
    capsys.readouterr()


def test_status_of_a_resumed_search_runs_only_the_trials_it_started(tmp_path):
    # killed with trials 15-18 running; the --resume has run trial 16 again, and not yet the others
    run = copy_run(tmp_path)
    lines = (run / "trials.jsonl").read_text().splitlines()[:60]
    since = time.time() - 10
    first = next(e for e in map(json.loads, lines) if e["event"] == "start" and e["trial"] == 16)
    again = {**first, "group": 1, "time": since + 2}
    (run / "trials.jsonl").write_text("\n".join([*lines, json.dumps(again)]) + "\n")
    (run / HEARTBEAT).write_text(json.dumps({"state": "running", "time": time.time() - 1, "host": "n1", "pid": 7,
                                             "since": since}))
    text = status_text(str(run))
    assert "1 running, 3 interrupted (this search runs them again)" in text, text
    groups = text.split("groups:\n")[1].splitlines()
    assert len(groups) == 1 and groups[0].startswith("  group 1: trial 16, "), groups


def test_rates_leave_out_the_time_between_a_kill_and_its_resume():
    from mpiopt.status import _per_hour

    ends = [10.0 * k for k in range(1, 11)]  # 10 trials in 100 s, then killed for 900 s
    assert _per_hour(ends, [0.0], now=1010.0, dead=None) == pytest.approx(10 / 1010 * 3600)
    assert _per_hour(ends, [0.0], now=1010.0, dead=(100.0, 1000.0)) == pytest.approx(10 / 110 * 3600)


def test_no_rate_over_a_few_milliseconds_of_trials():
    from mpiopt.status import _per_hour

    # 6 function trials of a millisecond each: '543 trials/s' said nothing of the search
    ends = [0.002 * k for k in range(1, 7)]
    assert _per_hour(ends, [0.0], now=0.012, dead=None) == 0.0
    assert _per_hour(ends, [0.0], now=1.5, dead=None) == pytest.approx(6 / 1.5 * 3600)


def test_status_sees_at_once_that_a_coordinator_on_this_machine_is_gone(tmp_path):
    run = copy_run(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid now names no process
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # dead, and not reaped until zombie.wait()
    wait_until_dead(zombie.pid)
    here = socket.gethostname()
    for pid, host, said in ((gone.pid, here, f": not running: its coordinator (pid {gone.pid} on {here}) is gone"),
                            (zombie.pid, here, f": not running: its coordinator (pid {zombie.pid} on {here}) is gone"),
                            (os.getpid(), here, ": running (pid"),
                            (gone.pid, "another-node", ": running (pid")):  # there, only the heartbeat tells
        (run / HEARTBEAT).write_text(json.dumps({"state": "running", "time": time.time() - 1, "host": host,
                                                 "pid": pid}))
        line = status_text(str(run)).splitlines()[0]
        assert said in line, line
    zombie.wait()


def test_status_of_a_search_still_in_its_preflight_says_starting(tmp_path):
    # the coordinator holds the directory (its lock file names it) and has sent no heartbeat yet;
    # a resumed search's lock is newer than the last search's heartbeat
    from mpiopt.journal import LOCK, iso

    run = copy_run(tmp_path)
    here = socket.gethostname()
    (run / HEARTBEAT).unlink(missing_ok=True)
    journal = (run / "trials.jsonl").read_text()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    for pid, host, said in ((os.getpid(), here, f": starting (pid {os.getpid()} on {here}): the pre-flight check"),
                            (gone.pid, here, f": never started: its coordinator (pid {gone.pid} on {here}) is gone"),
                            (os.getpid(), "another-node", ": no heartbeat file")):  # there, nothing tells
        (run / "trials.jsonl").write_text(journal.splitlines()[0] + "\n")  # its header: no trial yet
        (run / LOCK).write_text(f"pid {pid} on {host} since {iso(time.time() - 5)}\n")
        line = status_text(str(run)).splitlines()[0]
        assert said in line, line
    (run / "trials.jsonl").write_text(journal)
    (run / LOCK).write_text(f"pid {os.getpid()} on {here} since {iso(time.time() - 5)}\n")
    beat(run, "ended", 60)  # the search that ran before the --resume
    assert ": starting (pid" in status_text(str(run)).splitlines()[0]
    beat(run, "running", 1)  # the resumed search's first heartbeat
    assert ": running (pid" in status_text(str(run)).splitlines()[0]


def test_a_search_with_trials_and_no_heartbeat_file_stopped_not_never_started(tmp_path):
    # its heartbeat file deleted, or a copy of the run without it: the journal tells it ran
    from mpiopt.journal import LOCK, iso

    run = copy_run(tmp_path)
    (run / HEARTBEAT).unlink(missing_ok=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = socket.gethostname()
    (run / LOCK).write_text(f"pid {gone.pid} on {here} since {iso(time.time() - 5)}\n")
    line = status_text(str(run)).splitlines()[0]
    assert f": not running: its coordinator (pid {gone.pid} on {here}) is gone (ended or killed" in line, line
    assert main(["report", str(run)]) == 0
    assert "<th>state</th><td>stopped</td>" in (run / "report" / "report.html").read_text()


def wait_until_dead(pid: int) -> None:
    """Until the child `pid` has exited (without reaping it)."""
    for _ in range(500):
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return
        time.sleep(0.01)
    raise AssertionError(f"child {pid} did not exit")


def test_status_of_a_running_search_lists_groups_and_warns_of_a_silent_one(tmp_path):
    run = copy_run(tmp_path)
    lines = (run / "trials.jsonl").read_text().splitlines()
    (run / "trials.jsonl").write_text("\n".join(lines[:60]) + "\n")
    (run / "config.yaml").write_text((run / "config.yaml").read_text().replace("time_limit: null",
                                                                                 "time_limit: 30"))
    beat(run, "running", 2)
    events = [json.loads(line) for line in lines[:60]]
    last = max(e.get("time") or e.get("end") or 0 for e in events)
    text = status_text(str(run), now=last + 45)
    assert text.splitlines()[0].endswith("heartbeat 2 s ago)")
    assert "groups:" in text and text.count("WARNING: silent for") >= 1 and "past its time limit of 30 s" in text
    # a trial sent ahead to a busy group waits behind its running one: listed as next, never silent
    starts = {e["trial"]: e for e in events if e["event"] == "start"}
    finished = {e["trial"] for e in events if e["event"] == "finish"}
    group = starts[min(n for n in starts if n not in finished)]["group"]
    waiting = sorted(n for n, e in starts.items() if n not in finished and e["group"] == group)
    ahead = {**starts[waiting[0]], "trial": 999, "time": last + 1}
    (run / "trials.jsonl").write_text("\n".join(lines[:60] + [json.dumps(ahead)]) + "\n")
    group_lines = [line for line in status_text(str(run), now=last + 45).splitlines()
                   if line.startswith(f"  group {group}:")]
    queued = ", ".join(map(str, waiting[1:] + [999]))
    assert len(group_lines) == 1 and group_lines[0].startswith(f"  group {group}: trial {waiting[0]}, "), group_lines
    assert group_lines[0].endswith(f"; next: trial{'s' * (len(waiting) > 1)} {queued} (sent ahead)"), group_lines
    # and the count says how many run and how many wait, sent ahead
    counted = next(line for line in status_text(str(run), now=last + 45).splitlines() if line.startswith("trials:"))
    busy = {starts[n]["group"] for n in starts if n not in finished}
    running = len([n for n in starts if n not in finished]) + 1
    assert counted.endswith(f"; {len(busy)} running, {running - len(busy)} sent ahead"), counted


def test_status_before_the_first_completed_trial_names_the_best_step_reported(tmp_path):
    # under asha the first trial completes once one has climbed every rung; the reports tell sooner
    run = copy_run(tmp_path)
    lines = (run / "trials.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    first_done = next(i for i, e in enumerate(events) if e["event"] == "finish" and e["status"] == "completed")
    (run / "trials.jsonl").write_text("\n".join(lines[:first_done]) + "\n")
    best = min((e for e in events[:first_done] if e["event"] == "report"), key=lambda e: e["metrics"]["objective"])
    assert f"best: no trial has completed; the best step so far: objective {best['metrics']['objective']:.6g} at " \
           f"trial {best['trial']}, step {best['epoch']}" in status_text(str(run)).splitlines()
    (run / "trials.jsonl").write_text(lines[0] + "\n")
    assert "best: no trial has completed" in status_text(str(run)).splitlines()


def test_a_torn_journal_line_is_warned_of_once_however_many_views_read_it(tmp_path, caplog):
    run = copy_run(tmp_path)
    journal = run / "trials.jsonl"
    journal.write_bytes(journal.read_bytes()[:-30])
    with caplog.at_level("WARNING", logger="mpiopt"):
        mpiopt.load_results(run), mpiopt.load_history(run), mpiopt.load_timeline(run)
    assert sum("skipped a torn last line" in r.getMessage() for r in caplog.records) == 1


def test_status_of_a_running_search_names_a_group_it_lost(tmp_path):
    run = copy_run(tmp_path)
    lines = (run / "trials.jsonl").read_text().splitlines()[:60]
    last = max(json.loads(line).get("time") or json.loads(line).get("end") or 0 for line in lines)
    lost = json.dumps({"event": "lost", "group": 7, "time": last - 20})
    (run / "trials.jsonl").write_text("\n".join([*lines, lost]) + "\n")
    beat(run, "running", 2)
    text = status_text(str(run), now=last + 40)
    assert "  group 7: lost 60 s ago (its ranks went silent: a node lost?); the search goes on without it" in \
        text.splitlines(), text
    back = json.dumps({"event": "back", "group": 7, "time": last - 10})
    (run / "trials.jsonl").write_text("\n".join([*lines, lost, back]) + "\n")
    assert "group 7: lost" not in status_text(str(run), now=last + 40)


def test_the_progress_line_comes_at_a_tenth_of_the_budget_but_not_often():
    from mpiopt.coordinator import Progress

    now = [0.0]
    progress = Progress(100, 0, clock=lambda: now[0])
    assert not progress.due(5)
    assert not progress.due(10)  # a tenth passed, but within a minute of the start
    now[0] = 61.0
    assert progress.due(11) and not progress.due(12)
    now[0] = 130.0
    assert not progress.due(19) and progress.due(20)
    now[0] = 730.0
    assert progress.due(21)  # ten minutes without a line
    assert progress.line(25) == "25/100 trials (25%), 123 trials/h, about 36 min left"


def test_a_rate_is_told_in_the_unit_of_time_that_keeps_its_number_short():
    from mpiopt._results_view import format_rate

    assert format_rate(123.4, "trials") == "123 trials/h"
    assert format_rate(2700.0, "epochs") == "45 epochs/min"
    assert format_rate(58840.0, "trials") == "16 trials/s"


def test_under_asha_the_progress_line_counts_the_budget_in_epochs():
    from mpiopt.coordinator import Progress

    now = [0.0]
    progress = Progress(100, 0, clock=lambda: now[0], per_trial=3.0)  # about 300 epochs for the budget
    now[0] = 61.0
    assert not progress.due(2, 29) and progress.due(2, 30)  # a tenth of the epochs, few trials finished
    now[0] = 1800.0
    assert progress.line(5, 150, epochs_left=200.0) == ("5/100 trials (5%), 150 epochs trained, about 200 to go, "
                                                        "300 epochs/h, about 40 min left")


def test_plot_pareto_takes_the_goals_as_the_file_gives_them():
    df = mpiopt.load_results(FIXTURE).assign(size=lambda d: d.trial * 1.0, pareto=lambda d: d.trial % 3 == 0)
    fig = plots.plot_pareto(df, {"objective": "minimize", "size": "minimize"})
    assert fig._suptitle.get_text() == "Pareto front"
    assert fig.axes[0].lines[0].get_linestyle() == "-"  # two goals: the front is a line
    four = df.assign(cost=lambda d: -d.trial * 1.0, time=lambda d: d.trial % 5 * 1.0)
    fig = plots.plot_pareto(four, {"objective": "minimize", "size": "minimize", "cost": "minimize", "time": "maximize"})
    drawn = [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes if ax.get_visible()]
    assert len(drawn) == 6 and ("cost (minimize)", "time (maximize)") in drawn  # every pair
    assert {ax.lines[0].get_linestyle() for ax in fig.axes} == {"None"}  # more goals: no line through a pair's view
    for goals, message in [({"objective": "minimize"}, "goals: expected two goals or more"),
                           ({"objective": "min", "size": "minimize"}, "goals: expected 'minimize' or 'maximize', "
                                                                      "got 'min'")]:
        with pytest.raises(ValueError, match=message):
            plots.plot_pareto(df, goals)
    with pytest.raises(plots.PlotUnavailable, match="not a Pareto search"):
        plots.plot_pareto(df.drop(columns="pareto"), {"objective": "minimize", "size": "minimize"})


def test_the_summary_leaves_out_a_utilization_it_cannot_tell(tmp_path):
    from mpiopt.report import summary_rows

    run = copy_run(tmp_path)
    df = mpiopt.load_results(run)
    rows = dict(summary_rows(run, {}, df, {"utilization": float("nan"), "groups": 1}, "minimize", "objective"))
    assert "group utilization" not in rows
    rows = dict(summary_rows(run, {}, df, {"utilization": 0.5, "groups": 2}, "minimize", "objective"))
    assert rows["group utilization"] == "50% of 2 groups"


def test_characters_the_plots_font_lacks_are_said_once_not_warned_of_per_plot(recwarn):
    from mpiopt.report import _draw

    def make():
        fig = plots._figure()
        fig.suptitle("学习率")
        return fig

    lacking: set[str] = set()
    section = _draw("x", "X", make, lacking)
    assert section.png and lacking == {"学", "习", "率"} and not [w for w in recwarn if "Glyph" in str(w.message)]


def test_importance_says_when_its_forest_finds_no_pattern(df):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, 60), rng.uniform(-1, 1, 60)
    clear = pd.DataFrame({"trial": range(60), "status": "completed", "objective": x ** 2, "params_x": x,
                          "params_y": y})
    share = plots.parameter_importance(clear)
    assert share["x"] > 0.9
    fig = plots.plot_importance(clear)
    assert "unreliable" not in fig._suptitle.get_text() and "explains 9" in fig.axes[0].get_xlabel()
    noise = clear.assign(objective=rng.permutation(clear.objective.to_numpy()))  # no parameter matters
    assert "\nunreliable: the forest finds little pattern" in plots.plot_importance(noise)._suptitle.get_text()


def test_the_report_of_a_live_search_draws_its_running_trials_up_to_now():
    import pandas as pd

    from mpiopt.report import _now_if_live

    t = pd.Timestamp.now(tz="UTC") - pd.Timedelta(seconds=60)
    stretches = pd.DataFrame({"trial": [0, 1], "status": ["completed", "running"], "epochs": [1, None],
                              "start": [t, t + pd.Timedelta(seconds=30)], "end": [t + pd.Timedelta(seconds=30), pd.NaT],
                              "group": [0, 0], "ranks": [1, 1]})
    assert _now_if_live(stretches) is None
    stretches.attrs["live"] = True
    ax = plots.plot_timeline(stretches, now=_now_if_live(stretches)).axes[0]
    running = [c for c in ax.collections if c.get_label() == "running"]
    assert running and running[0].get_paths()[0].get_extents().width > 25  # about 30 s, not nothing


def test_the_best_trials_yaml_shows_a_float32_metric_as_the_model_printed_it():
    import numpy as np

    from mpiopt._results_view import _as_reported

    assert _as_reported(float(np.float32(0.663))) == 0.663  # not 0.6629999876022339
    for value in (0.0033530274964858045, 0.5, 1e300, -1e-320):  # float64 values stay as they are
        assert _as_reported(value) == value
    assert np.isnan(_as_reported(float("nan")))


def test_trials_are_counted_by_status_in_one_order_everywhere():
    from mpiopt._results_view import by_status

    # as the search's closing line and `mpiopt status` have them, not the commonest first
    assert by_status(["pruned", "pruned", "completed", "failed", "pruned"]) == "1 completed, 1 failed, 3 pruned"


def test_plots_of_one_trial_tick_the_trial_not_fractions_of_one(df):
    one = df[df.trial == completed(df).trial.min()]
    by_trial = plots.plot_history(one).axes[0]
    assert list(by_trial.get_xticks()) == [float(one.trial.iloc[0])]
    slices = plots.plot_slices(one)
    assert [t.get_text() for t in slices.axes[-1].get_yticklabels()] == [str(one.trial.iloc[0])]  # the colour bar


def test_choices_python_holds_equal_keep_a_category_each_in_the_plots(df):
    # True == 1 == 1.0 in Python, and '1' reads as 1: each is its own category and tick
    mixed = df.copy()
    values = [1, 1.0, True, "1"]
    mixed["params_kind"] = [values[i % 4] for i in range(len(df))]
    mixed.attrs = {**df.attrs, "categories": {"kind": values}}
    ticks = [t.get_text() for t in plots.plot_slices(mixed, direction="minimize").axes[2].get_xticklabels()]
    assert ticks == ["1", "1.0", "True", "'1'"]
    ax = plots.plot_parallel(mixed, direction="minimize").axes[0]
    on_kind = {round(line.get_ydata()[2], 3) for line in ax.lines if len(line.get_xdata()) == 3}
    assert on_kind == {0.0, 0.333, 0.667, 1.0}


def test_results_type_integer_choices_and_a_never_active_real(tmp_path):
    import pandas as pd

    from mpiopt.analysis import _integer_params

    table = pd.DataFrame({"params_bs": [32.0, None, 64.0], "params_lr": [None, None, None]})
    space = {"bs": {"type": "categorical", "choices": [32, 64], "when": {"opt": ["sgd"]}},
             "lr": {"type": "real", "low": 0.1, "high": 1.0}}
    typed = _integer_params(table, space)
    assert str(typed["params_bs"].dtype) == "Int64" and typed["params_bs"].tolist()[::2] == [32, 64]
    assert typed["params_lr"].dtype == float and typed["params_lr"].isna().all()
    run = copy_run(tmp_path)  # a search of function trials that report no epochs: an empty history
    journal = run / "trials.jsonl"
    journal.write_text("".join(line for line in journal.read_text().splitlines(keepends=True)
                               if '"report"' not in line))
    history = mpiopt.load_history(run)
    assert history.empty and list(history.columns) == ["trial", "epoch"]
    assert history.dtypes.tolist() == [np.int64, np.int64]

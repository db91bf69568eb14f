"""mpiopt: hyperparameter search and distributed Keras training in one MPI job."""
from __future__ import annotations

from ._errors import ConfigError  # what the functions below raise for a wrong path, trial or run directory

__version__ = "0.1.0"
# the plots (mpiopt.plots) load matplotlib on first use, not with mpiopt
PLOTS = ("plot_history", "plot_importance", "plot_parallel", "plot_slices", "plot_curves", "plot_timeline",
         "plot_pareto", "parameter_importance", "PlotUnavailable", "write_report")
__all__ = ["load_results", "load_history", "load_timeline", "load_model", "best_params", "ConfigError", "__version__",
           *PLOTS]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def __getattr__(name: str):
    if name == "write_report":
        from .report import write_report

        return write_report
    if name in PLOTS:
        from . import plots

        return getattr(plots, name)
    raise AttributeError(f"module 'mpiopt' has no attribute {name!r}")


def load_results(path):
    """The results table of the run directory `path` (a str or Path; `~` is the home folder): a
    pandas DataFrame, one row a trial, with `trial`, `status`, `objective` (NaN unless completed),
    `params_<name>`, the metrics of each trial's best epoch, `epochs`, `start`/`end` (UTC) and
    more (README "Results"). `df.attrs` holds the run's `direction` and `metric`, which the
    `plot_*` functions take by default. Read from the journal; nothing is unpickled or run.
    Raises `ConfigError` for a path that is no run directory."""
    from .analysis import load_results as _load

    return _load(path)


def load_history(path):
    """Every trial's per-epoch reports as a pandas DataFrame: `trial`, `epoch`, one column a
    metric (empty for a search whose objective reports no epochs); the first argument of
    `plot_curves`. Raises `ConfigError` for a path that is no run directory."""
    from .analysis import load_history as _load

    return _load(path)


def load_timeline(path):
    """What each group trained when, as a pandas DataFrame: one row a stretch of training (a
    paused trial's promotion is a stretch of its own); the input of `plot_timeline`."""
    from .analysis import load_timeline as _load

    return _load(path)


def load_model(path, trial="best"):
    """Trial `trial` (a number, or 'best': the best completed) of a search as a Keras model holding
    its best epoch's weights, compiled as the search compiled it; also a folder written by
    `mpiopt train`. Imports TensorFlow. Raises `ConfigError` for no such trial, a function
    objective, or a trial that kept no weights."""
    from .analysis import load_model as _load

    return _load(path, trial)


def best_params(path, trial="best") -> dict:
    """The parameters of trial `trial` (a number, or 'best': the completed trial with the best
    figure of merit) of a search, as a dict. Raises `ConfigError` where no trial has completed or
    there is no such trial."""
    from .analysis import trial_params

    return trial_params(path, trial)[0]

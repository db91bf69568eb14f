"""mpiopt: hyperparameter search and distributed Keras training in one MPI job."""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["load_results", "__version__"]


def load_results(path):
    """The results table of a run directory as a pandas DataFrame (see `mpiopt.analysis`)."""
    from .analysis import load_results as _load

    return _load(path)

"""Training of one Keras model by a group of ranks.

Everything here takes the group's communicator and never touches `COMM_WORLD`. In this version
the group's first rank trains and the others wait for it (distributed modes come next).
"""
from __future__ import annotations

from ._data import load_arrays
from ._keras import TrainOutcome, fit_single, make_optimizer

__all__ = ["TrainOutcome", "fit_single", "load_arrays", "make_optimizer", "train"]


def train(comm, build, model_kwargs, arrays, training, **kwargs) -> TrainOutcome | None:
    """Train one model with the group `comm`; the outcome on group rank 0, None elsewhere."""
    if comm is None or comm.Get_rank() == 0:
        return fit_single(build, model_kwargs, arrays, training, **kwargs)
    return None

"""Distributed training of one Keras model by a group of ranks (MPI Learn, done right).

Everything here takes the group's communicator and never touches `COMM_WORLD`. Group rank 0
is the master (central weights, optimizer state, validation); the other ranks are workers.
Modes (`training.mode`): `downpour`, `easgd`, `gem` (master/worker, asynchronous) and
`allreduce` (synchronous, no master). A group of one rank trains alone with the same steps.
"""
from __future__ import annotations

from ._data import DataSource, fold_sizes, fold_source, load_source, loaded_source
from ._engine import Job, TrainOutcome, train
from .optimizers import make_master_optimizer

__all__ = ["DataSource", "Job", "TrainOutcome", "fold_sizes", "fold_source", "load_source", "loaded_source",
           "make_master_optimizer", "train"]

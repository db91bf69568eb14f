"""MNIST-1D (Greydanus 2020): a small 1-D digit classification task, generated locally.

The data come from the `mnist1d` package's `make_dataset` (never its download): 4000 training
and 1000 validation sequences of 40 samples, 10 classes. Making them takes seconds of CPU, on
every rank, so the first call keeps them in ~/.cache/mpiopt (or $XDG_CACHE_HOME/mpiopt).
"""
import os
import zipfile
from pathlib import Path

import numpy as np


def load_data(num_samples: int = 5000, seed: int = 42):
    """((x_train, y_train), (x_val, y_val)) as float32 / int64 arrays."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mpiopt" / \
        f"mnist1d_{num_samples}_{seed}.npz"
    try:
        with np.load(cache) as d:
            return (d["x"], d["y"]), (d["x_val"], d["y_val"])
    except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile):  # not made yet, or broken: remake
        pass
    (x, y), (x_val, y_val) = _make(num_samples, seed)
    _keep(cache, x=x, y=y, x_val=x_val, y_val=y_val)
    return (x, y), (x_val, y_val)


def _make(num_samples: int, seed: int):
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = num_samples
    args.seed = seed
    data = make_dataset(args)
    return ((data["x"].astype(np.float32), data["y"].astype(np.int64)),
            (data["x_test"].astype(np.float32), data["y_test"].astype(np.int64)))


def _keep(path: Path, **arrays) -> None:
    """Write under a name of this process's own, then rename: ranks making it at once never
    read each other's half-written file. A cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.stem}.{os.getpid()}.part.npz")
        np.savez(part, **arrays)
        os.replace(part, path)
    except OSError:
        pass


def build_model(units: int = 128, layers: int = 2, activation: str = "relu", dropout: float = 0.0):
    """An MLP for MNIST-1D; left uncompiled so mpiopt compiles it from the `training` settings."""
    import keras

    model = keras.Sequential([keras.Input(shape=(40,))])
    for _ in range(int(layers)):
        model.add(keras.layers.Dense(int(units), activation=activation))
        if dropout:
            model.add(keras.layers.Dropout(dropout))
    model.add(keras.layers.Dense(10, activation="softmax"))
    return model


def build_cnn(filters: int = 32, kernel_size: int = 5, blocks: int = 2, units: int = 64, activation: str = "relu",
              dropout: float = 0.0):
    """A small 1-D CNN for MNIST-1D: `blocks` x (Conv1D, max-pooling), then a dense layer; uncompiled."""
    import keras

    model = keras.Sequential([keras.Input(shape=(40,)), keras.layers.Reshape((40, 1))])
    for _ in range(int(blocks)):
        model.add(keras.layers.Conv1D(int(filters), int(kernel_size), padding="same", activation=activation))
        model.add(keras.layers.MaxPooling1D(2))
    model.add(keras.layers.Flatten())
    model.add(keras.layers.Dense(int(units), activation=activation))
    if dropout:
        model.add(keras.layers.Dropout(dropout))
    model.add(keras.layers.Dense(10, activation="softmax"))
    return model

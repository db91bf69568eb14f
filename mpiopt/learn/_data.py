"""Training data: arrays from the user's `load_data()`, or HDF5 file lists read through h5py."""
from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import TrialFailed

_cache: dict[Any, Any] = {}


def _file_list(spec: str | list[str], base_dir: Path, field: str) -> list[Path]:
    if isinstance(spec, list):
        files = [base_dir / s for s in spec]
    elif spec.endswith(".txt"):
        txt = base_dir / spec
        try:
            lines = txt.read_text("utf-8").splitlines()
        except OSError as exc:
            raise TrialFailed(f"objective.data.{field}: cannot read {txt}: {exc.strerror or exc}") from None
        files = [(txt.parent / s.strip()) for s in lines if s.strip() and not s.startswith("#")]
    else:
        files = [Path(p) for p in sorted(glob.glob(str(base_dir / spec)))]
    if not files:
        raise TrialFailed(f"objective.data.{field}: no files match {spec!r}")
    for f in files:
        if not f.is_file():
            raise TrialFailed(f"objective.data.{field}: no such file {f}")
    return files


def _read_h5(files: list[Path], features: str, labels: str) -> tuple[np.ndarray, np.ndarray]:
    import h5py

    xs, ys = [], []
    for f in files:
        try:
            with h5py.File(f, "r") as h:
                for name in (features, labels):
                    if name not in h:
                        raise TrialFailed(f"{f}: no dataset {name!r} (it has: {', '.join(h.keys())})")
                x, y = h[features][()], h[labels][()]
        except OSError as exc:
            raise TrialFailed(f"{f}: cannot read as HDF5: {exc}") from None
        if len(x) != len(y):
            raise TrialFailed(f"{f}: {features!r} has {len(x)} samples but {labels!r} has {len(y)}")
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


def load_arrays(data: Any, base_dir: Path, loader=None) -> tuple[tuple, tuple]:
    """((x_train, y_train), (x_val, y_val)), loaded once per process and cached."""
    key = repr(data) + str(base_dir)
    if key in _cache:
        return _cache[key]
    if isinstance(data, dict):
        train = _read_h5(_file_list(data["train"], base_dir, "train"), data["features"], data["labels"])
        val = _read_h5(_file_list(data["val"], base_dir, "val"), data["features"], data["labels"])
        out = (train, val)
    else:
        out = loader()
        try:
            (xt, yt), (xv, yv) = out
        except (TypeError, ValueError):
            raise TrialFailed(f"{data} must return ((x_train, y_train), (x_val, y_val)), "
                              f"got {type(out).__name__}") from None
        for x, y, which in ((xt, yt, "train"), (xv, yv, "val")):
            if len(x) != len(y):
                raise TrialFailed(f"{data}: {which} features have {len(x)} samples but labels have {len(y)}")
        out = ((xt, yt), (xv, yv))
    _cache[key] = out
    return out

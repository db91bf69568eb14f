"""Checkpoints of a training job: weights and master optimizer state as npz, the rest as JSON.

No pickle: `numpy.load(..., allow_pickle=False)` and `json` only, replaced atomically.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .._files import atomic_write
from ..journal import CHECKPOINT

NPZ, META = CHECKPOINT


def save(folder: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / NPZ, lambda f: np.savez(f, **arrays))
    atomic_write(folder / META, json.dumps(meta).encode("utf-8"))  # last: a checkpoint counts once its JSON is there


def load(folder: Path | None) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    if folder is None or not (folder / META).exists() or not (folder / NPZ).exists():
        return None
    try:
        meta = json.loads((folder / META).read_text())
        with np.load(folder / NPZ, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError):
        return None
    return arrays, meta

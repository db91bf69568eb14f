"""Checkpoints of a training job: weights, master optimizer state and the rest (as JSON) in one npz.

One file, replaced atomically, so a kill never leaves weights of one epoch beside the
bookkeeping of another. No pickle: `numpy.load(..., allow_pickle=False)` and `json` only.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .._files import atomic_write
from ..journal import CHECKPOINT

NPZ, META = CHECKPOINT  # META: the JSON part's own file, in checkpoints written before it moved into the npz
_META_ARRAY = "__meta__"  # the JSON part, as bytes, inside the npz


def save(folder: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    atomic_write(folder / NPZ, lambda f: np.savez(f, **arrays, **{_META_ARRAY: text}))
    (folder / META).unlink(missing_ok=True)  # an older mpiopt's, now stale


def load(folder: Path | None) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    if folder is None or not (folder / NPZ).exists():
        return None
    try:
        with np.load(folder / NPZ, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        text = arrays.pop(_META_ARRAY, None)
        meta = json.loads(text.tobytes() if text is not None else (folder / META).read_bytes())
    except (OSError, ValueError):
        return None
    return arrays, meta

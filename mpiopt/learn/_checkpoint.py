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


def worker_file(worker: int) -> str:
    """A worker's own part of the checkpoint (EASGD's and GEM's worker optimizers), beside the
    master's: named like it, so that whatever drops or looks for `checkpoint.*` finds it too."""
    return f"checkpoint.worker{worker}.npz"


def save(folder: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any], name: str = NPZ) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    atomic_write(folder / name, lambda f: np.savez(f, **arrays, **{_META_ARRAY: text}))
    if name == NPZ:
        (folder / META).unlink(missing_ok=True)  # an older mpiopt's, now stale


def load(folder: Path | None, name: str = NPZ) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    if folder is None or not (folder / name).exists():
        return None
    try:
        with np.load(folder / name, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        text = arrays.pop(_META_ARRAY, None)
        meta = json.loads(text.tobytes() if text is not None else (folder / META).read_bytes())
    except (OSError, ValueError):
        return None
    return arrays, meta


def optimizer_parts(opt) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """An optimizer's state as (arrays, named opt_*; its scalars, for the JSON part)."""
    arrays, scalars = {}, {}
    for k, v in opt.state_dict().items():
        if isinstance(v, np.ndarray):
            arrays[f"opt_{k}"] = v
        else:
            scalars[k] = v
    return arrays, scalars


def load_optimizer(opt, arrays: dict[str, np.ndarray], scalars: dict[str, Any] | None) -> None:
    """Restore what `optimizer_parts` gave."""
    state = dict(scalars or {})
    state.update({k[4:]: v for k, v in arrays.items() if k.startswith("opt_")})
    opt.load_state_dict(state)

"""Training data and its shards.

In-memory arrays come from the user's `load_data()`; HDF5 file lists are read through h5py
(SPEC §2), with multi-input/multi-output data as HDF5 groups or lists of dataset names. A worker
gets its shard for each epoch: by file when there are at least as many files as workers (each
worker reads only its own files), otherwise by sample range of one permutation of the whole set.
Either way every sample is seen once per epoch across the group, in an order drawn from the seed.

For k-fold cross-validation (`objective.folds`) `fold_source` cuts the training data into folds:
by file where there are at least as many training files as folds, by sample otherwise.
"""
from __future__ import annotations

import glob
import itertools
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import DataError

_cache: dict[Any, Any] = {}
# Workers that share HDF5 files (fewer files than workers) each read only their own rows, in
# blocks dealt from all over the files: one copy of the data per group, not one per rank, and a
# file sorted by class still gives every worker as much of each as the others.
BLOCKS_PER_WORKER = 64
BY_FILE_SLACK = 1.1  # whole files per worker while the largest shard is within this of an even share
_BLOCK_STREAM = 0x626C6F636B  # "block": the deal depends on the files alone, the same for every trial


# -- nested structures of arrays (multi-input / multi-output) ---------------------------------
def leaves(struct: Any, name: str = ""):
    """(path, array) for every array of `struct`, e.g. ("[0]['a']", x), in the user's order."""
    # own walk: keras.tree.flatten_with_path sorts dict keys, and the messages name inputs in the user's order
    if isinstance(struct, dict):
        for k, v in struct.items():
            yield from leaves(v, f"{name}[{k!r}]")
    elif isinstance(struct, (list, tuple)):
        for i, v in enumerate(struct):
            yield from leaves(v, f"{name}[{i}]")
    else:
        yield name, struct


def n_samples(struct: Any) -> int:
    """The length of the first array of `struct` (all have as many samples: `_check_lengths`)."""
    # own descent: keras.tree.flatten sorts dict keys, and the first input is the first in the user's order
    if isinstance(struct, dict):
        return n_samples(next(iter(struct.values())))
    if isinstance(struct, (list, tuple)):
        return n_samples(struct[0])
    return len(struct)


def take(struct: Any, idx) -> Any:
    """`struct` with every array (or h5py dataset, then read) indexed by `idx`."""
    import keras  # here, not above: checking a configuration imports this module and must not start TensorFlow

    return keras.tree.map_structure(lambda leaf: leaf[idx], struct)


def concat(parts: list[Any]) -> Any:
    """The structures `parts` as one, every array concatenated along the samples."""
    import keras

    return keras.tree.map_structure(lambda *leaves: np.concatenate(leaves), *parts)


def refuse_non_arrays(struct: Any, where: str) -> None:
    """DataError where a leaf of `load_data`'s `struct` is no numpy array: a list of numbers (whose
    numbers would be taken for inputs), a DataFrame or a tensor (which a shard cannot index)."""
    for path, leaf in leaves(struct):
        if not isinstance(leaf, np.ndarray):
            hint = "give numpy arrays, not lists" if isinstance(leaf, (numbers.Number, str, bytes)) else \
                "np.asarray makes one"
            raise DataError(f"{where}{path} is a {type(leaf).__name__}, where a numpy array of samples belongs "
                            f"({hint})")


def holds_numbers(dtype) -> bool:
    """Whether values of `dtype` are numbers a model takes: integers, reals or booleans."""
    dtype = np.dtype(dtype)
    return (np.issubdtype(dtype, np.number) or dtype == np.bool_) and not np.issubdtype(dtype, np.complexfloating)


def refuse_non_numbers(struct: Any, where: str) -> None:
    """DataError where an array of `struct` holds what is not a number."""
    for path, leaf in leaves(struct):
        dtype = np.asarray(leaf[:0]).dtype
        if not holds_numbers(dtype):
            kind = {"S": "strings", "U": "strings", "O": "Python objects"}.get(dtype.kind, f"{dtype} values")
            raise DataError(f"{where}{path} hold {kind} ({dtype}), not numbers")


def refuse_not_finite(struct: Any, where: str, block: int = 1 << 22, first: int = 0) -> None:
    """DataError naming the first sample of an array of `struct` that holds NaN or inf: a trial
    would diverge on it in training, or validate on a silently wrong figure (read a block of rows
    at a time, so that an HDF5 dataset need not fit in memory). `first`: the number of the
    struct's first sample in its file."""
    for path, a in leaves(struct):
        if not np.issubdtype(np.dtype(a.dtype), np.floating) or not a.shape:
            continue
        row = int(np.prod(a.shape[1:])) if len(a.shape) > 1 else 1
        step = max(1, block // max(row, 1))
        for i in range(0, int(a.shape[0]), step):
            b = np.asarray(a[i:i + step]).reshape(min(step, int(a.shape[0]) - i), -1)
            bad = ~np.isfinite(b).all(axis=1)
            if bad.any():
                raise DataError(f"{where}{path}: sample {first + i + int(np.argmax(bad))} holds NaN or inf "
                                "(drop or repair such samples)")


def _check_lengths(struct: Any, where: str) -> int:
    lengths = [(where + path, len(leaf)) for path, leaf in leaves(struct)]
    if len({n for _, n in lengths}) > 1:
        raise DataError("; ".join(f"{name} has {n} samples" for name, n in lengths) + ": lengths differ")
    return lengths[0][1] if lengths else 0


# -- HDF5 ---------------------------------------------------------------------------------------
def file_list(spec: str | list[str], base_dir: Path, field: str) -> list[Path]:
    """The files `spec` names (a list, a .txt file of one path a line, or a glob), relative to
    `base_dir`, and those a .txt file names relative to its own folder (as a playlist's); `~` is
    the home folder, as in a shell."""
    if isinstance(spec, list):
        files = [_under(base_dir, s) for s in spec]
    elif spec.endswith(".txt"):
        return _listed_files(_under(base_dir, spec), field)
    else:
        files = [Path(p) for p in sorted(glob.glob(str(_under(base_dir, spec))))]
    files = [f.resolve() for f in files]  # named in messages as data/x.h5, not bad/../data/x.h5
    if not files:
        raise DataError(f"objective.data.{field}: no files match {spec!r}")
    for f in files:
        if not f.is_file():
            raise DataError(f"objective.data.{field}: no such file {f}")
    _refuse_repeats(files, f"objective.data.{field}")
    return files


def _refuse_repeats(files: list[Path], where: str) -> None:
    """A file named twice (resolved: a link to it too) would count its samples twice, and a fold
    cut by file could validate on the samples it trains on."""
    seen: set[Path] = set()
    for f in files:
        if f in seen:
            raise DataError(f"{where} names {f} twice: its samples would count twice")
        seen.add(f)


def _under(folder: Path, name: str) -> Path:
    return folder / os.path.expanduser(name)


def _listed_files(txt: Path, field: str) -> list[Path]:
    """The files a .txt file names, one a line (`#` starts a comment line), relative to its folder."""
    try:
        lines = txt.read_text("utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"objective.data.{field}: cannot read {txt}: {exc.strerror or exc}") from None
    files = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        path = _under(txt.parent, line.strip()).resolve()
        if not path.is_file():
            raise DataError(f"objective.data.{field}: {txt.name} line {number} names {line.strip()!r}: no such file "
                            f"{path} (a .txt file's paths are relative to its own folder)")
        files.append(path)
    if not files:
        raise DataError(f"objective.data.{field}: {txt} names no files")
    _refuse_repeats(files, f"objective.data.{field}: {txt.name}")
    return files


def _h5_item(h, name: str, f: Path):
    """The dataset or group `name` of the open file `h`."""
    if name not in h:
        raise DataError(f"{f}: no dataset {name!r} ({_deepest_group_and_members(h, name)})")
    item = h[name]
    if not hasattr(item, "keys") and not item.shape:
        raise DataError(f"{f}: {name!r} is a single value, not a dataset of samples")
    return item


def _deepest_group_and_members(h, name: str) -> str:
    """What the file has where the path `name` goes astray: 'it has: a, b' at the top, 'jets
    has: x, y' inside the group jets."""
    group, where = h, []
    for part in name.strip("/").split("/")[:-1]:
        if part not in group or not hasattr(group[part], "keys"):
            break
        group = group[part]
        where.append(part)
    return f"{'/'.join(where) or 'it'} has: {', '.join(group.keys()) or 'nothing'}"


def h5_datasets(h, name, f: Path):
    """The datasets `name` stands for in the open file `h`, not read: one, an HDF5 group of them
    (one per named model input, as a dict), or a list of names."""
    if isinstance(name, list):
        return [h5_datasets(h, n, f) for n in name]
    obj = _h5_item(h, name, f)
    # a group made a dict: it is a mapping but no dict, which keras.tree would take for one array
    return {k: obj[k] for k in obj.keys()} if hasattr(obj, "keys") else obj


def paired_datasets(h, features, labels, f: Path) -> tuple[Any, Any, int]:
    """The features' and labels' datasets of the open file `h` (not read) and their number of
    samples; a DataError where features and labels have different numbers."""
    xs, ys = h5_datasets(h, features, f), h5_datasets(h, labels, f)
    nx, ny = _check_lengths(xs, f"{f}: features"), _check_lengths(ys, f"{f}: labels")
    if nx != ny:
        raise DataError(f"{f}: features have {nx} samples but labels have {ny}")
    return xs, ys, nx


def read_h5(f: Path, features, labels) -> tuple[Any, Any]:
    import h5py

    try:
        with h5py.File(f, "r") as h:
            xs, ys, _ = paired_datasets(h, features, labels, f)
            x, y = take(xs, ()), take(ys, ())
    except OSError as exc:
        raise DataError(f"{f}: cannot read as HDF5: {exc}") from None
    for struct, what in ((x, "features"), (y, "labels")):
        refuse_non_numbers(struct, f"{f}: {what}")
        refuse_not_finite(struct, f"{f}: {what}")
    return x, y


def _read_all(files: list[Path], features, labels) -> tuple[Any, Any]:
    """(x, y) of the HDF5 files, one after another."""
    return concat([read_h5(f, features, labels) for f in files])


def _read_blocks(files: list[Path], blocks: list[tuple[int, int, int]], features, labels) -> tuple[Any, Any]:
    """(x, y) of the rows `blocks` ((file index, first row, end row) each, in order) of the HDF5
    `files`: only those rows are read."""
    import h5py

    parts = []
    for i, spans in itertools.groupby(blocks or [(0, 0, 0)], key=lambda b: b[0]):
        f = files[i]
        try:
            with h5py.File(f, "r") as h:
                xs, ys, _ = paired_datasets(h, features, labels, f)
                for _, lo, hi in spans:
                    part = take(xs, slice(lo, hi)), take(ys, slice(lo, hi))
                    for struct, what in zip(part, ("features", "labels"), strict=True):
                        refuse_non_numbers(struct, f"{f}: {what}")
                        refuse_not_finite(struct, f"{f}: {what}", first=lo)
                    parts.append(part)
        except OSError as exc:
            raise DataError(f"{f}: cannot read as HDF5: {exc}") from None
    return concat(parts)


def _part_bounds(n: int, part: int, parts: int) -> tuple[int, int]:
    """[lo, hi) of part `part` of `n` samples cut into `parts`, as np.array_split cuts them."""
    size, extra = divmod(n, parts)
    lo = part * size + min(part, extra)
    return lo, lo + size + (part < extra)


def _spans(counts: list[int], lo: int, hi: int) -> list[tuple[int, int, int]]:
    """Samples [lo, hi) of files of `counts` samples one after another, as (file index, first
    row, end row) in each file."""
    spans, start = [], 0
    for i, n in enumerate(counts):
        first, end = max(lo - start, 0), min(hi - start, n)
        if first < end:
            spans.append((i, first, end))
        start += n
    return spans


def deal_blocks(counts: list[int], n_workers: int) -> list[list[tuple[int, int, int]]]:
    """Each worker's blocks of rows, (file index, first row, end row), of training files shared
    by more workers than there are files, in file order. About BLOCKS_PER_WORKER blocks each:
    each run of `n_workers` blocks in file order gives one to every worker (the largest to the
    one with the fewest rows so far, ties in a fixed random order), so a worker's rows come from
    all over the files and the loads stay within a block of each other."""
    size = max(1, math.ceil(sum(counts) / (n_workers * BLOCKS_PER_WORKER)))
    blocks = [(i, lo, min(lo + size, n)) for i, n in enumerate(counts) for lo in range(0, n, size)]
    rng = np.random.default_rng(_BLOCK_STREAM)
    loads, dealt = [0] * n_workers, [[] for _ in range(n_workers)]
    for first in range(0, len(blocks), n_workers):
        run = sorted(blocks[first:first + n_workers], key=lambda b: b[1] - b[2])  # the largest first
        lightest = sorted(rng.permutation(n_workers).tolist(), key=lambda k: loads[k])
        for w, block in zip(lightest, run, strict=False):  # the last run may be short
            dealt[w].append(block)
            loads[w] += block[2] - block[1]
    return dealt


def _count_h5(f: Path, features, labels) -> int:
    import h5py

    try:
        with h5py.File(f, "r") as h:
            obj = _h5_item(h, features[0] if isinstance(features, list) else features, f)
            if hasattr(obj, "keys"):
                obj = obj[next(iter(obj.keys()))]
            return int(obj.shape[0])
    except OSError as exc:
        raise DataError(f"{f}: cannot read as HDF5: {exc}") from None


def _without_empty_files(files: list[Path], counts: list[int]) -> tuple[list[Path], list[int]]:
    """The training files that hold samples, and their counts: a worker dealt files by file must
    not get only an empty one (it would train on nothing), nor the first sample come from one."""
    kept = [(f, n) for f, n in zip(files, counts, strict=True) if n > 0]
    if not kept:
        raise DataError(f"objective.data.train: every file is empty ({', '.join(f.name for f in files[:3])}"
                        f"{', ...' if len(files) > 3 else ''})")
    return [f for f, _ in kept], [n for _, n in kept]


# -- the data of a training job ---------------------------------------------------------------
@dataclass
class DataSource:
    """Training and validation data, in memory or as HDF5 files read on demand."""

    train: tuple[Any, Any] | None = None  # in memory
    val: tuple[Any, Any] | None = None
    train_files: list[Path] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    val_files: list[Path] = field(default_factory=list)
    val_counts: list[int] = field(default_factory=list)  # each val file's samples; empty: counted when needed
    features: Any = "features"
    labels: Any = "labels"
    # the samples of the in-memory `train` this source trains on (a fold's training part), None: all;
    # indices rather than a copy, so that the folds of a dataset share its one copy in memory
    rows: np.ndarray | None = None

    def n_train(self) -> int:
        if self.rows is not None:
            return len(self.rows)
        return n_samples(self.train[0]) if self.train is not None else sum(self.counts)

    def validation(self) -> tuple[Any, Any]:
        if self.val is None:
            self.val = _read_all(self.val_files, self.features, self.labels)
        return self.val

    def validation_part(self, part: int, parts: int) -> tuple[Any, Any]:
        """Part `part` of `parts` of the validation samples, in order, the parts' sizes within one
        of each other (the ranks of an allreduce group each validate one): of HDF5 files only its
        rows are read, once per process."""
        if self.val is not None:
            rows = np.array_split(np.arange(n_samples(self.val[0])), parts)[part]
            return take(self.val[0], rows), take(self.val[1], rows)
        key = ("val part", part, parts, id(self))
        if key not in _cache:
            counts = self.val_counts or [_count_h5(f, self.features, self.labels) for f in self.val_files]
            lo, hi = _part_bounds(sum(counts), part, parts)
            _cache[key] = _read_blocks(self.val_files, _spans(counts, lo, hi), self.features, self.labels)
        return _cache[key]

    def _files_of(self, worker: int, n_workers: int) -> list[int]:
        """Files for each worker, balanced by sample count (largest first onto the lightest)."""
        owner, _ = self._deal(n_workers)
        return sorted(i for i, w in owner.items() if w == worker)

    def _deal(self, n_workers: int) -> tuple[dict[int, int], list[int]]:
        """Each training file's worker when workers are dealt whole files, and each worker's samples."""
        loads = [0] * n_workers
        owner = {}
        for i in sorted(range(len(self.counts)), key=lambda i: (-self.counts[i], i)):
            w = min(range(n_workers), key=lambda k: (loads[k], k))
            owner[i] = w
            loads[w] += self.counts[i]
        return owner, loads

    def largest_shard(self, n_workers: int) -> int:
        """The most samples a worker's shard holds: workers dealt whole files or blocks can hold
        more than an even share, and a group that steps together must step until the largest is
        through."""
        if self.by_file(n_workers):
            return max(self._deal(n_workers)[1])
        if self.train is None:
            return max(sum(hi - lo for _, lo, hi in mine) for mine in deal_blocks(self.counts, n_workers))
        return math.ceil(self.n_train() / n_workers)

    def first(self, n: int) -> Any:
        """The first `n` training inputs (of an HDF5 file, only those are read)."""
        if self.train is not None:
            return take(self.train[0], slice(0, n) if self.rows is None else self.rows[:n])
        import h5py

        f = self.train_files[0]
        with h5py.File(f, "r") as h:
            return take(h5_datasets(h, self.features, f), slice(0, n))

    def _own_rows(self, worker: int, n_workers: int) -> tuple[Any, Any]:
        """This worker's training samples of the HDF5 files, read once per process: whole files
        where they deal evenly (`by_file`), else its blocks of rows (`deal_blocks`)."""
        key = ("rows", worker, n_workers, id(self))
        if key not in _cache:
            if self.by_file(n_workers):
                mine = [self.train_files[i] for i in self._files_of(worker, n_workers)]
                _cache[key] = _read_all(mine, self.features, self.labels)
            else:
                _cache[key] = _read_blocks(self.train_files, deal_blocks(self.counts, n_workers)[worker],
                                           self.features, self.labels)
        return _cache[key]

    def by_file(self, n_workers: int) -> bool:
        """Whether workers are dealt whole HDF5 files: where there are at least as many files as
        workers and no worker gets more than BY_FILE_SLACK times an even share (else blocks of
        rows: a group that steps together waits for its largest shard)."""
        if self.train is not None or len(self.train_files) < n_workers:
            return False
        return max(self._deal(n_workers)[1]) <= BY_FILE_SLACK * sum(self.counts) / n_workers

    def shard(self, worker: int, n_workers: int, epoch: int, seed: int) -> tuple[Any, Any]:
        """This worker's (x, y) for one epoch, in this epoch's order."""
        if self.train is None:
            x, y = self._own_rows(worker, n_workers)
            idx = np.random.default_rng([seed, epoch, worker]).permutation(n_samples(x))
            return take(x, idx), take(y, idx)
        x, y = self.train
        perm = np.random.default_rng([seed, epoch]).permutation(self.n_train())
        if self.rows is not None:
            perm = self.rows[perm]
        idx = np.array_split(perm, n_workers)[worker]
        return take(x, idx), take(y, idx)


def _kind(obj: Any) -> str:
    """What `obj` is, for a message: a tf.data.Dataset by that name (its classes are private)."""
    name = type(obj).__name__
    if obj is None:
        return "None"
    if isinstance(obj, np.ndarray):
        return "a numpy array"
    if type(obj).__module__.startswith("tensorflow") and "Dataset" in name:
        return "a tf.data.Dataset: give arrays"
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def _misshapen(out: Any) -> str:
    """Where what load_data returned is not ((x_train, y_train), (x_val, y_val)), said as such."""
    if not isinstance(out, (tuple, list)):
        return f"got {_kind(out)}"
    if len(out) != 2:
        return f"got {len(out)} items"
    for part, which in zip(out, ("training", "validation"), strict=True):
        if not isinstance(part, (tuple, list)):
            return f"but its {which} part is {_kind(part)}"
        if len(part) != 2:  # (x, y, sample_weight), say: mpiopt takes no sample weights
            return f"but its {which} part has {len(part)} items"
    return f"got {type(out).__name__}"


def _source_key(data: Any, base_dir: Path) -> str:
    return repr(data) + str(base_dir)


def loaded_source(data: Any, base_dir: Path) -> DataSource | None:
    """The data `load_source` read already in this process, or None."""
    return _cache.get(_source_key(data, base_dir))


def load_source(data: Any, base_dir: Path, loader=None) -> DataSource:
    """The data of a `model` objective, checked before any training (cached per process)."""
    key = _source_key(data, base_dir)
    if key in _cache:
        return _cache[key]
    if isinstance(data, dict):
        feats, labels = data.get("features", "features"), data.get("labels", "labels")
        train = file_list(data["train"], base_dir, "train")
        val = file_list(data["val"], base_dir, "val")
        counts = [_count_h5(f, feats, labels) for f in train]
        val_counts = [_count_h5(f, feats, labels) for f in val]
        train, counts = _without_empty_files(train, counts)
        src = DataSource(train_files=train, counts=counts, val_files=val, val_counts=val_counts, features=feats,
                         labels=labels)
    else:
        out = loader()
        try:
            (xt, yt), (xv, yv) = out
        except (TypeError, ValueError):
            raise DataError(f"{data} must return ((x_train, y_train), (x_val, y_val)), "
                            f"{_misshapen(out)}") from None
        for x, y, which in ((xt, yt, "train"), (xv, yv, "val")):
            for struct, what in ((x, "features"), (y, "labels")):
                refuse_non_arrays(struct, f"{data}: {which} {what}")
                refuse_non_numbers(struct, f"{data}: {which} {what}")
            nx, ny = _check_lengths(x, f"{which} features"), _check_lengths(y, f"{which} labels")
            if nx != ny:
                raise DataError(f"{data}: {which} features have {nx} samples but labels have {ny}")
            for struct, what in ((x, "features"), (y, "labels")):
                refuse_not_finite(struct, f"{data}: {which} {what}")
        src = DataSource(train=(xt, yt), val=(xv, yv))
    _cache[key] = src
    return src


# -- k-fold cross-validation -------------------------------------------------------------------
# the folds' own random stream: the assignment depends on the search seed alone, never on the
# trial, so every trial is judged on the same folds and trials stay comparable
_FOLD_STREAM = 0x6B666F6C64  # "kfold"


def sample_folds(n: int, folds: int, seed: int) -> list[np.ndarray]:
    """The sample indices of each fold: a permutation of `n` samples drawn from `seed`, cut into
    `folds` parts whose sizes differ by one at most (each part sorted, for reading in order)."""
    perm = np.random.default_rng([seed, _FOLD_STREAM]).permutation(n)
    return [np.sort(part) for part in np.array_split(perm, folds)]


def file_folds(counts: list[int], folds: int, seed: int) -> list[list[int]] | None:
    """The training files (indices) of each fold, balanced by samples: in an order drawn from
    `seed`, the largest file first goes onto the lightest fold. None where a fold would get no
    sample (files without samples): the folds are then cut by sample."""
    order = np.random.default_rng([seed, _FOLD_STREAM]).permutation(len(counts))
    loads, members = [0] * folds, [[] for _ in range(folds)]
    for i in sorted(order.tolist(), key=lambda i: -counts[i]):  # stable: equal files keep the drawn order
        k = min(range(folds), key=lambda f: (loads[f], f))
        members[k].append(i)
        loads[k] += counts[i]
    return [sorted(m) for m in members] if min(loads) > 0 else None


def fold_sizes(source: DataSource, folds: int, seed: int) -> tuple[str, list[int]]:
    """How `fold_source` cuts the training data ("file" or "sample") and each fold's samples."""
    parts = _file_parts(source, folds, seed)
    if parts is not None:
        return "file", [sum(source.counts[i] for i in part) for part in parts]
    return "sample", [len(part) for part in np.array_split(np.arange(source.n_train()), folds)]


def _file_parts(source: DataSource, folds: int, seed: int) -> list[list[int]] | None:
    """The training files of each fold where the folds are cut by file (HDF5 files, at least one
    a fold, each fold with samples); else None: they are cut by sample."""
    if source.train is None and len(source.train_files) >= folds:
        return file_folds(source.counts, folds, seed)
    return None


def fold_source(source: DataSource, folds: int, k: int, seed: int) -> DataSource:
    """Fold `k` (0-based) of `folds`: trains on the other folds' training data and validates on
    fold k's. The given validation data play no part. Cached per process, so that every trial
    trains on the same objects (and HDF5 files are read once)."""
    key = ("fold", id(source), folds, k, seed)  # `source` is itself cached by load_source: its id is stable
    if key not in _cache:
        _cache[key] = _cut_fold(source, folds, k, seed)
    return _cache[key]


def _cut_fold(source: DataSource, folds: int, k: int, seed: int) -> DataSource:
    parts = _file_parts(source, folds, seed)
    if parts is not None:
        held = set(parts[k])
        rest = [i for i in range(len(source.train_files)) if i not in held]
        return DataSource(train_files=[source.train_files[i] for i in rest], counts=[source.counts[i] for i in rest],
                          val_files=[source.train_files[i] for i in parts[k]],
                          val_counts=[source.counts[i] for i in parts[k]], features=source.features,
                          labels=source.labels)
    x, y = source.train if source.train is not None else _h5_training(source)
    parts = sample_folds(n_samples(x), folds, seed)
    rows = np.sort(np.concatenate([p for i, p in enumerate(parts) if i != k]))
    return DataSource(train=(x, y), rows=rows, val=(take(x, parts[k]), take(y, parts[k])))


def _h5_training(source: DataSource) -> tuple[Any, Any]:
    """Every training sample of an HDF5 source, read once per process (folds by sample)."""
    key = ("h5 training", id(source))
    if key not in _cache:
        _cache[key] = _read_all(source.train_files, source.features, source.labels)
    return _cache[key]

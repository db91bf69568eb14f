"""What a worker holds and reads of HDF5 training files that more workers than files share.

    python bench/hdf5_shards.py [--rows 2000000] [--width 64] [--workers 1 2 4 8]

Writes one HDF5 file (--rows samples of --width float32 features, labels sorted by class, as
physics files often are) and, for each number of workers, starts that many processes, each
taking its shard of epoch 0 as a worker of a group does (`DataSource.shard`), and prints the
median and largest peak resident memory a process gained, its time to the shard, and the share
of class 1 in the shards. Two ways: `blocks` (mpiopt's: each worker reads only its blocks of
rows) and `whole` (each reads the whole file and takes its part: the alternative). Asserts
nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
import numpy as np
import keras  # imported before the baseline: every worker has it loaded anyway
from mpiopt.learn import _data

way, folder, worker, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
spec = {{"train": "train.h5", "val": "train.h5", "features": "x", "labels": "y"}}
src = _data.load_source(spec, Path(folder))
if way == "whole":  # the alternative: every worker reads all the files, then takes its part
    x, y = _data._read_all(src.train_files, src.features, src.labels)
    idx = np.array_split(np.random.default_rng([0, 0]).permutation(len(y)), workers)[worker]
    x, y = x[idx], y[idx]
else:
    x, y = src.shard(worker, workers, 0, 0)
took = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"gained_mb": (peak - base) / 1024, "s": took, "share": float(np.mean(y)), "rows": len(y)}}))
"""


def write_file(folder: Path, rows: int, width: int) -> Path:
    import h5py
    import numpy as np

    path = folder / "train.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as h:
        x = h.create_dataset("x", (rows, width), dtype="float32", chunks=(min(rows, 4096), width))
        for lo in range(0, rows, 65536):
            hi = min(rows, lo + 65536)
            x[lo:hi] = rng.standard_normal((hi - lo, width), dtype=np.float32)
        h["y"] = (np.arange(rows) >= rows // 2).astype(np.float32)  # sorted: class 0, then class 1
    return path


def run_workers(way: str, folder: Path, workers: int) -> list[dict]:
    script = WORKER.format(root=str(ROOT))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    procs = [subprocess.Popen([sys.executable, "-c", script, way, str(folder), str(w), str(workers)],
                              stdout=subprocess.PIPE, text=True, env=env) for w in range(workers)]
    return [json.loads(p.communicate()[0]) for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        size = write_file(folder, args.rows, args.width).stat().st_size / 2**20
        print(f"one file: {args.rows:,} samples x {args.width} float32 features, {size:.0f} MiB")
        print("| way | workers | peak memory gained per worker, median MiB | largest MiB | s to the shard, largest "
              "| class 1 in a shard, min-max |")
        print("| --- | --- | --- | --- | --- | --- |")
        for workers in args.workers:
            for way in ("whole", "blocks"):
                got = run_workers(way, folder, workers)
                mb = [g["gained_mb"] for g in got]
                shares = [g["share"] for g in got]
                print(f"| {way} | {workers} | {statistics.median(mb):.0f} | {max(mb):.0f} | "
                      f"{max(g['s'] for g in got):.2f} | {min(shares):.2f}-{max(shares):.2f} |", flush=True)


if __name__ == "__main__":
    main()

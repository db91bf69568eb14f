"""Record real learning curves of an MNIST-1D space, once, for bench/multifidelity.py.

    python bench/record_curves.py [--configs 160] [--epochs 27] [--seed 0] [--jobs 1]
                                  [--space searchspaces/mnist1d_cnn.yaml]
                                  [--out bench/data/mnist1d_cnn_curves.jsonl]

Draws `--configs` random configurations of the space (its parameters, not its search settings),
trains each one with the space's model function for `--epochs` epochs on one process with one
TensorFlow thread (what a group of one rank does: Adam at the drawn learning rate and batch size),
and writes every epoch's val_accuracy and wall time. The file is appended to one configuration at a time, so an
interrupted recording continues where it stopped.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def draw_configs(space_file: Path, count: int, seed: int) -> list[dict]:
    from mpiopt.config import load_config
    from mpiopt.search import RandomSearch

    searcher = RandomSearch(load_config(space_file).space, seed=seed)
    return [searcher.ask(i) for i in range(count)]


def model_builder(space_file: Path) -> tuple[Path, str]:
    """The space's `objective.model` as (file, function name)."""
    from mpiopt.config import load_config

    cfg = load_config(space_file)
    file, name = cfg.objective.model.rsplit(":", 1)
    return cfg.base_dir / file, name


def train(job: tuple[int, dict, int, Path]) -> dict:
    index, params, epochs, space_file = job
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model_file, builder = model_builder(space_file)
    example = runpy.run_path(str(model_file))
    build_model, load_data = example[builder], example["load_data"]
    (x, y), (xv, yv) = load_data()
    keras.utils.set_random_seed(index)
    arch = {k: v for k, v in params.items() if k not in ("learning_rate", "batch_size")}
    model = build_model(**arch)
    model.compile(optimizer=keras.optimizers.Adam(params["learning_rate"]),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    times, accuracy = [], []
    for _ in range(epochs):
        start = time.perf_counter()
        model.fit(x, y, batch_size=int(params["batch_size"]), epochs=1, verbose=0)
        accuracy.append(float(model.evaluate(xv, yv, batch_size=1000, verbose=0)[1]))
        times.append(time.perf_counter() - start)
    keras.backend.clear_session()  # one process trains many models
    return {"index": index, "params": params, "val_accuracy": accuracy, "epoch_s": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=160)
    parser.add_argument("--epochs", type=int, default=27)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--space", type=Path, default=ROOT / "searchspaces" / "mnist1d_cnn.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "data" / "mnist1d_cnn_curves.jsonl")
    args = parser.parse_args()
    done = set()
    if args.out.exists():
        done = {json.loads(line)["index"] for line in args.out.read_text().splitlines() if line.strip()}
    jobs = [(i, p, args.epochs, args.space) for i, p in enumerate(draw_configs(args.space, args.configs, args.seed))
            if i not in done]
    print(f"{len(done)} recorded, {len(jobs)} to train", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool, args.out.open("a") as out:
        for curve in pool.map(train, jobs):
            out.write(json.dumps(curve) + "\n")
            out.flush()
            print(f"config {curve['index']}: best {max(curve['val_accuracy']):.3f} "
                  f"in {sum(curve['epoch_s']):.0f} s", flush=True)


if __name__ == "__main__":
    main()

"""TensorBoard logs of one trial (`training.tensorboard: true`): each epoch's metrics as scalars
in trials/<id>/tensorboard/, and an HParams summary of the trial's parameters, so that
`tensorboard --logdir RUN_DIR` lists every trial, with its parameters and metrics, in the
HParams dashboard."""
from __future__ import annotations

from pathlib import Path
from typing import Any

FOLDER = "tensorboard"


def hparam_value(value: Any) -> bool | int | float | str:
    """HParams take booleans, numbers and strings: anything else is shown as its text."""
    return value if isinstance(value, (bool, int, float, str)) else str(value)


class Board:
    """Writes the scalars of each epoch; the HParams summary goes with the first one."""

    def __init__(self, out_dir: Path, hparams: dict[str, Any], trial_id: str) -> None:
        import tensorflow as tf

        self.tf = tf
        self.hparams = {k: hparam_value(v) for k, v in hparams.items()}
        self.trial_id = trial_id
        self.writer = tf.summary.create_file_writer(str(out_dir / FOLDER))
        self.wrote_hparams = False

    def write(self, row: dict[str, float]) -> None:
        epoch = int(row["epoch"])
        with self.writer.as_default():
            if not self.wrote_hparams:
                from tensorboard.plugins.hparams import api as hp

                hp.hparams(self.hparams, trial_id=self.trial_id)
                self.wrote_hparams = True
            for name, value in row.items():
                if name != "epoch":
                    self.tf.summary.scalar(name, value, step=epoch)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

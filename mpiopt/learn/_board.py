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
    """Writes the scalars of each epoch from `first_step` on; the HParams summary (the session's
    start) goes with the first, unless an earlier stretch's file holds it, and `end` says how the
    training ended.

    Training that goes on from a checkpoint (a resume, a promotion) writes a new event file; the
    files of earlier stretches first lose their events from `first_step` on, which a kill after
    their write but before the checkpoint's left there, so that each epoch is in the logs once."""

    def __init__(self, out_dir: Path, hparams: dict[str, Any], trial_id: str, first_step: int) -> None:
        import tensorflow as tf

        self.tf = tf
        self.hparams = {k: hparam_value(v) for k, v in hparams.items()}
        self.trial_id = trial_id
        earlier = sorted((out_dir / FOLDER).glob("events.out.tfevents.*"))
        for path in earlier:
            drop_steps_from(path, first_step)
        self.writer = tf.summary.create_file_writer(str(out_dir / FOLDER))
        self.wrote_hparams = bool(earlier)  # at step 0: no stretch drops it

    def end(self, stopped: str | None) -> None:
        """The session's end in the HParams dashboard, from the engine's `stopped`: the epochs run
        out, an early stop or the target is a success (the trial completed); divergence and the
        time limit a failure. A pause (a promotion goes on) and a scheduler's stop are no end: the
        dashboard has no status for a pruned trial, whose session then stays unknown."""
        from tensorboard.plugins.hparams import api_pb2
        from tensorboard.plugins.hparams.summary import session_end_pb

        if stopped in ("paused", "pruned"):
            return
        status = api_pb2.STATUS_FAILURE if stopped in ("diverged", "timeout") else api_pb2.STATUS_SUCCESS
        with self.writer.as_default():
            self.tf.summary.experimental.write_raw_pb(session_end_pb(status).SerializeToString(), step=0)
        self.writer.flush()

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


def drop_steps_from(path: Path, first_step: int) -> None:
    """Rewrite the event file `path` without its events of step `first_step` or later (if it has
    any). A record torn by a kill ends the file there."""
    import tensorflow as tf
    from tensorboard.compat.proto.event_pb2 import Event

    kept, dropped = [], False
    try:
        for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            if Event.FromString(record).step >= first_step:
                dropped = True
            else:
                kept.append(record)
    except tf.errors.DataLossError:
        dropped = True
    if not dropped:
        return
    part = path.with_name(".rewrite.part")  # no "tfevents" in its name: TensorBoard reads no half-written copy
    with tf.io.TFRecordWriter(str(part)) as out:
        for record in kept:
            out.write(record)
    part.replace(path)

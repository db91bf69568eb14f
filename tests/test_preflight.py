"""`preflight` (run by `mpiopt check` and before every search): the model is built for real, its
output compared with the labels' range, and it takes one real training step and validates a batch.

A model or data that every trial would fail on is one `ConfigError` line, never an `OK`.
"""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from conftest import run_cli
from mpiopt._errors import ConfigError
from mpiopt.config import load_config

pytestmark = pytest.mark.slow

OBJECTIVES = '''
import numpy as np


def three_classes():
    """Labels 0..2, but the first training and validation labels are 0 and 1."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    y = rng.integers(0, 3, size=300)
    y[:2], y[200:202] = [0, 1], [1, 0]
    return (x[:200], y[:200]), (x[200:], y[200:])


def two_classes():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return (x[:200], y[:200]), (x[200:], y[200:])


def two_classes_one_hot():
    (x, y), (xv, yv) = two_classes()
    return (x, np.eye(2)[y]), (xv, np.eye(2)[yv])


def two_classes_some_ignored():
    (x, y), v = two_classes()
    y = y.copy()
    y[7] = -1
    return (x, y), v


def validation_empty():
    (x, y), (xv, yv) = two_classes()
    return (x, y), (xv[:0], yv[:0])


def validation_one_feature_wider():
    (x, y), (xv, yv) = two_classes()
    return (x, y), (np.concatenate([xv, xv[:, :1]], axis=1), yv)


def validation_feature_nan():
    (x, y), (xv, yv) = two_classes()
    xv = xv.copy()
    xv[5, 2] = np.nan
    return (x, y), (xv, yv)


def lists():
    (x, y), (xv, yv) = two_classes()
    return (x.tolist(), y.tolist()), (xv.tolist(), yv.tolist())


def frames():
    import pandas as pd

    (x, y), (xv, yv) = two_classes()
    return (pd.DataFrame(x), y), (pd.DataFrame(xv), yv)


def one_hot_three():
    (x, y), (xv, yv) = three_classes()
    return (x, np.eye(3)[y]), (xv, np.eye(3)[yv])


def two_outputs():
    (x, y), (xv, yv) = three_classes()
    return (x, {"a": y, "b": x[:, :1]}), (xv, {"a": yv, "b": xv[:, :1]})


def build_model(units=8):
    import keras

    return keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(units, activation="relu"),
                             keras.layers.Dense(2, activation="softmax")])


def build_raises_in_the_middle(units=8):
    if 6 <= units <= 10:
        raise ValueError(f"no layer of {units} units")
    return build_model(units)


def build_compiled(units=8):
    import keras

    model = build_model(units)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
    return model


def build_compiled_at_its_rate(units=8, learning_rate=0.01):
    import keras

    model = build_model(units)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def build_compiled_with(option):
    """A model compiled with an optimizer setting mpiopt's master optimizer does not apply."""
    import keras

    options = {"schedule": {"learning_rate": keras.optimizers.schedules.ExponentialDecay(0.01, 10, 0.5)},
               "clipnorm": {"clipnorm": 1.0}, "clipvalue": {"clipvalue": 0.5},
               "global_clipnorm": {"global_clipnorm": 1.0},
               "use_ema": {"use_ema": True}, "accumulation": {"gradient_accumulation_steps": 2}}
    opt = keras.optimizers.AdamW(**options.get(option, {}))
    if option == "exclude_from_weight_decay":
        opt.exclude_from_weight_decay(var_names=["bias"])
    model = build_model()
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def build_with_a_train_step_of_its_own(units=8, evaluates_its_own_way=False):
    """A model whose train_step adds a penalty to the loss (or, where it only has a test_step of its own, passes)."""
    import keras

    class Penalised(keras.Model):
        def train_step(self, data):
            return super().train_step(data)

    class EvaluatedItsOwnWay(keras.Model):
        def test_step(self, data):
            return super().test_step(data)

    i = keras.Input(shape=(8,))
    kind = EvaluatedItsOwnWay if evaluates_its_own_way else Penalised
    model = kind(i, keras.layers.Dense(2, activation="softmax")(keras.layers.Dense(units, activation="relu")(i)))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def build_ignoring_minus_one(units=8):
    import keras

    model = build_model(units)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(ignore_class=-1))
    return model


def build_with_own_loss(units=8):
    import keras

    def my_loss(y_true, y_pred):
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred)

    model = build_model(units)
    model.compile(optimizer="adam", loss=my_loss)
    return model


def build_two_outputs(units=8, classes=3):
    import keras

    i = keras.Input(shape=(8,))
    h = keras.layers.Dense(units, activation="relu")(i)
    model = keras.Model(i, {"a": keras.layers.Dense(classes, activation="softmax", name="a")(h),
                            "b": keras.layers.Dense(1, name="b")(h)})
    model.compile(optimizer="adam", loss={"a": "sparse_categorical_crossentropy", "b": "mse"})
    return model


def build_two_outputs_too_few(units=8):
    return build_two_outputs(units, classes=2)
'''


@pytest.fixture
def space(tmp_path):
    """Write `objs.py` and a search space using it; return the path of the YAML file."""
    (tmp_path / "objs.py").write_text(OBJECTIVES)

    def write(model="build_model", data="objs.py:three_classes", extra="loss: sparse_categorical_crossentropy",
              params="{units: {type: integer, low: 2, high: 16}}", training="batch_size: 16"):
        p = tmp_path / "space.yaml"
        p.write_text(textwrap.dedent(f"""\
            objective: {{model: objs.py:{model}, data: {data}{', ' + extra if extra else ''}}}
            parameters: {params}
            training: {{{training}}}
        """))
        return p

    return write


def preflight_error(path) -> str:
    from mpiopt.objective import preflight

    with pytest.raises(ConfigError) as info:
        preflight(load_config(path))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    assert "Graph execution error" not in msg and "Traceback" not in msg, msg
    return msg


def passes(path) -> None:
    from mpiopt.objective import preflight

    preflight(load_config(path))  # no exception


def write_h5(path, labels, n_features=8) -> None:
    import h5py

    labels = np.asarray(labels)
    with h5py.File(path, "w") as h:
        h["features"] = np.random.default_rng(0).normal(size=(len(labels), n_features)).astype(np.float32)
        h["labels"] = labels


# -- the model is built for real ---------------------------------------------------------------
def test_a_build_model_that_raises_is_a_config_error(space):
    msg = preflight_error(space(model="build_raises_in_the_middle"))
    assert msg.endswith("objective.model: build_raises_in_the_middle(units=9) failed: ValueError: no layer of 9 units")


# -- labels against the model's output -----------------------------------------------------------
@pytest.mark.parametrize("model,extra", [
    ("build_model", "loss: sparse_categorical_crossentropy"),   # compiled by mpiopt with a loss name
    ("build_compiled", ""),                                      # compiled by the user with a keras loss object
])
def test_labels_beyond_the_output_in_memory(space, model, extra):
    msg = preflight_error(space(model=model, extra=extra))
    assert "objective: labels range over 0..2 (3 classes) but the model's output has 2 units" in msg


def test_labels_beyond_the_output_in_hdf5_files(space, tmp_path):
    (tmp_path / "d").mkdir()
    write_h5(tmp_path / "d" / "train_0.h5", [0, 1] * 20)   # the first batch holds only 0 and 1
    write_h5(tmp_path / "d" / "train_1.h5", [0, 1] * 19 + [2, 1])
    write_h5(tmp_path / "d" / "val.h5", [1, 0] * 10)
    msg = preflight_error(space(data="{train: d/train_*.h5, val: d/val.h5}"))
    assert "labels range over 0..2 (3 classes) but the model's output has 2 units" in msg
    assert "train_1.h5" in msg


def test_a_validation_label_beyond_the_output_in_hdf5(space, tmp_path):
    (tmp_path / "d").mkdir()
    write_h5(tmp_path / "d" / "train_0.h5", [0, 1] * 20)
    write_h5(tmp_path / "d" / "val.h5", [1, 0] * 20 + [3])
    msg = preflight_error(space(data="{train: d/train_*.h5, val: d/val.h5}"))
    assert "labels range over 0..3 (4 classes) but the model's output has 2 units" in msg and "val.h5" in msg


def test_one_hot_labels_under_a_sparse_loss(space):
    msg = preflight_error(space(data="objs.py:two_classes_one_hot"))
    assert "labels have 2 values per sample (one-hot?) but sparse_categorical_crossentropy needs one class number " \
           "per sample; use categorical_crossentropy for one-hot labels" in msg


@pytest.mark.parametrize("odd", [0.7, float("nan")])
def test_labels_that_are_not_class_numbers_in_hdf5(space, tmp_path, odd):
    # float labels: whole ones are class numbers, a fraction (y * 0.7) or NaN is not (Keras would truncate it)
    (tmp_path / "d").mkdir()
    write_h5(tmp_path / "d" / "train_0.h5", np.array([0.0, 1.0] * 20))
    write_h5(tmp_path / "d" / "train_1.h5", np.array([0.0, 1.0] * 19 + [odd, 1.0]))
    write_h5(tmp_path / "d" / "val.h5", np.array([1.0, 0.0] * 10))
    msg = preflight_error(space(data="{train: d/train_*.h5, val: d/val.h5}"))
    assert f"labels hold {odd:g} (in " in msg and "train_1.h5), not a class number: sparse_categorical_crossentropy " \
        "needs whole numbers in [0, 2)" in msg, msg
    write_h5(tmp_path / "d" / "train_1.h5", np.array([0.0, 1.0] * 20))  # whole numbers as floats pass
    passes(space(data="{train: d/train_*.h5, val: d/val.h5}"))


def test_negative_labels(space, tmp_path):
    (tmp_path / "d").mkdir()
    write_h5(tmp_path / "d" / "train_0.h5", [0, 1] * 20 + [-1])
    write_h5(tmp_path / "d" / "val.h5", [1, 0] * 10)
    msg = preflight_error(space(data="{train: d/train_*.h5, val: d/val.h5}"))
    assert "labels range over -1..1 but sparse_categorical_crossentropy needs labels in [0, 2)" in msg


def test_one_hot_labels_wider_than_the_output(space):
    msg = preflight_error(space(data="objs.py:one_hot_three", extra="loss: categorical_crossentropy"))
    assert "one-hot labels are 3 wide but the model's output has 2 units" in msg


def test_a_misspelt_loss_name_is_named_as_such(space):
    msg = preflight_error(space(extra="loss: sparse_categorial_crossentropy"))
    assert msg.endswith("objective.loss: Keras knows no loss 'sparse_categorial_crossentropy' (did you mean "
                        "'sparse_categorical_crossentropy'?)")
    passes(space(data="objs.py:two_classes", extra="loss: sparse_categorical_crossentropy, metrics: [acc]"))


def test_a_misspelt_metric_name_is_named_as_such(space):
    msg = preflight_error(space(extra="loss: sparse_categorical_crossentropy, metrics: [acuracy], "
                                      "maximize: val_acuracy"))
    assert msg.endswith("objective.metrics: Keras knows no metric 'acuracy' (did you mean 'accuracy'?)")
    with pytest.raises(ConfigError) as info:  # read under its right name: the list is the misspelt one
        load_config(space(extra="loss: sparse_categorical_crossentropy, metrics: [acuracy], maximize: val_accuracy"))
    assert str(info.value).endswith("objective.metrics: Keras knows no metric 'acuracy' (did you mean 'accuracy'? "
                                    "objective.maximize reads 'val_accuracy')")
    with pytest.raises(ConfigError) as info:  # a name Keras' list does not hold: either may be the misspelt one
        load_config(space(extra="loss: sparse_categorical_crossentropy, metrics: [my_metrc], maximize: val_my_metric"))
    assert str(info.value).endswith("(did you mean 'val_my_metrc'? objective.metrics lists 'my_metrc': one of the "
                                    "two is misspelt)")
    with pytest.raises(ConfigError) as info:  # Keras' own name in the list: the name read is the misspelt one
        load_config(space(extra="loss: sparse_categorical_crossentropy, metrics: [accuracy], maximize: val_acuracy"))
    assert str(info.value).endswith("(did you mean 'val_accuracy'?)")
    with pytest.raises(ConfigError) as info:  # a class's name is Keras' own too: not the misspelt one
        load_config(space(extra="loss: sparse_categorical_crossentropy, metrics: [Precision], maximize: val_precision"))
    assert "objective.metrics: Keras knows no metric" not in str(info.value)
    passes(space(data="objs.py:two_classes", extra="loss: sparse_categorical_crossentropy, metrics: [ACC]"))


def test_keras_resolves_every_name_config_takes_for_its_own_metric():
    import keras

    from mpiopt.config import KERAS_METRIC_NAMES

    for name in sorted(KERAS_METRIC_NAMES - {"accuracy", "acc"}):  # compile resolves these two by the labels
        assert keras.metrics.get(name) is not None, name


def test_a_loss_of_the_users_own_fails_on_the_real_training_step(space):
    msg = preflight_error(space(model="build_with_own_loss", extra=""))
    assert "does not fit the data (a training step on 16 samples)" in msg
    assert "Received a label value of 2 which is outside the valid range of [0, 2)" in msg


def test_several_outputs_get_the_real_training_step(space):
    msg = preflight_error(space(model="build_two_outputs_too_few", data="objs.py:two_outputs", extra=""))
    assert "does not fit the data" in msg and "outside the valid range of [0, 2)" in msg
    passes(space(model="build_two_outputs", data="objs.py:two_outputs", extra=""))


def test_a_figure_of_merit_a_compiled_model_never_reports(space):
    msg = preflight_error(space(model="build_compiled", data="objs.py:two_classes", extra="maximize: val_acc"))
    assert "objective.maximize: 'val_acc' is not a metric this model reports" in msg
    assert "did you mean 'val_accuracy'" in msg


@pytest.mark.parametrize("params, training, where", [
    ("{units: {type: integer, low: 2, high: 16}, learning_rate: {type: real, low: 1.0e-4, high: 0.1}}", "",
     "parameters.learning_rate: objs.py:build_compiled compiles the model with its own optimizer (adam), which its "
     "trials train with, so the searched learning_rate would change nothing"),
    ("{units: {type: integer, low: 2, high: 16}, optimizer: {choices: [sgd, adam]}}", "",
     "parameters.optimizer: "),
    ("{units: {type: integer, low: 2, high: 16}}", ", optimizer: sgd", "training.optimizer: "),
])
def test_optimizer_settings_a_model_compiled_with_its_own_optimizer_ignores_are_refused(space, params, training,
                                                                                         where):
    msg = preflight_error(space(model="build_compiled", data="objs.py:two_classes", extra="maximize: val_accuracy",
                                params=params, training="batch_size: 16" + training))
    fix = "take" if where.startswith("parameters") else "leave it out (the model's own optimizer trains)"
    assert where in msg and fix in msg and "or return the model uncompiled (objective.loss set)" in msg
    # taken by build_model, which compiles with it: the search does set it
    passes(space(model="build_compiled_at_its_rate", data="objs.py:two_classes", extra="maximize: val_accuracy",
                 params="{units: {type: integer, low: 2, high: 16}, learning_rate: {type: real, low: 1.0e-4, "
                        "high: 0.1}}"))


@pytest.mark.parametrize("option, says", [
    ("schedule", "AdamW at a learning-rate schedule (ExponentialDecay), which mpiopt's master does not follow: give "
                 "the optimizer a number (mpiopt changes the rate only by training.warmup_epochs and lr_scaling)"),
    ("clipnorm", "AdamW(clipnorm=1.0), which mpiopt's master optimizer does not apply (it steps on the gradients "
                 "unclipped): compile without clipnorm"),
    ("clipvalue", "AdamW(clipvalue=0.5), which"),
    ("global_clipnorm", "AdamW(global_clipnorm=1.0), which"),
    ("use_ema", "AdamW(use_ema=True), which mpiopt's master optimizer does not apply (it keeps no moving average"),
    ("accumulation", "AdamW(gradient_accumulation_steps=2), which"),
    ("exclude_from_weight_decay", "AdamW excluding weights from its weight decay (exclude_from_weight_decay)"),
])
def test_optimizer_settings_the_master_does_not_apply_are_refused(space, option, says):
    msg = preflight_error(space(model="build_compiled_with", data="objs.py:two_classes", extra="",
                                params=f"{{option: {{choices: [{option}]}}}}"))
    assert f"objective.model: build_compiled_with(option='{option}'): build_model compiles the model with {says}" \
        in msg, msg
    passes(space(model="build_compiled_with", data="objs.py:two_classes", extra="",
                 params="{option: {choices: [none]}}"))


def test_a_model_with_a_train_step_of_its_own_is_refused(space):
    msg = preflight_error(space(model="build_with_a_train_step_of_its_own", data="objs.py:two_classes", extra=""))
    assert msg.endswith("objective.model: build_with_a_train_step_of_its_own(units=9): build_model returned a "
                        "Penalised, which overrides train_step: mpiopt computes the gradients from the model's call "
                        "and its compiled loss, not train_step, so put the extra term in a loss or in self.add_loss")
    passes(space(model="build_with_a_train_step_of_its_own", data="objs.py:two_classes", extra="",
                 params="{units: {type: integer, low: 2, high: 16}, evaluates_its_own_way: {choices: [true]}}"))


def test_a_learning_rate_set_for_a_model_compiled_with_its_own_optimizer_is_refused(space):
    from mpiopt.objective import preflight

    path = space(model="build_compiled", data="objs.py:two_classes", extra="maximize: val_accuracy")
    with pytest.raises(ConfigError) as info:  # mpiopt train --set learning_rate=0.1
        preflight(load_config(path), sets=("learning_rate",))
    assert str(info.value).startswith("--set learning_rate: objs.py:build_compiled compiles the model with its own "
                                      "optimizer (adam), which its trials train with, so --set learning_rate would "
                                      "change nothing: leave it out"), info.value
    passes(path)


@pytest.mark.parametrize("extra, key", [
    ("loss: mean_squared_error", "loss"),
    ("metrics: [sparse_top_k_categorical_accuracy], maximize: val_sparse_top_k_categorical_accuracy", "metrics"),
])
def test_a_loss_or_metrics_a_model_compiled_by_build_model_ignores_are_refused(space, extra, key):
    msg = preflight_error(space(model="build_compiled", data="objs.py:two_classes", extra=extra))
    assert msg.endswith(f"objective.{key}: objs.py:build_compiled compiles the model itself, so objective.{key} is "
                        "not used: remove it from the file (or return the model uncompiled for it to apply)"), msg


def test_metric_names_read_before_the_model_is_built_are_said_to_be_those_of_the_model_mpiopt_compiles(space):
    with pytest.raises(ConfigError, match=r"objective.maximize: 'val_accuracy' is not a metric this model reports "
                                          r"\(it has: loss, val_loss, as mpiopt compiles it with objective.loss and "
                                          r"objective.metrics: if build_model compiles it, remove those from the "
                                          r"file\)"):
        load_config(space(model="build_compiled", extra="loss: mse, maximize: val_accuracy"))


def test_a_validation_metric_with_empty_validation_data_says_they_are_empty(space):
    extra = "loss: sparse_categorical_crossentropy, metrics: [accuracy], maximize: val_accuracy"
    msg = preflight_error(space(data="objs.py:validation_empty", extra=extra))
    assert msg.endswith("objective.maximize: 'val_accuracy' is measured on the validation data, and they are empty "
                        "(0 samples)"), msg


@pytest.mark.parametrize("key", ["early_stopping", "target"])
def test_a_monitor_a_compiled_model_never_reports(space, key):
    settings = "{monitor: val_acc, value: 0.9}" if key == "target" else "{monitor: val_acc, patience: 2}"
    msg = preflight_error(space(model="build_compiled", data="objs.py:two_classes", extra="maximize: val_accuracy",
                                training=f"batch_size: 16, {key}: {settings}"))
    assert f"training.{key}.monitor: 'val_acc' is not a metric this model reports" in msg
    assert "did you mean 'val_accuracy'" in msg


# -- correct models pass ---------------------------------------------------------------------------
@pytest.mark.parametrize("model,data,extra", [
    ("build_model", "objs.py:two_classes", "loss: sparse_categorical_crossentropy, metrics: [accuracy], "
                                           "maximize: val_accuracy"),
    ("build_compiled", "objs.py:two_classes", "maximize: val_accuracy"),
    ("build_ignoring_minus_one", "objs.py:two_classes_some_ignored", ""),
])
def test_a_correct_model_passes(space, model, data, extra):
    passes(space(model=model, data=data, extra=extra))


def test_a_correct_model_on_hdf5_files_passes(space, tmp_path):
    (tmp_path / "d").mkdir()
    for i in range(3):
        write_h5(tmp_path / "d" / f"train_{i}.h5", [0, 1] * 10)
    write_h5(tmp_path / "d" / "val.h5", [1, 0] * 5)
    passes(space(data="{train: d/train_*.h5, val: d/val.h5}"))
    # a training glob that takes the validation file in too
    msg = preflight_error(space(data="{train: d/*.h5, val: d/val.h5}"))
    assert msg.endswith(f"objective.data.train: 'd/*.h5' also names {(tmp_path / 'd' / 'val.h5').resolve()}, a file "
                        "of data.val: the trials would be judged on data they trained on")


def test_hdf5_files_whose_shapes_differ(space, tmp_path):
    (tmp_path / "d").mkdir()
    write_h5(tmp_path / "d" / "train_0.h5", [0, 1] * 10)
    write_h5(tmp_path / "d" / "train_1.h5", [0, 1] * 10, n_features=9)
    write_h5(tmp_path / "d" / "val.h5", [1, 0] * 5)
    msg = preflight_error(space(data="{train: d/train_*.h5, val: d/val.h5}"))
    assert "objective.data: " in msg and "train_1.h5: features have shape (9,) per sample" in msg


def test_a_validation_file_whose_shapes_differ_from_the_training_files(space, tmp_path):
    (tmp_path / "d").mkdir()
    write_h5(tmp_path / "d" / "train_0.h5", [0, 1] * 10)
    write_h5(tmp_path / "d" / "val.h5", [1, 0] * 5, n_features=9)
    msg = preflight_error(space(data="{train: d/train_*.h5, val: d/val.h5}"))
    assert (f"objective.data: {(tmp_path / 'd' / 'val.h5').resolve()}: features have shape (9,) per sample but "
            f"those of {(tmp_path / 'd' / 'train_0.h5').resolve()} have (8,): a model cannot train on one and "
            "validate on the other") in msg


def test_a_validation_file_with_a_group_where_training_has_a_dataset(space, tmp_path):
    import h5py

    (tmp_path / "d").mkdir()
    write_h5(tmp_path / "d" / "train_0.h5", [0, 1] * 10)
    with h5py.File(tmp_path / "d" / "val.h5", "w") as h:
        h.create_group("features")["a"] = np.zeros((4, 8), np.float32)
        h["labels"] = np.zeros(4, np.int64)
    msg = preflight_error(space(data="{train: d/train_*.h5, val: d/val.h5}"))
    assert "val.h5: the arrays are features['a'], labels, but in " in msg and "train_0.h5 features, labels" in msg


def test_validation_arrays_whose_shapes_differ_from_the_training_arrays(space):
    msg = preflight_error(space(data="objs.py:validation_one_feature_wider"))
    assert msg.endswith("objective.data: the validation data: features have shape (9,) per sample but those of the "
                        "training data have (8,): a model cannot train on one and validate on the other")


def test_a_model_that_does_not_fit_hdf5_data_names_the_file(space, tmp_path):
    (tmp_path / "d").mkdir()
    write_h5(tmp_path / "d" / "train_0.h5", [0, 1] * 10, n_features=9)
    write_h5(tmp_path / "d" / "val.h5", [1, 0] * 5, n_features=9)
    msg = preflight_error(space(data="{train: d/train_*.h5, val: d/val.h5}"))
    first = (tmp_path / "d" / "train_0.h5").resolve()
    assert f"does not fit the data (a forward pass on 16 training samples of {first}): ValueError: " in msg


def test_nan_in_validation_arrays_is_named_with_its_sample(space):
    msg = preflight_error(space(data="objs.py:validation_feature_nan"))
    assert msg.endswith("objective.data: objs.py:validation_feature_nan: val features: sample 5 holds NaN or inf (drop "
                        "or repair such samples)")


def test_lists_where_arrays_belong_are_named(space):
    msg = preflight_error(space(data="objs.py:lists"))
    assert msg.endswith("objective.data: objs.py:lists: train features[0][0] is a float, where a numpy array of "
                        "samples belongs (give numpy arrays, not lists)")
    msg = preflight_error(space(data="objs.py:frames"))
    assert msg.endswith("objective.data: objs.py:frames: train features is a DataFrame, where a numpy array of "
                        "samples belongs (np.asarray makes one)")


def test_hdf5_values_that_are_not_numbers_nan_in_validation_and_single_values_are_named(space, tmp_path):
    import h5py

    def folder(name):  # a folder of its own for each case: a process keeps the data it loaded by their names
        (tmp_path / name).mkdir()
        write_h5(tmp_path / name / "train_0.h5", [0, 1] * 10)
        write_h5(tmp_path / name / "val.h5", [1, 0] * 5)
        return tmp_path / name, f"{{train: {name}/train_*.h5, val: {name}/val.h5}}"

    d, data = folder("strings")
    with h5py.File(d / "train_1.h5", "w") as h:  # a second training file of strings
        h["features"] = np.array([[b"a"] * 8] * 4)
        h["labels"] = np.zeros(4, np.int64)
    assert preflight_error(space(data=data)).endswith(
        f"{(d / 'train_1.h5').resolve()}: features hold strings (|S1), not numbers")
    d, data = folder("inf")
    with h5py.File(d / "val.h5", "a") as h:
        h["features"][3, 1] = np.inf
    assert preflight_error(space(data=data)).endswith(
        f"{(d / 'val.h5').resolve()}: features: sample 3 holds NaN or inf (drop or repair such samples)")
    d, data = folder("single")
    with h5py.File(d / "val.h5", "w") as h:
        h["features"], h["labels"] = 1.0, 0
    assert preflight_error(space(data=data)).endswith(
        f"{(d / 'val.h5').resolve()}: 'features' is a single value, not a dataset of samples")


def test_a_training_file_with_nan_stops_the_trial_that_reads_it(tmp_path):
    """The preflight reads the training files' first samples only: a trial's worker reads its
    files whole and refuses NaN there, naming the file and the sample."""
    from mpiopt._errors import DataError
    from mpiopt.learn._data import read_h5

    write_h5(tmp_path / "t.h5", [0, 1] * 10)
    import h5py

    with h5py.File(tmp_path / "t.h5", "a") as h:
        h["features"][17, 0] = np.nan
    with pytest.raises(DataError) as info:
        read_h5(tmp_path / "t.h5", "features", "labels")
    assert str(info.value) == f"{tmp_path / 't.h5'}: features: sample 17 holds NaN or inf (drop or repair such samples)"


# -- the command line -----------------------------------------------------------------------------
def test_mpiopt_check_stops_with_one_line_and_exit_2(space, tmp_path, cli_here):
    p = run_cli(["check", space()], cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("mpiopt: error: ") and "labels range over 0..2 (3 classes)" in lines[0]
    assert "OK" not in p.stdout
    # HDF5 files: their reading imports Keras, whose start-up lines (oneDNN, the CUDA probe) are not shown
    (tmp_path / "d").mkdir()
    write_h5(tmp_path / "d" / "train.h5", [0, 1, 2] * 10)
    write_h5(tmp_path / "d" / "val.h5", [1, 0] * 5)
    p = run_cli(["check", space(data="{train: d/train.h5, val: d/val.h5}")], cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.startswith("mpiopt: error: ") and p.stderr.count("\n") == 1, p.stderr
    p = cli_here("check", space(data="objs.py:two_classes"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"{tmp_path / 'space.yaml'}: OK (the model, built at the middle of the space, took a "
                               "training step on its data)\n")

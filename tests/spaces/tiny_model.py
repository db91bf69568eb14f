"""A tiny Keras model and data for the tests (fast on one core)."""
import numpy as np


def load_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    return (x[:500], y[:500]), (x[500:], y[500:])


def load_bad_data():
    (x, y), v = load_data()
    return (x, y[:-3]), v


def build_model(units=8, broken=False):
    import keras

    if broken:
        raise RuntimeError("cannot build this one")
    return keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(units, activation="relu"),
                             keras.layers.Dense(2, activation="softmax")])


def build_batchnorm(units=8):
    """Batch normalization (moving statistics: non-trainable state) and dropout (a seed
    generator's integer state): what a checkpoint must bring back besides the weights."""
    import keras

    return keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(units), keras.layers.BatchNormalization(),
                             keras.layers.Activation("relu"), keras.layers.Dropout(0.3),
                             keras.layers.Dense(2, activation="softmax")])


def build_compiled(units=8):
    import keras

    model = build_model(units)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def build_regressor(units=4):
    import keras

    return keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(units), keras.layers.Dense(1)])


def load_inf_data():
    (x, y), (xv, yv) = load_data()
    y = y.astype(np.float32)
    y[5] = np.inf
    return (x, y), (xv, yv.astype(np.float32))


def build_wrong_input(units=8):
    import keras

    return keras.Sequential([keras.Input(shape=(9,)), keras.layers.Dense(units), keras.layers.Dense(2)])


def load_wrong_label_shape():
    (x, y), (xv, yv) = load_data()
    return (x, y[:, None].repeat(3, axis=1)), (xv, yv[:, None].repeat(3, axis=1))


def load_nothing():
    return None


def build_bomb(units=8):
    """A model whose training fails a few batches in (InvalidArgumentError): on world rank 2 alone
    where `units` is odd, on every training rank at the same batch where it is even."""
    import os

    import keras
    import tensorflow as tf

    rank = int(os.environ.get("PMI_RANK", "0"))
    doomed = rank == 2 or (rank > 0 and units % 2 == 0)  # rank 0 is the coordinator: its preflight passes

    class Bomb(keras.layers.Layer):
        def build(self, shape):
            self.calls = self.add_weight(shape=(), initializer="zeros", trainable=False, name="calls")

        def call(self, x, training=False):
            if training and doomed:
                self.calls.assign_add(1.0)
                tf.debugging.assert_less(self.calls, 3.0, message="bomb went off")
            return x

    return keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(units, activation="relu"), Bomb(),
                             keras.layers.Dense(2, activation="softmax")])


def build_unbuilt(units=8):
    """A Sequential without keras.Input: it has no weights until it is first called."""
    import keras

    return keras.Sequential([keras.layers.Dense(units, activation="relu"), keras.layers.Dense(2, activation="softmax")])

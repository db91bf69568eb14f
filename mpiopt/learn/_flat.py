"""A Keras model seen as one contiguous float32 buffer of weights (and one of gradients).

Messages between ranks carry these buffers whole, into preallocated numpy arrays. A model that
computes in float16 (Keras' `mixed_float16` policy) keeps float32 variables, so the buffers stay
float32; its gradients are taken on a dynamically scaled loss (`LossScale`), because float16
gradients underflow.
"""
from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from .._errors import TrialFailed
from ._data import n_samples, take


class _OwnRetracing(logging.Filter):
    """Drop TensorFlow's retracing warning about FlatModel's functions: they are made anew for
    each trial's model, on purpose (a trial's variables are its own), so each trial traces them
    once and TensorFlow, counting across trials, takes that for a loop that keeps retracing."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("triggered tf.function retracing" in message and "FlatModel" in message)


logging.getLogger("tensorflow").addFilter(_OwnRetracing())


class LossScale:
    """Dynamic loss scaling, the rule of Keras' `LossScaleOptimizer`.

    The loss is multiplied by `scale` before the gradient is taken and the gradient divided by it
    after, so that small float16 gradients do not flush to zero. A gradient that is not finite
    (the scaled backward pass overflowed) halves the scale and is not used (`FlatModel` takes the
    batch again at the new scale); `growth_steps` finite gradients in a row double it.
    """

    def __init__(self, initial: float = 2.0 ** 15, growth_steps: int = 2000) -> None:
        if initial <= 0 or growth_steps < 1:
            raise ValueError(f"a loss scale needs initial > 0 and growth_steps >= 1, got ({initial}, {growth_steps})")
        self.scale = float(initial)
        self.growth_steps = int(growth_steps)
        self.finite_steps = 0  # finite gradients since the scale last changed
        self.skipped = 0  # gradients skipped so far

    def update(self, finite: bool) -> bool:
        """Account for one step's gradient; whether it is to be used (it was finite)."""
        if not finite:
            self.scale *= 0.5
            self.finite_steps = 0
            self.skipped += 1
            return False
        self.finite_steps += 1
        if self.finite_steps >= self.growth_steps:
            self.scale *= 2.0
            self.finite_steps = 0
        return True


def _leaf_layers(model) -> list:
    """The model's layers, nested ones included, that hold no layers themselves (Keras' own walk)."""
    return [layer for layer in model._flatten_layers(include_self=False)
            if not list(layer._flatten_layers(include_self=False, recursive=False))]


def computes_in_float16(model) -> bool:
    """Whether a layer with weights of the model computes in float16 (a `mixed_float16` model)."""
    return "float16" in compute_dtypes(model)


def compute_dtypes(model) -> list[str]:
    """The compute dtypes of the model's layers with weights, each once, in order."""
    seen: dict[str, None] = {}
    for layer in _leaf_layers(model):
        if layer.weights:
            seen[str(getattr(layer, "compute_dtype", "?"))] = None
    return list(seen)


def refuse_a_train_step_of_its_own(model) -> None:
    """FlatModel takes the gradient from the model's call and its compiled loss (`compute_loss`),
    never from `train_step`: a model that overrides it (a penalty added to the loss, say) would
    train without that change, without a word. Its own `test_step` is used (validation)."""
    import keras

    if type(model).train_step is not keras.Model.train_step:  # Sequential's and Functional's are Model's
        raise TrialFailed(f"build_model returned a {type(model).__name__}, which overrides train_step: mpiopt "
                          "computes the gradients from the model's call and its compiled loss, not train_step, so "
                          "put the extra term in a loss or in self.add_loss")


def _frozen_weights(model) -> set[int]:
    """ids of the floating-point weights of layers the user froze (`trainable = False`: a
    pretrained backbone), found through the models among the layers. Training never changes them
    (a frozen batch normalization runs in inference mode) and build_model makes them again, so
    they stay out of the state that workers send every epoch, that is averaged and checkpointed:
    a frozen backbone of millions of weights would otherwise travel every epoch. A frozen layer's
    integer variables (a dropout's seed generator) do change, and stay in."""
    import keras

    found, todo = set(), list(model.layers)
    while todo:
        layer = todo.pop()
        if not layer.trainable:
            found.update(id(v) for v in layer.weights if "float" in str(v.dtype))
        elif isinstance(layer, keras.Model):
            todo.extend(layer.layers)
    return found


def _count(v) -> int:
    return int(np.prod(v.shape)) if v.shape else 1


def _values(variables: list) -> np.ndarray:
    """The variables' values, flat, in float64: an integer state (a seed generator's) must come
    back exactly, which float32 rounds."""
    if not variables:
        return np.zeros(0, dtype=np.float64)
    return np.concatenate([np.asarray(v.numpy(), dtype=np.float64).reshape(-1) for v in variables])


def _assign(variables: list, flat: np.ndarray) -> None:
    """Give the variables the values `_values` gave, each in its own shape and dtype."""
    i = 0
    for v in variables:
        n = _count(v)
        v.assign(flat[i:i + n].reshape(v.shape).astype(v.dtype))
        i += n


def _open_batch_spec(batch: Any):
    """The TensorSpec nest of a batch with its first dimension (the batch size) left open."""
    import tensorflow as tf

    return tf.nest.map_structure(lambda a: tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype)), batch)


class FlatModel:
    """Flat views of a model's trainable weights, its non-trainable state, and its gradients.

    `jit_compile` XLA-compiles the training step; `loss_scale` (default: where the model computes
    in float16) takes gradients on a dynamically scaled loss.
    """

    SMALLEST_SCALE = 2.0 ** -10  # below it, a gradient that is still not finite is given up on

    def __init__(self, model, *, jit_compile: bool = False, loss_scale: LossScale | bool | None = None) -> None:
        import tensorflow as tf

        refuse_a_train_step_of_its_own(model)
        self.model = model
        self.jit_compile = bool(jit_compile)
        if loss_scale is None:
            loss_scale = computes_in_float16(model)
        self.loss_scale = LossScale() if loss_scale is True else (loss_scale or None)
        self.trainable = list(model.trainable_variables)
        frozen = _frozen_weights(model)
        self.state = [v for v in model.non_trainable_variables if id(v) not in frozen]
        self.shapes = [tuple(v.shape) for v in self.trainable]
        self.sizes = [int(np.prod(s)) if s else 1 for s in self.shapes]
        self.size = int(sum(self.sizes))
        self.state_size = int(sum(_count(v) for v in self.state))
        trainable, shapes, sizes = self.trainable, self.shapes, self.sizes

        @tf.function(reduce_retracing=True)
        def _set(flat):
            for v, part, shape in zip(trainable, tf.split(flat, sizes), shapes, strict=True):
                v.assign(tf.reshape(tf.cast(part, v.dtype), shape))

        @tf.function(reduce_retracing=True)
        def _get():
            return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in trainable], 0)

        self._set, self._get = _set, _get
        self._grad_step = None
        self._test_step = None

    # -- weights ---------------------------------------------------------------------------
    def get(self, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty(self.size, dtype=np.float32)
        if self.size:
            np.copyto(out[: self.size], self._get().numpy())
        return out

    def set(self, flat: np.ndarray) -> None:
        if self.size:
            self._set(flat[: self.size])

    def get_state(self) -> np.ndarray:
        """Non-trainable state (e.g. batch-norm statistics, a dropout's seed), flat."""
        return _values(self.state)

    def set_state(self, flat: np.ndarray) -> None:
        _assign(self.state, flat)

    def set_kept(self, weights: np.ndarray, state: np.ndarray | None) -> None:
        """Weights and state as a checkpoint kept them; a state of another size (an older mpiopt's,
        which kept a frozen layer's weights in it) gives way to the model's own."""
        self.set(weights)
        if state is not None and state.size == self.state_size > 0:
            self.set_state(state)

    # -- one training batch ----------------------------------------------------------------
    def grad_step(self, x: Any, y: Any) -> tuple[float, np.ndarray]:
        """Loss and flat gradient of one batch; updates the model's metric states (as Keras does).

        Both float32 and unscaled whatever the model computes in. With loss scaling, a batch whose
        scaled gradient overflowed is taken again at the halved scale: the gradient goes on to a
        stateful optimizer (the master's, or GEM's proxy), for which a zero gradient would not
        skip the batch but take a step on momentum alone. Only a gradient still not finite at a
        scale of 2**-10 (or a loss that is not finite: divergence) comes back as zeros.
        """
        if self._grad_step is None:
            self._grad_step = self._make_grad_step(x, y)
        if self.loss_scale is None:
            loss, flat = self._grad_step(x, y)
            return float(loss), flat.numpy()
        import tensorflow as tf

        while True:
            loss, flat, finite = self._grad_step(x, y, tf.constant(self.loss_scale.scale, tf.float32))
            if self.loss_scale.update(bool(finite)):
                return float(loss), flat.numpy()
            if not math.isfinite(float(loss)) or self.loss_scale.scale < self.SMALLEST_SCALE:
                return float(loss), np.zeros(self.size, dtype=np.float32)

    def _make_grad_step(self, x: Any, y: Any):
        """The training step, traced once for every batch size (the first dimension left open: an
        epoch's last batch is smaller), on a model whose metric variables exist before the trace:
        variables made while tracing make TensorFlow trace the function a second time."""
        import tensorflow as tf

        model, trainable = self.model, self.trainable
        self._build_metrics(x, y)

        def gradient(x, y, scale):
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True)
                loss = tf.cast(model.compute_loss(x=x, y=y, y_pred=y_pred, training=True), tf.float32)
                scaled = loss if scale is None else loss * scale
            grads = tape.gradient(scaled, trainable)
            flat = tf.concat([tf.reshape(tf.cast(g if g is not None else tf.zeros_like(v), tf.float32), [-1])
                              for g, v in zip(grads, trainable, strict=True)], 0) if trainable else tf.zeros([0])
            return loss, flat, y_pred

        def update_metrics(x, y, y_pred, loss):
            tracker = getattr(model, "_loss_tracker", None)
            if tracker is not None:
                tracker.update_state(loss, sample_weight=tf.shape(tf.nest.flatten(x)[0])[0])
            model.compute_metrics(x, y, y_pred, sample_weight=None)
            return tf.constant(True)

        def step(x, y):
            loss, flat, y_pred = gradient(x, y, None)
            update_metrics(x, y, y_pred, loss)
            return loss, flat

        def scaled_step(x, y, scale):
            loss, flat, y_pred = gradient(x, y, scale)
            finite = tf.reduce_all(tf.math.is_finite(flat))
            # a batch taken again at a smaller scale counts once in the metrics: on the attempt that
            # succeeds, or on the last (a loss that is not finite must show in them)
            last = tf.logical_or(tf.logical_not(tf.math.is_finite(loss)), scale * 0.5 < self.SMALLEST_SCALE)
            tf.cond(tf.logical_or(finite, last), lambda: update_metrics(x, y, y_pred, loss),
                    lambda: tf.constant(False))
            return loss, flat / scale, finite

        signature = [_open_batch_spec(x), _open_batch_spec(y)]
        if self.loss_scale is not None:
            signature.append(tf.TensorSpec([], tf.float32))
        compile_ = tf.function(input_signature=signature, jit_compile=self.jit_compile or None)
        return compile_(step if self.loss_scale is None else scaled_step)

    def _build_metrics(self, x: Any, y: Any) -> None:
        """Make the compiled loss's and metrics' variables on one sample, eagerly, and reset them;
        once: a step made before made them."""
        if self._grad_step is not None or self._test_step is not None:
            return
        import tensorflow as tf

        one_x, one_y = (tf.nest.map_structure(lambda a: a[:1], b) for b in (x, y))
        y_pred = self.model(one_x, training=False)
        self.model.compute_loss(x=one_x, y=one_y, y_pred=y_pred, training=False)
        self.model.compute_metrics(one_x, one_y, y_pred, sample_weight=None)
        self.model.reset_metrics()

    # -- validation ----------------------------------------------------------------------------
    def evaluate(self, x: Any, y: Any, batch_size: int) -> dict[str, float]:
        """The loss and metrics on (x, y), as Keras' `evaluate` gives them (its metrics reset, then
        the model's `test_step` on each batch), with the step traced once for every batch size."""
        if self._test_step is None:
            self._test_step = self._make_test_step(x, y)
        self.model.reset_metrics()
        for lo in range(0, n_samples(x), batch_size):
            part = slice(lo, lo + batch_size)
            self._test_step(take(x, part), take(y, part))
        return self.metrics()

    def _make_test_step(self, x: Any, y: Any):
        import tensorflow as tf

        self._build_metrics(x, y)

        def step(x, y):
            self.model.test_step((x, y))
            return tf.constant(True)

        signature = [_open_batch_spec(x), _open_batch_spec(y)]
        return tf.function(step, input_signature=signature, jit_compile=self.jit_compile or None)

    def summed_metric_state(self) -> np.ndarray:
        """The metrics' variables that add up over parts of the data (Keras' aggregation "sum":
        totals, counts, AUC's confusion counts), flat."""
        return _values(self._summed_metric_variables())

    def set_summed_metric_state(self, flat: np.ndarray) -> None:
        _assign(self._summed_metric_variables(), flat)

    def metrics_add_up(self) -> bool:
        """Whether every metric variable adds up over parts of the data (Keras' default), so the
        summed state alone gives the metrics of the whole."""
        return all(v.aggregation == "sum" for v in self.model.metrics_variables)

    def _summed_metric_variables(self) -> list:
        return [v for v in self.model.metrics_variables if v.aggregation == "sum"]

    def metrics(self) -> dict[str, float]:
        out = {}
        for k, v in self.model.get_metrics_result().items():
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                continue
        return out

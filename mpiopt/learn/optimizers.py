"""Optimizers for the master of a distributed training job: one flat float32 buffer, updated in place.

The master of an MPI-Learn style job holds all model weights as ONE contiguous float32 vector and
receives gradients as another; it applies the optimizer to that vector and sends it back. The
classes here do exactly what `keras.optimizers.<Class>` (Keras 3) does to each variable, with
Keras's defaults, formulas, epsilon placement and iteration counter (the first step is t = 1), so
a job trained by the master follows the single-process `model.fit` path to float32 rounding.

Speed: every slot and scratch buffer is allocated at construction, and `step` walks the buffer in
chunks of `chunk_size` elements (64k by default) so the dozen elementwise passes of a formula run
over a few L2-resident chunk arrays instead of over the whole buffer in RAM, with ufuncs writing
into scratch (`out=`): no array is allocated per step. No numexpr: on one thread it is slower
than the chunked ufuncs.

Checkpoints: `config()` (JSON) rebuilds the optimizer through `make_master_optimizer`;
`state_dict()` holds arrays (for npz) and int/float scalars (for JSON), never anything pickled.
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "DEFAULT_CHUNK_SIZE", "OPTIMIZERS", "FlatOptimizer", "SGD", "RMSprop", "Adadelta", "Adam", "AdamW",
    "Adagrad", "Adamax", "Nadam", "keras_optimizer_problem", "make_master_optimizer", "momentum_of",
]

# 64k float32 = 256 KiB per array: the 5-7 chunk arrays one step touches (weights, grads, slots,
# scratch) stay within a 2 MiB L2; the exact size matters little around it.
DEFAULT_CHUNK_SIZE = 65536

StateValue = np.ndarray | float | int
_F32 = np.float32

# Keras options that change the update (clipping, EMA, loss scaling, accumulation) are not
# implemented: accepted only at their no-op Keras defaults so a Keras `get_config()` still loads.
_KERAS_ONLY: dict[str, Any] = {
    "clipnorm": None, "clipvalue": None, "global_clipnorm": None, "use_ema": False, "ema_momentum": 0.99,
    "ema_overwrite_frequency": None, "loss_scale_factor": None, "gradient_accumulation_steps": None,
}


# Why the master leaves out each Keras option above, said when a model compiled by build_model sets
# one: refused, since dropping it would train another model than the one written without a word
_WHY_NOT_APPLIED = {
    "clipnorm": "it steps on the gradients unclipped",
    "clipvalue": "it steps on the gradients unclipped",
    "global_clipnorm": "it steps on the gradients unclipped",
    "use_ema": "it keeps no moving average of the weights",
    "loss_scale_factor": "it scales the loss only under training.mixed_precision",
    "gradient_accumulation_steps": "it steps on every batch (raise training.batch_size instead)",
}


def keras_optimizer_problem(opt) -> str | None:
    """What the Keras optimizer `opt`, which build_model compiled the model with, does that the
    master's optimizer (built from its name and numeric settings) would not: one line saying
    what to do instead, or None."""
    cfg, kind = opt.get_config(), type(opt).__name__
    rate = cfg.get("learning_rate")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        what = rate.get("class_name") if isinstance(rate, Mapping) else type(rate).__name__
        return (f"build_model compiles the model with {kind} at a learning-rate schedule ({what}), which mpiopt's "
                "master does not follow: give the optimizer a number (mpiopt changes the rate only by "
                "training.warmup_epochs and lr_scaling)")
    for key, why in _WHY_NOT_APPLIED.items():
        value = cfg.get(key, _KERAS_ONLY[key])
        if value is not None and value != _KERAS_ONLY[key]:
            return (f"build_model compiles the model with {kind}({key}={value!r}), which mpiopt's master optimizer "
                    f"does not apply ({why}): compile without {key}")
    if cfg.get("weight_decay") and (getattr(opt, "_exclude_from_weight_decay", None)
                                    or getattr(opt, "_exclude_from_weight_decay_pattern", None) is not None):
        return (f"build_model compiles the model with {kind} excluding weights from its weight decay "
                "(exclude_from_weight_decay), which mpiopt's master optimizer does not apply (it decays every "
                "weight): compile without the exclusion, or without weight_decay")
    return None


def _real(option: str, value: Any, lo: float | None = None, hi: float | None = None, *,
          hi_open: bool = False) -> float:
    """`value` as a float, or a one-line ValueError naming the option and the accepted range."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"optimizer option {option!r} must be a number, got {value!r}")
    x = float(value)
    too_high = hi is not None and (x >= hi if hi_open else x > hi)
    if not math.isfinite(x) or (lo is not None and x < lo) or too_high:
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}{')' if hi_open else ']'}"
        raise ValueError(f"optimizer option {option!r} must be a finite number in {rng}, got {value!r}")
    return x


def _flag(option: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"optimizer option {option!r} must be true or false, got {value!r}")
    return bool(value)


def _pow32(base: float, t: int) -> float:
    """base**t with `base` rounded to float32 first, as Keras does (`ops.power(cast(beta, float32), t)`)."""
    return float(_F32(base)) ** t


class FlatOptimizer:
    """Base class: a Keras 3 optimizer applied to one flat float32 buffer, in place.

    Subclasses declare their Keras options as keyword-only `__init__` parameters (with Keras's
    defaults), create their slots with `_add_slot`, and implement `_coefficients` (per-step
    float32 scalars) and `_update` (one chunk).
    """

    name: ClassVar[str] = ""
    n_scratch: ClassVar[int] = 2  # chunk-sized scratch arrays `_update` needs
    momentum_option: ClassVar[str | None] = None  # the option that sets its momentum, if it has one

    def __init__(self, size: int, *, learning_rate: float, weight_decay: float | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"optimizer size must be a positive number of parameters, got {size!r}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
            raise ValueError(f"optimizer chunk_size must be a positive integer, got {chunk_size!r}")
        self.size = int(size)
        self.chunk_size = int(min(chunk_size, size))
        self._lr = 0.0
        self.learning_rate = learning_rate
        self.weight_decay = None if weight_decay is None else _real("weight_decay", weight_decay, 0.0)
        self.iterations = 0
        self._slots: dict[str, np.ndarray] = {}
        self._scratch = [np.empty(self.chunk_size, _F32) for _ in range(self.n_scratch)]

    # -- options --------------------------------------------------------------------------------
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The Keras options this optimizer takes, with Keras's default values."""
        params = inspect.signature(cls.__init__).parameters.values()
        return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY and p.name != "chunk_size"}

    def options(self) -> dict[str, Any]:
        """Current option values (what `config()` records besides the name)."""
        return {k: getattr(self, k) for k in self.defaults()}

    def config(self) -> dict[str, Any]:
        """A JSON-able spec that `make_master_optimizer(config, size)` turns back into this optimizer."""
        return {"name": self.name, **self.options()}

    @property
    def learning_rate(self) -> float:
        """The learning rate of the next step; the caller may change it between steps (warm-up, decay)."""
        return self._lr

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self._lr = _real("learning_rate", value, 0.0)

    # `lr` is the MPI-Learn / Keras 2 spelling of the same attribute.
    lr = learning_rate

    # -- the update -----------------------------------------------------------------------------
    def _add_slot(self, name: str, fill: float = 0.0) -> np.ndarray:
        slot = np.full(self.size, fill, dtype=_F32)
        self._slots[name] = slot
        return slot

    def _coefficients(self, t: int) -> tuple[Any, ...]:
        """The per-step float32 scalars `_update` uses (np.float32: a float64 scalar would upcast the loops)."""
        raise NotImplementedError

    def _update(self, sl: slice, w: np.ndarray, g: np.ndarray, scratch: list[np.ndarray], c: tuple[Any, ...]) -> None:
        """Update the chunk `w` (= weights[sl]) from `g` and the slots' `[sl]`, using only `scratch`."""
        raise NotImplementedError

    def _flat(self, a: Any, what: str, writeable: bool) -> np.ndarray:
        # Converting or copying here would allocate a buffer per step (and, for weights, update a copy).
        if not isinstance(a, np.ndarray) or a.dtype != _F32:
            raise ValueError(f"{what} must be a float32 numpy array, got {getattr(a, 'dtype', type(a).__name__)}")
        if a.size != self.size:
            raise ValueError(f"{what} has {a.size} elements, the optimizer was built for {self.size}")
        if not a.flags.c_contiguous or (writeable and not a.flags.writeable):
            raise ValueError(f"{what} must be a C-contiguous{' writeable' if writeable else ''} array")
        return a.reshape(-1)

    def step(self, weights: np.ndarray, grads: np.ndarray) -> None:
        """Apply one update to `weights` in place from `grads` (both float32, `size` elements)."""
        w = self._flat(weights, "weights", True)
        g = self._flat(grads, "grads", False)
        c = self._coefficients(self.iterations + 1)
        # Keras applies decoupled weight decay `w -= w * wd * lr` to every variable before the update;
        # elementwise, so doing it chunk by chunk right before the chunk's update is the same thing.
        wd = None if not self.weight_decay else _F32(self.weight_decay * self._lr)
        scratch = self._scratch
        n, step = self.size, self.chunk_size
        for start in range(0, n, step):
            stop = min(start + step, n)
            sl = slice(start, stop)
            s = scratch if stop - start == step else [x[: stop - start] for x in scratch]
            wc = w[sl]
            if wd is not None:
                np.multiply(wc, wd, out=s[0])
                wc -= s[0]
            self._update(sl, wc, g[sl], s, c)
        self.iterations += 1

    # -- checkpoints ----------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, float]:
        """Scalar state besides iterations and learning rate (Nadam's running product)."""
        return {}

    def _load_extra_state(self, d: Mapping[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, StateValue]:
        """Iterations, learning rate, scalar state and copies of the slot arrays (npz + JSON friendly)."""
        out: dict[str, StateValue] = {"iterations": self.iterations, "learning_rate": self._lr}
        out.update(self._extra_state())
        out.update({k: v.copy() for k, v in self._slots.items()})
        return out

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned (arrays may come from npz, scalars from JSON or 0-d arrays)."""
        expected = {"iterations", "learning_rate", *self._extra_state(), *self._slots}
        if set(d) != expected:
            missing, unknown = sorted(expected - set(d)), sorted(set(d) - expected)
            raise ValueError(f"{self.name} state: missing {missing}, unknown {unknown}; expected {sorted(expected)}")
        for k, slot in self._slots.items():
            arr = np.asarray(d[k])
            if arr.size != self.size:
                raise ValueError(f"{self.name} state: {k!r} has {arr.size} elements, expected {self.size}")
            np.copyto(slot, arr.reshape(-1), casting="same_kind")
        iterations = int(np.asarray(d["iterations"]))
        if iterations < 0:
            raise ValueError(f"{self.name} state: iterations must be >= 0, got {iterations}")
        self.iterations = iterations
        self.learning_rate = float(np.asarray(d["learning_rate"]))
        self._load_extra_state(d)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"<{type(self).__name__} size={self.size} iterations={self.iterations} {opts}>"


class SGD(FlatOptimizer):
    """keras.optimizers.SGD: m = momentum*m - lr*g; w += m (nesterov: w += momentum*m - lr*g)."""

    name = "sgd"
    momentum_option = "momentum"

    def __init__(self, size: int, *, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__(size, learning_rate=learning_rate, weight_decay=weight_decay, chunk_size=chunk_size)
        self.momentum = _real("momentum", momentum, 0.0, 1.0)
        self.nesterov = _flag("nesterov", nesterov)
        # Keras creates (and uses) the momentum slot only when momentum != 0.
        self._m = self._add_slot("momentum") if self.momentum != 0 else None

    def _coefficients(self, t: int) -> tuple[Any, ...]:
        return _F32(self._lr), _F32(self.momentum)

    def _update(self, sl, w, g, scratch, c):
        lr, mom = c
        t0 = scratch[0]
        np.multiply(g, lr, out=t0)
        if self._m is None:
            w -= t0
            return
        m = self._m[sl]
        m *= mom
        m -= t0
        if self.nesterov:
            t1 = scratch[1]
            np.multiply(m, mom, out=t1)
            t1 -= t0
            w += t1
        else:
            w += m


class RMSprop(FlatOptimizer):
    """keras.optimizers.RMSprop: v = rho*v + (1-rho)*g^2; w -= lr*g/sqrt(v [- avg_g^2] + eps) (with momentum)."""

    name = "rmsprop"
    momentum_option = "momentum"

    def __init__(self, size: int, *, learning_rate: float = 0.001, rho: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-7, centered: bool = False, weight_decay: float | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__(size, learning_rate=learning_rate, weight_decay=weight_decay, chunk_size=chunk_size)
        self.rho = _real("rho", rho, 0.0, 1.0)
        self.momentum = _real("momentum", momentum, 0.0)
        self.epsilon = _real("epsilon", epsilon, 0.0)
        self.centered = _flag("centered", centered)
        self._v = self._add_slot("velocity")
        self._mom = self._add_slot("momentum") if self.momentum > 0 else None
        self._avg = self._add_slot("average_gradient") if self.centered else None

    def _coefficients(self, t: int) -> tuple[Any, ...]:
        return _F32(self._lr), _F32(self.rho), _F32(1 - self.rho), _F32(self.epsilon), _F32(self.momentum)

    def _update(self, sl, w, g, scratch, c):
        lr, rho, one_rho, eps, momentum = c
        t0, t1 = scratch
        v = self._v[sl]
        np.multiply(g, g, out=t0)
        t0 *= one_rho
        v *= rho
        v += t0
        if self._avg is not None:  # denominator = v - avg^2 + eps
            a = self._avg[sl]
            np.multiply(g, one_rho, out=t0)
            a *= rho
            a += t0
            np.multiply(a, a, out=t0)
            np.subtract(v, t0, out=t0)
            t0 += eps
        else:
            np.add(v, eps, out=t0)
        np.sqrt(t0, out=t0)
        np.multiply(g, lr, out=t1)
        t1 /= t0  # increment = lr*g / sqrt(denominator)
        if self._mom is not None:
            mom = self._mom[sl]
            mom *= momentum
            mom += t1
            w -= mom
        else:
            w -= t1


class Adadelta(FlatOptimizer):
    """keras.optimizers.Adadelta: delta = -sqrt(E[dx^2]+eps)/sqrt(E[g^2]+eps)*g; w += lr*delta."""

    name = "adadelta"

    def __init__(self, size: int, *, learning_rate: float = 0.001, rho: float = 0.95, epsilon: float = 1e-7,
                 weight_decay: float | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__(size, learning_rate=learning_rate, weight_decay=weight_decay, chunk_size=chunk_size)
        self.rho = _real("rho", rho, 0.0, 1.0)
        self.epsilon = _real("epsilon", epsilon, 0.0)
        self._acc_g = self._add_slot("accumulated_grad")
        self._acc_d = self._add_slot("accumulated_delta_var")

    def _coefficients(self, t: int) -> tuple[Any, ...]:
        return _F32(self._lr), _F32(self.rho), _F32(1 - self.rho), _F32(self.epsilon)

    def _update(self, sl, w, g, scratch, c):
        lr, rho, one_rho, eps = c
        t0, t1 = scratch
        acc_g, acc_d = self._acc_g[sl], self._acc_d[sl]
        np.multiply(g, g, out=t0)
        t0 *= one_rho
        acc_g *= rho
        acc_g += t0
        # t0 = -delta = sqrt(acc_d + eps) * g / sqrt(acc_g + eps)
        np.add(acc_d, eps, out=t0)
        np.sqrt(t0, out=t0)
        t0 *= g
        np.add(acc_g, eps, out=t1)
        np.sqrt(t1, out=t1)
        t0 /= t1
        np.multiply(t0, t0, out=t1)
        t1 *= one_rho
        acc_d *= rho
        acc_d += t1
        t0 *= lr
        w -= t0


class Adam(FlatOptimizer):
    """keras.optimizers.Adam: m += (g-m)(1-b1); v += (g^2-v)(1-b2); w -= alpha*m/(sqrt(v)+eps).

    alpha = lr*sqrt(1-b2^t)/(1-b1^t): epsilon is added to the uncorrected sqrt(v), as in Keras.
    """

    name = "adam"
    momentum_option = "beta_1"

    def __init__(self, size: int, *, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, amsgrad: bool = False, weight_decay: float | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__(size, learning_rate=learning_rate, weight_decay=weight_decay, chunk_size=chunk_size)
        self.beta_1 = _real("beta_1", beta_1, 0.0, 1.0, hi_open=True)
        self.beta_2 = _real("beta_2", beta_2, 0.0, 1.0, hi_open=True)
        self.epsilon = _real("epsilon", epsilon, 0.0)
        self.amsgrad = _flag("amsgrad", amsgrad)
        self._m = self._add_slot("momentum")
        self._v = self._add_slot("velocity")
        self._vhat = self._add_slot("velocity_hat") if self.amsgrad else None

    def _coefficients(self, t: int) -> tuple[Any, ...]:
        alpha = self._lr * math.sqrt(1 - _pow32(self.beta_2, t)) / (1 - _pow32(self.beta_1, t))
        return _F32(alpha), _F32(1 - self.beta_1), _F32(1 - self.beta_2), _F32(self.epsilon)

    def _update(self, sl, w, g, scratch, c):
        alpha, one_b1, one_b2, eps = c
        t0, t1 = scratch
        m, v = self._m[sl], self._v[sl]
        np.subtract(g, m, out=t0)
        t0 *= one_b1
        m += t0
        np.multiply(g, g, out=t0)
        t0 -= v
        t0 *= one_b2
        v += t0
        if self._vhat is not None:
            vhat = self._vhat[sl]
            np.maximum(vhat, v, out=vhat)
            v = vhat
        np.sqrt(v, out=t0)
        t0 += eps
        np.multiply(m, alpha, out=t1)
        t1 /= t0
        w -= t1


class AdamW(Adam):
    """keras.optimizers.AdamW: Adam after decoupled weight decay w -= w*weight_decay*lr."""

    name = "adamw"

    def __init__(self, size: int, *, learning_rate: float = 0.001, weight_decay: float = 0.004, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-7, amsgrad: bool = False,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        if weight_decay is None:  # as Keras: AdamW without a decay is a mistake, not Adam
            raise ValueError("optimizer option 'weight_decay' of adamw must be a number, got None")
        super().__init__(size, learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                         amsgrad=amsgrad, weight_decay=weight_decay, chunk_size=chunk_size)


class Adagrad(FlatOptimizer):
    """keras.optimizers.Adagrad: acc += g^2; w -= lr*g/sqrt(acc+eps), acc starting at 0.1."""

    name = "adagrad"

    def __init__(self, size: int, *, learning_rate: float = 0.001, initial_accumulator_value: float = 0.1,
                 epsilon: float = 1e-7, weight_decay: float | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__(size, learning_rate=learning_rate, weight_decay=weight_decay, chunk_size=chunk_size)
        self.initial_accumulator_value = _real("initial_accumulator_value", initial_accumulator_value, 0.0)
        self.epsilon = _real("epsilon", epsilon, 0.0)
        self._acc = self._add_slot("accumulator", self.initial_accumulator_value)

    def _coefficients(self, t: int) -> tuple[Any, ...]:
        return _F32(self._lr), _F32(self.epsilon)

    def _update(self, sl, w, g, scratch, c):
        lr, eps = c
        t0, t1 = scratch
        acc = self._acc[sl]
        np.multiply(g, g, out=t0)
        acc += t0
        np.add(acc, eps, out=t0)
        np.sqrt(t0, out=t0)
        np.multiply(g, lr, out=t1)
        t1 /= t0
        w -= t1


class Adamax(FlatOptimizer):
    """keras.optimizers.Adamax: m += (g-m)(1-b1); u = max(b2*u, |g|); w -= lr*m/((1-b1^t)(u+eps))."""

    name = "adamax"
    momentum_option = "beta_1"

    def __init__(self, size: int, *, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, weight_decay: float | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__(size, learning_rate=learning_rate, weight_decay=weight_decay, chunk_size=chunk_size)
        self.beta_1 = _real("beta_1", beta_1, 0.0, 1.0, hi_open=True)
        self.beta_2 = _real("beta_2", beta_2, 0.0, 1.0)
        self.epsilon = _real("epsilon", epsilon, 0.0)
        self._m = self._add_slot("momentum")
        self._u = self._add_slot("norm")

    def _coefficients(self, t: int) -> tuple[Any, ...]:
        # lr/(1-b1^t) folded into one scalar: one pass fewer than Keras's (1-b1^t)*(u+eps) product.
        step = self._lr / (1 - _pow32(self.beta_1, t))
        return _F32(step), _F32(1 - self.beta_1), _F32(self.beta_2), _F32(self.epsilon)

    def _update(self, sl, w, g, scratch, c):
        step, one_b1, b2, eps = c
        t0, t1 = scratch
        m, u = self._m[sl], self._u[sl]
        np.subtract(g, m, out=t0)
        t0 *= one_b1
        m += t0
        u *= b2
        np.abs(g, out=t0)
        np.maximum(u, t0, out=u)
        np.add(u, eps, out=t0)
        np.multiply(m, step, out=t1)
        t1 /= t0
        w -= t1


class Nadam(FlatOptimizer):
    """keras.optimizers.Nadam: Adam with Nesterov momentum and the 0.96-decay momentum schedule."""

    name = "nadam"
    momentum_option = "beta_1"
    n_scratch = 3

    def __init__(self, size: int, *, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, weight_decay: float | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        super().__init__(size, learning_rate=learning_rate, weight_decay=weight_decay, chunk_size=chunk_size)
        self.beta_1 = _real("beta_1", beta_1, 0.0, 1.0, hi_open=True)
        self.beta_2 = _real("beta_2", beta_2, 0.0, 1.0, hi_open=True)
        self.epsilon = _real("epsilon", epsilon, 0.0)
        self._m = self._add_slot("momentum")
        self._v = self._add_slot("velocity")
        self._u_product = 1.0  # prod_{i<=t} u_i, Keras's `_u_product` variable

    def _u(self, t: int) -> float:
        return float(_F32(self.beta_1)) * (1.0 - 0.5 * _pow32(0.96, t))

    def _coefficients(self, t: int) -> tuple[Any, ...]:
        # Keras advances the product before the update; so does this (step() calls this first).
        u_t, u_t1 = self._u(t), self._u(t + 1)
        self._u_product *= u_t
        prod_t, prod_t1 = self._u_product, self._u_product * u_t1
        # lr*m_hat/(sqrt(v/c)+eps) == lr*sqrt(c)*m_hat/(sqrt(v)+eps*sqrt(c)), c = 1-b2^t: no pass for v/c.
        root_c = math.sqrt(1 - _pow32(self.beta_2, t))
        k_m = self._lr * root_c * u_t1 / (1 - prod_t1)
        k_g = self._lr * root_c * (1 - u_t) / (1 - prod_t)
        return (_F32(k_m), _F32(k_g), _F32(1 - self.beta_1), _F32(1 - self.beta_2),
                _F32(self.epsilon * root_c))

    def _update(self, sl, w, g, scratch, c):
        k_m, k_g, one_b1, one_b2, eps = c
        t0, t1, t2 = scratch
        m, v = self._m[sl], self._v[sl]
        np.subtract(g, m, out=t0)
        t0 *= one_b1
        m += t0
        np.multiply(g, g, out=t0)
        t0 -= v
        t0 *= one_b2
        v += t0
        np.sqrt(v, out=t0)
        t0 += eps
        np.multiply(m, k_m, out=t1)
        np.multiply(g, k_g, out=t2)
        t1 += t2
        t1 /= t0
        w -= t1

    def _extra_state(self) -> dict[str, float]:
        return {"u_product": self._u_product}

    def _load_extra_state(self, d: Mapping[str, Any]) -> None:
        self._u_product = float(np.asarray(d["u_product"]))


OPTIMIZERS: dict[str, type[FlatOptimizer]] = {
    cls.name: cls for cls in (SGD, RMSprop, Adadelta, Adam, AdamW, Adagrad, Adamax, Nadam)
}


def make_master_optimizer(spec: str | Mapping[str, Any], size: int, *,
                          chunk_size: int = DEFAULT_CHUNK_SIZE) -> FlatOptimizer:
    """The flat optimizer for `size` float32 parameters from a name or `{"name": ..., option: value}`.

    Names and options are Keras's (`"adam"`, `{"name": "sgd", "momentum": 0.9}`); options left out
    take Keras's defaults. Unknown names or options raise a one-line ValueError naming the allowed ones.
    """
    if isinstance(spec, str):
        name, opts = spec, {}
    elif isinstance(spec, Mapping):
        opts = dict(spec)
        name = opts.pop("name", None)
        if not isinstance(name, str):
            raise ValueError(f"optimizer spec needs a 'name' (one of {', '.join(OPTIMIZERS)}), got {spec!r}")
    else:
        raise ValueError(f"optimizer spec must be a name or a mapping with a 'name', got {spec!r}")
    cls = OPTIMIZERS.get(name.lower())
    if cls is None:
        raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(OPTIMIZERS)}")
    allowed = cls.defaults()
    for key in list(opts):
        if key in allowed:
            continue
        if key in _KERAS_ONLY:
            value = opts.pop(key)
            if value == _KERAS_ONLY[key] or value is None:
                continue
            raise ValueError(f"optimizer option {key!r}={value!r} is not supported by the master optimizer "
                             f"{cls.name!r}; allowed: {', '.join(allowed)}")
        raise ValueError(f"unknown option {key!r} for optimizer {cls.name!r}; allowed: {', '.join(allowed)}")
    return cls(size, chunk_size=chunk_size, **opts)


def momentum_of(spec: str | Mapping[str, Any]) -> float:
    """The momentum of the optimizer `spec`: sgd's and rmsprop's `momentum`, the Adam family's `beta_1`
    (Keras's defaults where the spec leaves it out); 0 for adagrad and adadelta, which have none."""
    name = spec if isinstance(spec, str) else spec.get("name") if isinstance(spec, Mapping) else None
    cls = OPTIMIZERS.get(name.lower()) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(OPTIMIZERS)}")
    option = cls.momentum_option
    if option is None:
        return 0.0
    value = spec.get(option, cls.defaults()[option]) if isinstance(spec, Mapping) else cls.defaults()[option]
    return _real(option, value, 0.0)

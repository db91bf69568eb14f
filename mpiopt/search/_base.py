"""The ask/tell interface every search algorithm implements, with the coordinator's optional hooks.

`ask`/`tell`/`add_pending` are the core. The hooks (`holds_hand_outs`, `ready`, `prefers_fresh`,
`watch_backlog`, `pause`, `report`, `close`, and the `ask_wait_s` attribute) are declared here with defaults that do
nothing, so the coordinator and the CLI call them on any searcher instead of probing for them;
only a searcher with background work (`Prefetching`) overrides them.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from ..space import Space, encode


class Searcher(ABC):
    """Suggests parameters; knows which suggestions are still running (pending).

    The searcher always minimises a *loss*: the coordinator passes `-objective` for a
    `maximize` figure of merit. A trial that did not complete is told with `loss=None`; the
    searcher must never treat it as a good value (a model fits it at the worst completed loss).

    Attributes:
        ask_wait_s: how long the last `ask()` deliberately waited for a fresher model. The
            coordinator leaves it out of its own hand-out time: the wait is the searcher's
            choice, bounded by it, not dispatch work.
    """

    def __init__(self, space: Space, *, seed: int = 0) -> None:
        self.space = space
        self.seed = seed
        self.observed: dict[int, tuple[dict[str, Any], float | None]] = {}
        self.pending: dict[int, dict[str, Any]] = {}
        # handed out, neither running nor told (paused by a scheduler): not fitted, never proposed again
        self.aside: dict[int, dict[str, Any]] = {}
        self.ask_wait_s = 0.0

    # -- the interface -------------------------------------------------------------------
    def ask(self, trial: int) -> dict[str, Any]:
        """Suggest the parameters of `trial`, which becomes pending until told."""
        params = self._suggest()
        self.pending[trial] = params
        return params

    def tell(self, trial: int, params: dict[str, Any], loss: float | None) -> None:
        """Record a finished trial; `loss=None` (or NaN/inf) for one that did not complete."""
        self.pending.pop(trial, None)
        self.aside.pop(trial, None)
        if loss is not None and not math.isfinite(loss):
            loss = None
        self.observed[trial] = (dict(params), loss)

    def add_pending(self, trial: int, params: dict[str, Any]) -> None:
        """Mark a trial as running without asking for it (a resumed search re-runs it)."""
        self.aside.pop(trial, None)
        self.pending[trial] = dict(params)

    def drop_pending(self, trial: int) -> None:
        """The trial stopped running without a final word (a scheduler paused it): it is no longer
        pending, so it keeps no group away from its point, but it is set aside (`set_aside`);
        `add_pending` when it runs again."""
        params = self.pending.pop(trial, None)
        if params is not None:
            self.aside[trial] = params

    def set_aside(self, trial: int, params: dict[str, Any]) -> None:
        """A trial handed out that neither runs nor has a final word here (paused at a rung, on a
        resume or before a model on a higher rung was built): not fitted, but its point is known
        and never proposed again."""
        self.pending.pop(trial, None)
        self.aside[trial] = dict(params)

    def tell_rung(self, trial: int, params: dict[str, Any], epochs: int, loss: float | None) -> None:  # noqa: B027
        """A trial's loss at a scheduler's rung (after `epochs` epochs), before its final word.
        Ignored by default: only a searcher that learns from partial training (`RungModel`) uses it."""

    # -- optional hooks: defaults for a searcher without background work -----------------
    def holds_hand_outs(self, may_hold: bool) -> bool:
        """Whether the next `ask()` should wait for the model (trials shorter than a model round).

        The coordinator then keeps the free group waiting without calling `ask`, answers the
        other groups' reports and results meanwhile, and asks again soon; it calls `ask` (which
        then waits, within the searcher's bound) only when no group runs. With `may_hold` False
        (the coordinator holds as many groups as it can serve at once when the model is ready)
        the answer is False and the next `ask` goes ahead without waiting. The held time is the
        searcher's choice, like `ask_wait_s`.
        """
        return False

    def ready(self) -> bool:
        """Whether the searcher suggests from its model now, or never will (no model, or its
        background work stopped): one that replaces another takes over once it is."""
        return True

    def prefers_fresh(self) -> bool:
        """Whether the next hand-out would wait for a model that includes the latest result.

        The coordinator then takes in every result already waiting before it asks, so that one
        model serves the whole burst instead of one model per result.
        """
        return False

    def watch_backlog(self, results_waiting: Callable[[], bool]) -> None:  # noqa: B027 - optional hook
        """Tell the searcher how to see whether more results are already waiting (a burst).

        A searcher may then do less per hand-out, so that the rest of the burst is served sooner.
        """

    def pause(self, busy: bool) -> None:  # noqa: B027 - optional hook
        """The coordinator is (`busy=True`) or is no longer handing out trials: background work,
        if any, should keep out of its way meanwhile."""

    def stand_by(self) -> None:  # noqa: B027 - optional hook
        """This searcher is prepared while another one serves (a model staged on a higher rung):
        its background work may keep out of the coordinator's way from the start."""

    def report(self) -> str | None:
        """One line about where the suggestions came from, for the search's statistics; None: nothing to say."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop background work, if any; the searcher is not asked again."""

    @abstractmethod
    def _suggest(self) -> dict[str, Any]:
        """A new point, aware of `observed` and `pending`."""

    # -- helpers for algorithms ----------------------------------------------------------
    @property
    def completed(self) -> list[tuple[dict[str, Any], float]]:
        return [(p, y) for p, y in self.observed.values() if y is not None]

    def handed_out(self) -> int:
        """The points handed out: told, pending or set aside."""
        return len(self.observed) + len(self.pending) + len(self.aside)

    def known_points(self) -> set[tuple]:
        pts = {tuple(encode(self.space, p)) for p, _ in self.observed.values()}
        pts |= {tuple(encode(self.space, p)) for p in self.pending.values()}
        pts |= {tuple(encode(self.space, p)) for p in self.aside.values()}
        return pts

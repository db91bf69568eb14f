"""Chrome trace-event spans (chrome://tracing, Perfetto): compute, send, wait, apply, validate per rank."""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

from .._files import atomic_write


class Tracer:
    def __init__(self, rank: int, enabled: bool) -> None:
        self.rank = rank
        self.enabled = enabled
        self.events: list[tuple[str, float, float]] = []
        self.totals: dict[str, float] = {}

    @contextmanager
    def span(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.totals[name] = self.totals.get(name, 0.0) + dt
            if self.enabled:
                self.events.append((name, t0, dt))

    def add(self, name: str, t0: float, dt: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + dt
        if self.enabled:
            self.events.append((name, t0, dt))


def write_trace(path: Path, per_rank: list[list[tuple[str, float, float]]], labels: list[str]) -> None:
    """One Chrome trace file for the whole group; each rank a thread of one process."""
    origin = min((e[1] for events in per_rank for e in events), default=0.0)
    out = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "mpiopt group"}}]
    for rank, label in enumerate(labels):
        out.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": rank, "args": {"name": label}})
    for rank, events in enumerate(per_rank):
        for name, t0, dt in events:
            out.append({"name": name, "cat": name, "ph": "X", "pid": 0, "tid": rank,
                        "ts": round((t0 - origin) * 1e6, 1), "dur": round(dt * 1e6, 1)})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"traceEvents": out, "displayTimeUnit": "ms"}).encode("utf-8"))

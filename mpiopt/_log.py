"""Logging under the `mpiopt` root logger; lines from ranks carry `[group g rank r]`."""
from __future__ import annotations

import logging
import os
import sys

_ROOT = "mpiopt"


class _RankFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.tag = ""

    def filter(self, record: logging.LogRecord) -> bool:
        record.ranktag = self.tag
        return True


_filter = _RankFilter()


def setup_logging(level: int | str | None = None) -> None:
    """Send `mpiopt` log records to stderr, once per process."""
    root = logging.getLogger(_ROOT)
    if level is None:
        level = os.environ.get("MPIOPT_LOG_LEVEL", "INFO")
    root.setLevel(level)
    if not any(getattr(h, "_mpiopt", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler._mpiopt = True  # type: ignore[attr-defined]
        handler.setFormatter(logging.Formatter("%(asctime)s mpiopt%(ranktag)s %(levelname)s: %(message)s", "%H:%M:%S"))
        handler.addFilter(_filter)
        root.addHandler(handler)
        root.propagate = False


def set_rank_tag(tag: str) -> None:
    """Tag every line of this process, e.g. ``[coordinator]`` or ``[group 2 rank 1]``."""
    _filter.tag = f" {tag}" if tag else ""

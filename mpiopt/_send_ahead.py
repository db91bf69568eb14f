"""Sending ahead: a group's next trial goes out shortly before its running one is expected to end.

When many groups finish together, the last of them waits for the coordinator to serve all the
others (about a millisecond each: record the result, journal it, choose the next trial, send it).
So the coordinator sends a group its next trial when its running one is about to end (the median
trial length so far) while the coordinator would otherwise be idle: the group finds it in its
mailbox and starts at once. Only where it pays, and never much early, because a trial sent ahead
does not know the results that arrive meanwhile.
"""
from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from . import _env


@dataclass
class SendAhead:
    """The rule, its constants, and the timings it is judged on (the latest `keep` of each)."""

    share: float = 0.25  # never send more than this share of a typical trial early
    worth: float = 0.01  # only when serving every busy group at once would cost more than this share of a trial
    min_lead_s: float = 0.02  # the least lead worth having: a send must reach the group before it finishes
    min_trial_s: float = 0.05  # trials shorter than this end before a trial sent ahead could help them
    enabled: bool = True  # MPIOPT_SEND_AHEAD=0: never
    always: bool = False  # MPIOPT_SEND_AHEAD=always: whether it pays or not (tests)
    keep: int = 64
    durations: deque[float] = field(init=False)  # hand-out (or previous result) -> result, seconds
    hand_outs: deque[float] = field(init=False)  # coordinator time to choose, journal and send a trial
    intakes: deque[float] = field(init=False)  # coordinator time to take in a result

    def __post_init__(self) -> None:
        self.durations = deque(maxlen=self.keep)
        self.hand_outs = deque(maxlen=self.keep)
        self.intakes = deque(maxlen=self.keep)

    @classmethod
    def from_env(cls) -> SendAhead:
        mode = _env.get("MPIOPT_SEND_AHEAD")
        return cls(enabled=mode != "0", always=mode == "always")

    def typical(self) -> float:
        """The median trial length so far (call only once `lead` returned a lead)."""
        return statistics.median(self.durations)

    def lead(self, busy: int, searcher_waits_for_fresh: bool) -> float | None:
        """How long before a group's trial is expected to end its next one is sent; None: not now.

        Not for a searcher that waits for a model with the group's own result (a trial sent
        ahead cannot know it), not for trials too short to gain, and not where serving all `busy`
        groups at once costs them less than `worth` of a trial."""
        if not (self.durations and self.hand_outs and self.intakes):
            return None
        if searcher_waits_for_fresh and not self.always:
            return None
        typical = self.typical()
        burst = busy * (statistics.median(self.hand_outs) + statistics.median(self.intakes))
        if typical < self.min_trial_s or (burst <= self.worth * typical and not self.always):
            return None
        return min(self.share * typical, max(self.min_lead_s, 2 * burst))

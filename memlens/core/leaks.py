"""Steady growth of end-of-step memory, reported once with its likely cause."""

from __future__ import annotations

import collections
import itertools

from memlens.core.config import TechniqueToggles
from memlens.core.explain import explain_leak

LEAK_WINDOW = 8  # steps of steady growth before a leak is reported
LEAK_MIN_BYTES = 32 * 1024  # per step


class LeakWatch:
    """Reports steady growth of end-of-step memory once, naming the likely cause.

    With an eval phase every `period` steps, a leak through eval (its graph kept alive)
    grows memory once a period, not every step; the watch then compares steps a period
    apart, over at least three periods.
    """

    def __init__(self, period: int = 1) -> None:
        self.period = max(1, period)
        periods = max(3, LEAK_WINDOW // self.period)  # LEAK_WINDOW steps without eval
        # (total, activations, other) of the last steps the window spans
        self.history: collections.deque[tuple[int, int, int]] = collections.deque(
            maxlen=periods * self.period + 1)
        self.reported = False
        self.held_nodes: collections.deque[int] = collections.deque(maxlen=LEAK_WINDOW + 1)
        self.nodes_reported = False

    def update(self, total: int, activations: int, other: int, toggles: TechniqueToggles
               ) -> str | None:
        hist = self.history
        hist.append((total, activations, other))
        if len(hist) < hist.maxlen:
            return None
        if total - hist[-1 - self.period][0] < LEAK_MIN_BYTES:  # the common case, cheaply
            self.reported = False
            return None
        h = list(hist)[:: self.period]
        growing = all(b[0] - a[0] >= LEAK_MIN_BYTES for a, b in itertools.pairwise(h))
        if not growing:
            self.reported = False
            return None
        if self.reported:
            return None
        self.reported = True
        steps = (len(h) - 1) * self.period
        per_step = (h[-1][0] - h[0][0]) / steps
        act = h[-1][1] - h[0][1]
        grew = "activations saved for backward" if act > (h[-1][0] - h[0][0]) / 2 else "other"
        return explain_leak(toggles, grew, per_step, self.period)

    def update_nodes(self, held_nodes: int) -> int | None:
        """The autograd nodes a loop's running sum keeps (`total_loss += loss`: tensor bytes
        stay flat, since backward frees the saved tensors, but every step's nodes stay
        alive): the nodes added a step once they have grown at every one of LEAK_WINDOW
        steps, once; else None."""
        if self.nodes_reported:
            return None
        nodes = self.held_nodes
        nodes.append(held_nodes)
        if len(nodes) < nodes.maxlen or not all(b > a for a, b in itertools.pairwise(nodes)):
            return None
        self.nodes_reported = True
        return round((nodes[-1] - nodes[0]) / (len(nodes) - 1))

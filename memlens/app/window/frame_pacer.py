"""How often to redraw: 30 Hz, slower only when drawing would take more than its share.

The training loop runs in a thread of the same process and needs the GIL for its Python
parts; a GUI thread that draws flat out slows the very steps it shows. The pacer measures
the GUI thread's own CPU time and aims for the interval at which it would use `share` of
the wall clock (a frame's cost is about the thread's use times the interval), never faster
than the base rate: it stretches while the thread uses more, and comes back as soon as the
base rate would fit again (not only once the thread is nearly idle, which kept a window
that had one slow moment at a slower rate for good). Data is never dropped: a slower frame
pulls more rows at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class FramePacer:
    def __init__(self, base_ms: int = 33, max_ms: int = 250, share: float = 0.5,
                 window_s: float = 0.5, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time) -> None:
        self.base_ms, self.max_ms, self.share, self.window_s = base_ms, max_ms, share, window_s
        self.interval_ms = base_ms
        self._clock, self._cpu = clock, cpu
        self._t0, self._c0 = clock(), cpu()

    def tick(self) -> int | None:
        """Call once a frame, on the GUI thread. Returns a new interval when it changes."""
        now = self._clock()
        wall = now - self._t0
        if wall < self.window_s:
            return None
        used = (self._cpu() - self._c0) / wall
        self._t0, self._c0 = now, self._cpu()
        fit = self.interval_ms * used / self.share
        # At most twice as slow, or a fifth faster, per window: one odd window moves it little.
        wanted = min(max(fit, 0.8 * self.interval_ms), 2.0 * self.interval_ms)
        wanted = int(min(max(wanted, self.base_ms), self.max_ms))
        if wanted == self.interval_ms:
            return None
        self.interval_ms = wanted
        return wanted

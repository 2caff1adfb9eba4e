"""How often to redraw: 30 Hz, slower only when drawing would take more than its share.

The training loop runs in a thread of the same process and needs the GIL for its Python
parts; a GUI thread that draws flat out slows the very steps it shows. The pacer measures
the GUI thread's own CPU time and stretches the frame interval while that exceeds `share`
of the wall clock, then eases back to the base rate. Data is never dropped: a slower frame
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
        if used > self.share:
            wanted = self.interval_ms * min(used / self.share, 2.0)
        elif used < self.share / 2:
            wanted = self.interval_ms * 0.8
        else:
            return None
        wanted = int(min(max(wanted, self.base_ms), self.max_ms))
        if wanted == self.interval_ms:
            return None
        self.interval_ms = wanted
        return wanted

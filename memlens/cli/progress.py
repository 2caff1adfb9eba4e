"""The `run` command's progress on stderr: one redrawn line on a terminal, a line every few
seconds in a log (where a carriage return would fuse every update into one line)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from memlens.core.sinks import Sink
from memlens.core.units import format_bytes

TTY_EVERY_S = 0.2  # a terminal line redraws at most this often
LOG_EVERY_S = 5.0  # a log gets a line this often (and the last step's)


class Progress(Sink):
    """A sink for the loop's records. The rate counts steps since the first one finished,
    so model set-up and the first step's one-off costs do not drag it down."""

    def __init__(self, total: int, quiet: bool = False, *, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 tty: bool | None = None) -> None:
        self.total, self.quiet = total, quiet
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s = TTY_EVERY_S if self.tty else LOG_EVERY_S
        self.last = None  # when the last line was written
        self.first: tuple[int, float] | None = None  # (steps done, time) at the first step
        self._drawn = False  # a tty line waits to be cleared

    def on_finish(self, summary) -> None:
        self._clear()

    def rate(self, done: int, now: float) -> float | None:
        """Steps a second since the first step finished; None until there are two."""
        if self.first is None or done <= self.first[0] or now <= self.first[1]:
            return None
        return (done - self.first[0]) / (now - self.first[1])

    def line(self, r, now: float) -> str:
        done = r.step + 1
        rate = self.rate(done, now)
        rate_text = f"  {rate:.1f} steps/s" if rate is not None else ""
        return (f"  step {done}/{self.total}  loss {r.loss:.4f}  "
                f"{format_bytes(r.allocated_bytes)}{rate_text}")

    def on_steps(self, rows) -> None:
        if not self.quiet and rows:
            self._step(rows[-1][0])

    def _step(self, r) -> None:
        now = self.clock()
        done = r.step + 1
        if self.first is None:
            self.first = (done, now)
        last_step = done >= self.total
        if self.last is not None and now - self.last < self.every_s and not last_step:
            return
        self.last = now
        if self.tty:
            self.stream.write("\r" + self.line(r, now).ljust(78))
            self._drawn = True
        else:
            self.stream.write(self.line(r, now) + "\n")
        self.stream.flush()

    def on_event(self, e) -> None:
        if self.quiet:
            return
        self._clear()
        where = f" at step {e.step}" if e.on_timeline else ""
        self.stream.write(f"  [{e.kind}{where}] {e.label()}\n")

    def _clear(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\r" + " " * 78 + "\r")
            self._drawn = False

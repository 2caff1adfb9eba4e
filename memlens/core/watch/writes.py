"""A watch's run-folder writes, made in order on a thread of their own.

A watch runs inside the user's training thread: every microsecond it spends there is the
user's. Making a step's rows (MemorySample and StepRecord values turned to CSV text) and
writing them is most of what is left once the phase edges are native, so the training thread
only hands the figures over (`post`), and this thread turns them into text and files.
The training thread releases the GIL inside torch's kernels, which is when this one runs.

The writer's calls keep their order (a step's samples before its row, an event after the
rows before it). `close()` drains the queue and joins: nothing posted is lost at a normal
end, an exception in the script, or interpreter exit (the watch closes itself there).
A write that fails (a full disk) stops the writes; the watch asks `failed` and says so.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from memlens.core.memory import edge_samples
from memlens.core.records import MemorySample


class Writes:
    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.failed: BaseException | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="memlens-watch-writer",
                                        daemon=True)
        self._thread.start()

    def post(self, call: Callable[..., Any], *args: Any) -> None:
        """`call(*args)` (a writer's method) on the writer thread, after all posted before."""
        self._queue.put((call, args))

    def post_steps(self, batch: list[tuple]) -> None:
        """Steps' (record, samples) to write, samples as the watch keeps them (see
        samples_of): made into rows on the writer thread."""
        self._queue.put((_write_steps, (self.writer, batch)))

    def close(self) -> None:
        """Every write posted so far done; the thread ended."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self.failed is not None:
                continue  # after a failed write, none: the files stop at the last good one
            call, args = item
            try:
                call(*args)
            except BaseException as exc:  # reported by the watch (failed)
                self.failed = exc


def samples_of(items: list) -> list[MemorySample]:
    """A watch's samples as it keeps them: MemorySamples, and native row blocks (step,
    params, buffers, rows) still to be made MemorySamples (core.memory.edge_samples)."""
    samples: list[MemorySample] = []
    for item in items:
        if isinstance(item, MemorySample):
            samples.append(item)
        else:
            samples += edge_samples(*item)
    return samples


def _write_steps(writer: Any, batch: list[tuple]) -> None:
    writer.on_steps([(record, samples_of(items)) for record, items in batch])


def write_samples(writer: Any, items: list) -> None:
    """Samples with no step row after them (the last ones of a run)."""
    writer.on_samples(samples_of(items))

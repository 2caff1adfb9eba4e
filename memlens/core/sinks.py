"""Where a run's records go: the `RunSink` protocol every producer writes to (the lab's loop
and a watch, through core.recorder.step.StepRecorder), with `Sink` (a base whose methods
do nothing), `FanOut` (several sinks in order) and `GuardedSink` (drops a sink that fails,
a full disk, instead of failing the run).

One format: samples come as lists (`on_samples`), ended steps as rows of (record, its
samples) (`on_steps`). A sample item is a MemorySample or a native edge block still to be
made MemorySamples (records.EdgeBlock; `records.samples_of` makes them).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from memlens.core.records import RunEvent, SampleItem, StepRow

if TYPE_CHECKING:
    from memlens.core.exports.cuda_recorder import CudaSnapshotRecorder
    from memlens.core.graph.snapshot import GraphSnapshot

RECORD_METHODS = ("on_start", "on_samples", "on_steps", "on_event", "on_graph",
                  "on_allocations", "on_cuda_snapshot", "on_finish")


class RunSink(Protocol):
    """What a producer hands a run's records to (called on the training thread)."""

    def on_start(self, meta: dict) -> None:
        """run.json's header, or keys to add to it (called again as they become known)."""

    def on_samples(self, items: Sequence[SampleItem]) -> None:
        """Samples with no step row after them yet (a long step's, as each is taken; a
        step cut short; the run's last)."""

    def on_steps(self, rows: Sequence[StepRow]) -> None:
        """Ended steps, each (record, the samples not handed on before), in order."""

    def on_event(self, event: RunEvent) -> None: ...

    def on_graph(self, snapshot: GraphSnapshot) -> None: ...

    def on_allocations(self, rows: Any) -> None:
        """Precise mode: storage alloc/free rows (core.history.AllocBlock or row tuples)."""

    def on_cuda_snapshot(self, recorder: CudaSnapshotRecorder) -> None: ...

    def on_finish(self, summary: dict) -> None: ...


class Sink:
    """A RunSink whose methods do nothing: a sink overrides the records it wants."""

    def on_start(self, meta: dict) -> None:
        pass

    def on_samples(self, items: Sequence[SampleItem]) -> None:
        pass

    def on_steps(self, rows: Sequence[StepRow]) -> None:
        pass

    def on_event(self, event: RunEvent) -> None:
        pass

    def on_graph(self, snapshot: GraphSnapshot) -> None:
        pass

    def on_allocations(self, rows: Any) -> None:
        pass

    def on_cuda_snapshot(self, recorder: CudaSnapshotRecorder) -> None:
        pass

    def on_finish(self, summary: dict) -> None:
        pass


class FanOut(Sink):
    """Forwards every record to each sink, in order. Sinks must not raise. (The record
    methods are set per instance; Sink's say what a FanOut is.)"""

    def __init__(self, *sinks: RunSink | None) -> None:
        self.sinks: list[RunSink] = [s for s in sinks if s is not None]
        # Bound once: the hot path is called for every step, and one sink (the usual case)
        # needs no loop.
        for name in RECORD_METHODS:
            methods = [getattr(s, name) for s in self.sinks]
            setattr(self, name, methods[0] if len(methods) == 1 else _each(methods))


def _each(methods: list[Callable]) -> Callable:
    def call(*args: Any) -> None:
        for m in methods:
            m(*args)

    return call


class GuardedSink(Sink):
    """Forwards to `sink` until one of its calls raises one of `catch` (by default OSError or
    ValueError: a full or vanished disk); then drops it and calls `on_failure(sink, exc)`
    once. Records after that go nowhere, so the run goes on in memory. `detach()` takes the
    sink away from any thread, between two records, never in the middle of one."""

    def __init__(self, sink: RunSink, on_failure: Callable[[RunSink, Exception], None],
                 catch: tuple[type[Exception], ...] = (OSError, ValueError)) -> None:
        self.sink: RunSink | None = sink
        self._on_failure = on_failure
        self._catch = catch
        self._lock = threading.Lock()
        for name in RECORD_METHODS:
            # bound once per record kind: the writer is called for every step
            setattr(self, name, functools.partial(self._call, name))

    def detach(self) -> RunSink | None:
        """Take the sink away: later records go nowhere. Returns it (None if already gone)."""
        with self._lock:
            sink, self.sink = self.sink, None
        return sink

    def _call(self, method: str, *args: Any) -> None:
        if self.sink is None:
            return
        failed = None
        with self._lock:
            sink = self.sink
            if sink is None:
                return
            try:
                getattr(sink, method)(*args)
            except self._catch as exc:
                self.sink = None
                failed = (sink, exc)
        if failed is not None:
            self._on_failure(*failed)

"""Where a run's records go: any object with these methods; FanOut sends to several,
GuardedSink drops a sink that fails (a full disk) instead of failing the run."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from memlens.core.records import MemorySample, RunEvent, StepRecord

    # Optional: on_allocations(rows) (precise mode), on_cuda_snapshot(recorder) (CUDA).


class FanOut:
    """Forwards every record to each sink, in order. Sinks must not raise."""

    _RECORDS = ("on_sample", "on_step", "on_event", "on_graph", "on_allocations")

    def __init__(self, *sinks: Any) -> None:
        self.sinks = [s for s in sinks if s is not None]
        if len(self.sinks) == 1:  # the hot path, called for every record: no extra layer
            only = self.sinks[0]
            for name in self._RECORDS:
                if hasattr(only, name):
                    setattr(self, name, getattr(only, name))

    def on_start(self, meta: dict) -> None:
        for s in self.sinks:
            s.on_start(meta)

    def on_sample(self, sample: MemorySample) -> None:
        for s in self.sinks:
            s.on_sample(sample)

    def on_step(self, record: StepRecord) -> None:
        for s in self.sinks:
            s.on_step(record)

    def on_event(self, event: RunEvent) -> None:
        for s in self.sinks:
            s.on_event(event)

    def on_graph(self, snapshot: Any) -> None:
        for s in self.sinks:
            if hasattr(s, "on_graph"):
                s.on_graph(snapshot)

    def on_allocations(self, rows: list[tuple]) -> None:
        for s in self.sinks:
            if hasattr(s, "on_allocations"):
                s.on_allocations(rows)

    def on_cuda_snapshot(self, recorder: Any) -> None:
        for s in self.sinks:
            if hasattr(s, "on_cuda_snapshot"):
                s.on_cuda_snapshot(recorder)

    def on_finish(self, summary: dict) -> None:
        for s in self.sinks:
            s.on_finish(summary)


class GuardedSink:
    """Forwards to `sink` until one of its calls raises OSError or ValueError (a full or
    vanished disk); then drops it and calls `on_failure(sink, exc)` once. Records after
    that go nowhere, so the run goes on in memory. `detach()` takes the sink away from any
    thread, between two records, never in the middle of one."""

    _FORWARDED = ("on_start", "on_sample", "on_step", "on_event", "on_graph",
                  "on_allocations", "on_cuda_snapshot", "on_finish")

    def __init__(self, sink: Any, on_failure: Callable[[Any, Exception], None]) -> None:
        self.sink = sink
        self._on_failure = on_failure
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if name not in self._FORWARDED:
            raise AttributeError(name)
        # Made once per record kind, then found as an attribute: the writer is called for
        # every sample and step, and __getattr__ runs only for names not yet set.
        forward = functools.partial(self._call, name)
        setattr(self, name, forward)
        return forward

    def detach(self) -> Any:
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
            if sink is None or not hasattr(sink, method):
                return
            try:
                getattr(sink, method)(*args)
            except (OSError, ValueError) as exc:
                self.sink = None
                failed = (sink, exc)
        if failed is not None:
            self._on_failure(*failed)

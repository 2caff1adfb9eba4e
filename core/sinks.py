"""Where a run's records go: any object with these methods; FanOut sends to several."""

from __future__ import annotations

from typing import Any, Protocol

from core.records import MemorySample, RunEvent, StepRecord


class RunSink(Protocol):
    def on_start(self, meta: dict) -> None: ...
    def on_sample(self, sample: MemorySample) -> None: ...
    def on_step(self, record: StepRecord) -> None: ...
    def on_event(self, event: RunEvent) -> None: ...
    def on_graph(self, snapshot: Any) -> None: ...
    def on_finish(self, summary: dict) -> None: ...
    # Optional: on_allocations(rows) (precise mode), on_cuda_snapshot(recorder) (CUDA).


class FanOut:
    """Forwards every record to each sink, in order. Sinks must not raise."""

    def __init__(self, *sinks: Any) -> None:
        self.sinks = [s for s in sinks if s is not None]

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

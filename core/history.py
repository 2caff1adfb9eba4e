"""Columnar run history: numpy arrays that grow by doubling, one lock; readers pull new rows."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

from core.records import MEMORY_CATEGORIES, PHASE_CODE, MemorySample, RunEvent, StepRecord

STEP_COLUMNS: tuple[str, ...] = (
    "step", "time_s", "loss", "grad_norm", "step_ms", "zero_grad_ms", "forward_ms",
    "backward_ms", "optimizer_ms", "eval_ms", "allocated_bytes", "peak_bytes",
    "reserved_bytes", "graph_nodes", "saved_bytes", "retained_bytes", "eval_loss",
)  # fmt: skip
# `x` places a sample on the step axis: step + (phase index) / 6, so phases of a step spread
# across [step, step + 1) and every plot can share one axis.
SAMPLE_COLUMNS: tuple[str, ...] = (
    "step", "phase", "x", "time_s", *MEMORY_CATEGORIES, "total", "allocated", "reserved", "heap",
)
PHASES_PER_STEP = len(PHASE_CODE)
MAX_GRAPHS = 32
# Precise mode's storage events: action 0 = alloc, 1 = free; category is an index into
# MEMORY_CATEGORIES; frame indexes RunHistory.frames.
ALLOC_COLUMNS: tuple[str, ...] = (
    "t_us", "action", "storage", "addr", "bytes", "category", "step", "phase", "frame",
)


def sample_x(step: int, phase: str) -> float:
    return step + PHASE_CODE[phase] / PHASES_PER_STEP


def _num(v: float | int | None) -> float:
    return math.nan if v is None else float(v)


def sample_values(s: MemorySample) -> tuple[float, ...]:
    """A sample as a row in SAMPLE_COLUMNS order."""
    return (
        s.step, PHASE_CODE[s.phase], sample_x(s.step, s.phase), s.time_s,
        s.params, s.grads, s.optimizer, s.activations, s.other, s.total,
        _num(s.allocated), _num(s.reserved), _num(s.heap),
    )  # fmt: skip


def step_values(r: StepRecord) -> tuple[float, ...]:
    """A step record as a row in STEP_COLUMNS order."""
    return (
        r.step, r.time_s, r.loss, r.grad_norm, r.step_ms, r.zero_grad_ms, r.forward_ms,
        r.backward_ms, r.optimizer_ms, r.eval_ms, r.allocated_bytes, r.peak_bytes,
        _num(r.reserved_bytes), r.graph_nodes, r.saved_bytes, r.retained_bytes, r.eval_loss,
    )  # fmt: skip


class ColumnTable:
    """Append-only float64 table. One writer thread, any number of readers."""

    def __init__(self, columns: Sequence[str], capacity: int = 1024) -> None:
        self.columns = tuple(columns)
        self.index = {c: i for i, c in enumerate(self.columns)}
        self._data = np.empty((max(capacity, 16), len(self.columns)), dtype=np.float64)
        self._n = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    def append(self, row: Sequence[float]) -> None:
        with self._lock:
            if self._n == len(self._data):
                grown = np.empty((2 * len(self._data), len(self.columns)), dtype=np.float64)
                grown[: self._n] = self._data[: self._n]
                self._data = grown
            self._data[self._n] = row
            self._n += 1

    def extend(self, rows: np.ndarray) -> None:
        """Append many rows at once (loading a saved run)."""
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, len(self.columns))
        with self._lock:
            need = self._n + len(rows)
            if need > len(self._data):
                cap = len(self._data)
                while cap < need:
                    cap *= 2
                grown = np.empty((cap, len(self.columns)), dtype=np.float64)
                grown[: self._n] = self._data[: self._n]
                self._data = grown
            self._data[self._n : need] = rows
            self._n = need

    def rows(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """A copy of rows [start, stop): safe to keep while the writer goes on."""
        with self._lock:
            stop = self._n if stop is None else min(stop, self._n)
            return self._data[start:stop].copy()

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        with self._lock:
            stop = self._n if stop is None else min(stop, self._n)
            return self._data[start:stop, self.index[name]].copy()

    def clear(self) -> None:
        with self._lock:
            self._n = 0


class RunHistory:
    """Everything a run has recorded, as plain numbers. Also a run sink (see core.sinks)."""

    def __init__(self) -> None:
        self.steps = ColumnTable(STEP_COLUMNS)
        self.samples = ColumnTable(SAMPLE_COLUMNS, capacity=4096)
        self._events: list[RunEvent] = []
        self._events_lock = threading.Lock()
        self.meta: dict = {}
        self.summary: dict | None = None
        self.graphs: list = []  # the newest MAX_GRAPHS GraphSnapshot objects, newest last
        self.graphs_seen = 0  # all captures, including those dropped from `graphs`
        self.allocs = ColumnTable(ALLOC_COLUMNS, capacity=4096)
        self.frames: list[str] = []  # interned Python stacks of allocations
        self._frame_ids: dict[str, int] = {}

    # --- sink interface -------------------------------------------------------------------
    def on_start(self, meta: dict) -> None:
        self.meta = dict(meta)

    def on_sample(self, s: MemorySample) -> None:
        self.samples.append(sample_values(s))

    def on_step(self, r: StepRecord) -> None:
        self.steps.append(step_values(r))

    def on_allocations(self, rows: list[tuple]) -> None:
        """Precise mode: storage alloc/free events, ALLOC_COLUMNS plus a frames string."""
        for row in rows:
            *values, frames = row
            fid = self._frame_ids.get(frames)
            if fid is None:
                fid = self._frame_ids[frames] = len(self.frames)
                self.frames.append(frames)
            self.allocs.append((*values, fid))

    def on_event(self, e: RunEvent) -> None:
        with self._events_lock:
            self._events.append(e)

    def on_graph(self, snapshot) -> None:
        # Keep the newest captures only: a 2,000-node snapshot is ~1 MB, and capture_every=1
        # over a long run must not grow without bound. The run files keep every summary.
        self.graphs.append(snapshot)
        self.graphs_seen += 1
        if len(self.graphs) > MAX_GRAPHS:
            del self.graphs[: len(self.graphs) - MAX_GRAPHS]

    def on_finish(self, summary: dict) -> None:
        self.summary = dict(summary)

    # --- readers --------------------------------------------------------------------------
    def events(self, start: int = 0) -> list[RunEvent]:
        with self._events_lock:
            return self._events[start:]

    @property
    def event_count(self) -> int:
        with self._events_lock:
            return len(self._events)

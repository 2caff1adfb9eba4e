"""Columnar run history: numpy tables that grow in fixed blocks, one lock; readers pull new rows."""

from __future__ import annotations

import collections
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memlens.core.records import (
    ALLOC_FRAME_COLUMN,
    FIRST_CATEGORIES,
    LATER_CATEGORIES,
    SAMPLE_PHASE_CODE,
    AllocBlock,
    MemorySample,
    RunEvent,
    SampleItem,
    StepRecord,
    StepRow,
    samples_of,
)

STEP_COLUMNS: tuple[str, ...] = (
    "step", "time_s", "loss", "grad_norm", "step_ms", "zero_grad_ms", "forward_ms",
    "backward_ms", "optimizer_ms", "eval_ms", "allocated_bytes", "peak_bytes",
    "reserved_bytes", "graph_nodes", "saved_bytes", "retained_bytes", "eval_loss",
    "optimizer_stepped", "peak_is_exact",
)
# `x` places a sample on the step axis: step + (phase index) / PHASES_PER_STEP (spread_x for
# steps whose phases repeat), so the samples of a step spread
# across [step, step + 1) and every plot can share one axis.
# The categories that came after rss (FSDP's gathered parameters, DDP's buckets) stand after
# it, as memory.csv has them (its older files lack them: core.runfolder.format).
SAMPLE_COLUMNS: tuple[str, ...] = (
    "step", "phase", "x", "time_s", *FIRST_CATEGORIES, "total", "allocated", "reserved",
    "heap", "rss", *LATER_CATEGORIES, "carried",
)
PHASES_PER_STEP = len(SAMPLE_PHASE_CODE)
MAX_GRAPHS = 32
# Rows per storage block of a ColumnTable: ~0.9 MB of samples, small enough that the unused
# end of the last block is under 1% of a million-sample run.
BLOCK_ROWS = 8192
# Precise mode's storage events: action 0 = alloc, 1 = free; category is an index into
# MEMORY_CATEGORIES; frame indexes RunHistory.frames.
ALLOC_COLUMNS: tuple[str, ...] = (
    "t_us", "action", "storage", "addr", "bytes", "category", "step", "phase", "frame",
)


def sample_x(step: int, phase: str) -> float:
    return step + SAMPLE_PHASE_CODE[phase] / PHASES_PER_STEP


def spread_x(steps: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """`x` for rows in the order written: sample_x where each step's phases rise (every
    preset step); in a step where a phase repeats or comes back (a watched GAN: D called
    three times, a second zero_grad), each sample at its own place in order, step + k / n
    with n = max(PHASES_PER_STEP, the step's samples), so the curve never folds back."""
    steps = np.asarray(steps, dtype=np.float64)
    codes = np.asarray(codes, dtype=np.float64)
    x = steps + codes / PHASES_PER_STEP
    n = len(steps)
    if n < 2:
        return x
    first = np.empty(n, dtype=bool)
    first[0] = True
    first[1:] = steps[1:] != steps[:-1]
    starts = np.flatnonzero(first)
    run = np.cumsum(first) - 1
    folds = np.zeros(n, dtype=bool)
    folds[1:] = ~first[1:] & (codes[1:] <= codes[:-1])
    folded = np.zeros(len(starts), dtype=bool)
    np.logical_or.at(folded, run, folds)
    sel = folded[run]
    if sel.any():
        counts = np.diff(np.append(starts, n))[run]
        ordinal = np.arange(n) - starts[run]
        x[sel] = steps[sel] + ordinal[sel] / np.maximum(PHASES_PER_STEP, counts[sel])
    return x


def _num(v: float | int | None) -> float:
    return math.nan if v is None else float(v)


def sample_values(s: MemorySample) -> tuple[float, ...]:
    """A sample as a row in SAMPLE_COLUMNS order."""
    return (
        s.step, SAMPLE_PHASE_CODE[s.phase], sample_x(s.step, s.phase), s.time_s,
        s.params, s.grads, s.optimizer, s.activations, s.other, s.buffers, s.amp_casts,
        s.temporaries, s.total,
        _num(s.allocated), _num(s.reserved), _num(s.heap), _num(s.rss), s.gathered, s.buckets,
        float(s.carried),
    )


def step_values(r: StepRecord) -> tuple[float, ...]:
    """A step record as a row in STEP_COLUMNS order."""
    return (
        r.step, r.time_s, r.loss, r.grad_norm, r.step_ms, r.zero_grad_ms, r.forward_ms,
        r.backward_ms, r.optimizer_ms, r.eval_ms, r.allocated_bytes, r.peak_bytes,
        _num(r.reserved_bytes), r.graph_nodes, r.saved_bytes, r.retained_bytes, r.eval_loss,
        float(r.optimizer_stepped), float(r.peak_is_exact),
    )


def as_alloc_block(rows: list[tuple] | AllocBlock) -> AllocBlock:
    """Alloc/free rows as one block: tuples (ALLOC_COLUMNS values, the frames text last, as
    a sink may be handed them) are made one; a block comes back as it is."""
    if isinstance(rows, AllocBlock):
        return rows
    ids: dict[str, int] = {}
    table = np.empty((len(rows), len(ALLOC_COLUMNS)), dtype=np.float64)
    for i, row in enumerate(rows):
        table[i, :ALLOC_FRAME_COLUMN] = row[:ALLOC_FRAME_COLUMN]
        text = row[ALLOC_FRAME_COLUMN]
        table[i, ALLOC_FRAME_COLUMN] = ids.setdefault(text, len(ids)) if text else -1
    return AllocBlock(table, list(ids))


def remap_frames(block: AllocBlock, ids: dict[str, int], luts: dict | None = None
                 ) -> tuple[np.ndarray, list[str]]:
    """A copy of the block's table whose frame column indexes a consumer's own frames
    (`ids`: text -> index, extended here), and the texts that were new to it, in order of
    the block's stack ids. A block names a few distinct stacks, however many rows it has.

    `luts`: the consumer's own, kept between calls: for a recorder whose blocks share one
    growing list of texts (AllocBlock.shared, the native recorder's) the index each stack id
    maps to, so that a block is mapped by one look-up per row (a step of a few hundred rows
    took 150 us with a sort and a text look-up per stack)."""
    table = block.table
    sids = table[:, ALLOC_FRAME_COLUMN].astype(np.int64)
    size = len(block.frames) + 1  # lut[sid + 1]: the consumer's index (sid -1: no stack)
    if luts is None or not block.shared:
        lut = np.full(size, _UNMAPPED)
    else:
        entry = luts.get(id(block.frames))
        if entry is None or entry[0] is not block.frames:
            entry = luts[id(block.frames)] = [block.frames, np.full(1, _UNMAPPED)]
        if len(entry[1]) < size:
            entry[1] = np.concatenate([entry[1], np.full(size - len(entry[1]), _UNMAPPED)])
        lut = entry[1]
    where = sids + 1
    mapped = lut[where]
    new: list[str] = []
    if (mapped == _UNMAPPED).any():  # texts this consumer has not numbered: in stack order
        for sid in np.unique(sids[mapped == _UNMAPPED]).tolist():
            text = "" if sid < 0 else block.frames[sid]
            fid = ids.get(text)
            if fid is None:
                fid = ids[text] = len(ids)
                new.append(text)
            lut[sid + 1] = fid
        mapped = lut[where]
    out = table.copy()  # a block can go to several sinks: never change it
    out[:, ALLOC_FRAME_COLUMN] = mapped
    return out, new


_UNMAPPED = -2.0  # a stack id not numbered by the consumer yet


# Full blocks a table keeps in memory, newest first; older ones go to its spill file. The
# plots draw from their own decimated copy and read full rows only near the newest step or in
# a zoomed-in window, so a long run's memory stays bounded (docs/benchmarks.md has figures).
KEEP_BLOCKS = 4
SPILL_PREFIX = ".memlens-spill-"


class SpillFile:
    """An unnamed temporary file that holds a history's older rows, read back on demand.

    Made at the first spill, in `folder` (a run's own folder, so the rows go to the disk the
    run writes to) or the system's temporary folder; removed by the OS when closed or when
    the process ends. pwrite/pread: any thread may read while the writer appends.
    """

    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder
        self._fh = None
        self._size = 0
        self._lock = threading.Lock()
        self.failed: str | None = None  # why spilling stopped (rows then stay in memory)

    def write(self, data: bytes) -> int | None:
        """Append `data`; its offset, or None when the file cannot take it."""
        with self._lock:
            if self.failed is not None:
                return None
            try:
                if self._fh is None:  # open for the history's life; closed by close()
                    self._fh = tempfile.TemporaryFile(  # noqa: SIM115
                        dir=self.folder, prefix=SPILL_PREFIX)
                offset, view, written = self._size, memoryview(data), 0
                while written < len(view):
                    written += os.pwrite(self._fh.fileno(), view[written:], offset + written)
                self._size += len(data)
                return offset
            except OSError as exc:
                self.failed = f"{exc.strerror or exc}"
                return None

    def read(self, offset: int, n: int) -> bytes:
        data = os.pread(self._fh.fileno(), n, offset)
        while len(data) < n:  # pread may return less than asked
            more = os.pread(self._fh.fileno(), n - len(data), offset + len(data))
            if not more:
                raise OSError(f"the history's spill file ended at {offset + len(data)}")
            data += more
        return data

    @property
    def nbytes(self) -> int:
        return self._size

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
            self.failed = "closed"


class _SpilledBlock:
    """A full block's rows in the spill file: indexed like the array it replaced."""

    __slots__ = ("_offset", "_spill", "shape")
    nbytes = 0  # none of it in memory

    def __init__(self, spill: SpillFile, offset: int, shape: tuple[int, int]) -> None:
        self._spill, self._offset, self.shape = spill, offset, shape

    def __getitem__(self, key) -> np.ndarray:
        rows, cols = key if isinstance(key, tuple) else (key, slice(None))
        lo, hi, _ = rows.indices(self.shape[0])
        width = self.shape[1] * 8
        data = self._spill.read(self._offset + lo * width, max(hi - lo, 0) * width)
        return np.frombuffer(data, dtype=np.float64).reshape(-1, self.shape[1])[:, cols]


class ColumnTable:
    """Append-only float64 table. One writer thread, any number of readers.

    Rows live in fixed blocks of BLOCK_ROWS: growing adds a block and never copies the rows
    already stored (a doubling array copied the whole table under the lock, and held half as
    much again meanwhile), and the last block is the only slack. A row, once
    stored, never moves or changes, so readers copy it out after letting go of the lock.

    `append` only queues the writer's item: the training thread calls it five times a step
    between kernels, where writing a tuple into a numpy row costs tens of microseconds (cold
    caches) and a lock more. Items become rows in batches, converted by `convert`, when
    FLUSH_ROWS are waiting or a reader looks (`len()`, `rows()`, `column()`, ...), whichever
    is first: a reader always sees every row appended before it looked.

    A live reader (the GUI at 30 Hz, `live=True`) takes a fresh queue as not there yet: a
    fast writer converts its own batch within milliseconds, and converting it on the GUI
    thread instead had put a quarter of all conversions there. A queue that has waited
    LIVE_LAG_S (a slow writer between phases, a paused run) is converted by the reader; it
    holds only a few rows then.
    """

    FLUSH_ROWS = 64
    LIVE_LAG_S = 0.03

    def __init__(self, columns: Sequence[str], block_rows: int = BLOCK_ROWS,
                 convert: Callable[[Any], Sequence[float]] | None = None,
                 spill: SpillFile | None = None, keep_blocks: int = KEEP_BLOCKS) -> None:
        """`spill`: where full blocks beyond the newest `keep_blocks` go (None: all stay in
        memory)."""
        self._spill = spill
        self._keep = max(int(keep_blocks), 1)
        self._in_memory_from = 0  # blocks before this index are in the spill file
        self.columns = tuple(columns)
        self.index = {c: i for i, c in enumerate(self.columns)}
        self.block_rows = max(int(block_rows), 16)
        self._blocks: list[np.ndarray] = []
        self._n = 0
        self._lock = threading.Lock()
        # deque: append and popleft are atomic, so the writer queues without the lock
        self._pending: collections.deque = collections.deque()
        self._pending_since = 0.0  # when an item went into an empty queue (approximate)
        self._convert = convert

    def __len__(self) -> int:
        self._drain()
        return self._n

    @property
    def itemsize(self) -> int:
        return np.dtype(np.float64).itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of rows held in memory (spilled blocks hold none)."""
        self._drain()
        return sum(b.nbytes for b in self._blocks)

    @property
    def spilled_rows(self) -> int:
        return self._in_memory_from * self.block_rows

    def _new_block(self) -> np.ndarray:
        return np.empty((self.block_rows, len(self.columns)), dtype=np.float64)

    def append(self, item) -> None:
        """Queue one row (or one item for `convert`)."""
        pending = self._pending
        if not pending:
            self._pending_since = time.monotonic()
        pending.append(item)
        if len(pending) >= self.FLUSH_ROWS:
            self._drain()

    def flush(self) -> None:
        """Convert the queue now."""
        self._drain()

    def _drain(self) -> None:
        pending = self._pending
        if not pending:
            return
        with self._lock:
            items = [pending.popleft() for _ in range(len(pending))]
            if not items:
                return
            convert = self._convert
            rows = np.array(items if convert is None else [convert(i) for i in items],
                            dtype=np.float64).reshape(len(items), len(self.columns))
            self._store(rows)

    def _store(self, rows: np.ndarray) -> None:
        """Write rows after the last stored one. Called with the lock held."""
        size = self.block_rows
        done = 0
        while done < len(rows):
            n = self._n
            if n == len(self._blocks) * size:
                self._blocks.append(self._new_block())
            at = n % size
            take = min(size - at, len(rows) - done)
            self._blocks[n // size][at : at + take] = rows[done : done + take]
            done += take
            self._n = n + take
        self._spill_old_blocks()

    def _spill_old_blocks(self) -> None:
        """Move full blocks beyond the newest `keep` to the spill file. Called with the lock
        held. A reader that took a block before it moved still holds the array: rows never
        change, so what it copies is the same."""
        if self._spill is None:
            return
        full = self._n // self.block_rows
        while full - self._in_memory_from > self._keep:
            i = self._in_memory_from
            block = self._blocks[i]
            offset = self._spill.write(np.ascontiguousarray(block).tobytes())
            if offset is None:  # the disk refused: keep the rows in memory from here on
                self._spill = None
                return
            self._blocks[i] = _SpilledBlock(self._spill, offset, block.shape)
            self._in_memory_from = i + 1

    def extend(self, rows: np.ndarray) -> None:
        """Append many rows at once (loading a saved run)."""
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, len(self.columns))
        self._drain()
        with self._lock:
            self._store(rows)

    def _span(self, start: int, stop: int | None, live: bool = False
              ) -> tuple[list[np.ndarray], int, int]:
        """The blocks that hold rows [start, stop) and the row range, read under the lock.
        Queued items are stored first only if the reader asks past the stored rows (the GUI
        reads back stored rows many times a frame; those reads skip the queue), and for a
        live reader only once the queue has waited LIVE_LAG_S."""
        if (stop is None or stop > self._n) and not (
                live and time.monotonic() - self._pending_since < self.LIVE_LAG_S):
            self._drain()
        with self._lock:
            n = self._n
            stop = n if stop is None else min(stop, n)
            start = min(max(start, 0), stop)
            if start == stop:
                return [], start, stop
            size = self.block_rows
            return self._blocks[start // size : (stop - 1) // size + 1], start, stop

    def rows(self, start: int = 0, stop: int | None = None, live: bool = False
             ) -> np.ndarray:
        """A copy of rows [start, stop): safe to keep while the writer goes on. `live`: see
        the class."""
        blocks, start, stop = self._span(start, stop, live)
        out = np.empty((stop - start, len(self.columns)), dtype=np.float64)
        self._gather(blocks, start, stop, out, slice(None))
        return out

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        blocks, start, stop = self._span(start, stop)
        out = np.empty(stop - start, dtype=np.float64)
        self._gather(blocks, start, stop, out, self.index[name])
        return out

    def _gather(self, blocks: list[np.ndarray], start: int, stop: int, out: np.ndarray,
                cols) -> None:
        size = self.block_rows
        first = (start // size) * size
        at = 0
        for i, block in enumerate(blocks):
            b0 = first + i * size
            lo, hi = max(start - b0, 0), min(stop - b0, size)
            out[at : at + hi - lo] = block[lo:hi, cols]
            at += hi - lo

    def clear(self) -> None:
        # New blocks, not reused ones: a reader may still be copying out of the old.
        with self._lock:
            self._pending.clear()
            self._blocks = []
            self._n = 0
            self._in_memory_from = 0


class RunHistory:
    """Everything a run has recorded, as plain numbers. Also a run sink (see memlens.core.sinks)."""

    def __init__(self, spill_dir: str | os.PathLike | None = None,
                 keep_blocks: int = KEEP_BLOCKS) -> None:
        """`spill_dir`: where the tables' older rows go (the run's folder where it has one;
        None: the system's temporary folder). The newest `keep_blocks` blocks of each table
        stay in memory."""
        self.spill = SpillFile(None if spill_dir is None else os.fspath(spill_dir))
        self.steps = ColumnTable(STEP_COLUMNS, convert=step_values, spill=self.spill,
                                 keep_blocks=keep_blocks)
        self.samples = ColumnTable(SAMPLE_COLUMNS, convert=sample_values, spill=self.spill,
                                   keep_blocks=keep_blocks)
        self._events: list[RunEvent] = []
        self._events_lock = threading.Lock()
        self.meta: dict = {}
        self.summary: dict | None = None
        self.graphs: list = []  # the newest MAX_GRAPHS GraphSnapshot objects, newest last
        self.graphs_seen = 0  # all captures, including those dropped from `graphs`
        self.allocs = ColumnTable(ALLOC_COLUMNS, spill=self.spill, keep_blocks=keep_blocks)
        self.frames: list[str] = []  # interned Python stacks of allocations
        self._frame_ids: dict[str, int] = {}
        self._frame_luts: dict = {}  # remap_frames's, by recorder

    # --- rows, one at a time --------------------------------------------------------------
    def add_sample(self, s: MemorySample) -> None:
        self.samples.append(s)  # made a row by sample_values when read

    def add_step(self, r: StepRecord) -> None:
        self.steps.append(r)  # made a row by step_values when read

    # --- the run sink (core.sinks.RunSink) --------------------------------------------------
    def on_start(self, meta: dict) -> None:
        self.meta = {**self.meta, **meta}

    def on_samples(self, items: Sequence[SampleItem]) -> None:
        self._add_samples(items)

    def on_steps(self, rows: Sequence[StepRow]) -> None:
        append = self.steps.append
        for record, items in rows:
            if items:
                self._add_samples(items)
            append(record)

    def _add_samples(self, items: Sequence[SampleItem]) -> None:
        append = self.samples.append
        for s in samples_of(items):
            append(s)

    def on_cuda_snapshot(self, recorder) -> None:
        pass

    def on_allocations(self, rows: list[tuple] | AllocBlock) -> None:
        """Precise mode: storage alloc/free events as a block (or rows: ALLOC_COLUMNS values
        and a frames string). A precise step makes a hundred or more of these: one block
        write, not a row each."""
        if len(rows):
            table, new = remap_frames(as_alloc_block(rows), self._frame_ids,
                                      self._frame_luts)
            self.frames.extend(new)
            self.allocs.extend(table)

    def on_event(self, e: RunEvent) -> None:
        with self._events_lock:
            self._events.append(e)

    def on_graph(self, snapshot) -> None:
        # Keep the newest captures only: a large snapshot is a megabyte, and capture_every=1
        # over a long run must not grow without bound. The run files keep every summary.
        self.graphs.append(snapshot)
        self.graphs_seen += 1
        if len(self.graphs) > MAX_GRAPHS:
            del self.graphs[: len(self.graphs) - MAX_GRAPHS]

    def on_finish(self, summary: dict) -> None:
        self.samples.flush()  # a live reader's last pull sees every row
        self.steps.flush()
        self.summary = dict(summary)

    # --- readers --------------------------------------------------------------------------
    def events(self, start: int = 0) -> list[RunEvent]:
        with self._events_lock:
            return self._events[start:]

    @property
    def event_count(self) -> int:
        with self._events_lock:
            return len(self._events)

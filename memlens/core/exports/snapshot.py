"""PyTorch memory snapshot (snapshot.pickle) built from precise mode's storage events.

The file is what `torch.cuda.memory._dump_snapshot` writes and what pytorch.org/memory_viz
and `python -m torch.cuda._memory_viz {stats,trace,segments,memory,trace_plot}` read:

    {"segments": [segment, ...], "device_traces": [[entry, ...] per device]}

- entry: {"action": "alloc" | "free_requested" | "free_completed" | "snapshot", "addr",
  "size", "stream": 0, "time_us", "frames": [{"filename", "line", "name"}, ...] newest
  first, "category": one of MEMORY_CATEGORIES}. A free is a free_requested followed by a
  free_completed, as on CUDA when no other stream holds the block.
- segment: CPU has no caching allocator, so every allocation alive at the end is its own
  segment of exactly its size holding one active block: reserved = allocated, as it is.
- The CPU trace sits at index torch.cuda.device_count(), where PyTorch's own
  `_profile_to_snapshot` puts it; a CUDA run's events sit at its CUDA device's index.
- Like the CUDA recorder's ring buffer, only the last `max_entries` entries are kept.
  Storages allocated earlier still count: one freed inside the window shows as a free of an
  allocation that was not recorded, one still alive shows as a segment block.
- Each entry's frames end with a pseudo-frame {"filename": "<memlens step>", "line": step,
  "name": phase} saying when the storage was allocated.

Pickle protocol 4 and only dicts, lists, ints and strs: the viewer's own unpickler knows no
more than that.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from memlens.core.exports._allocs import AllocationEvents, allocation_events, parse_frames
from memlens.core.exports.limits import DEFAULT_MAX_ENTRIES
from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES, SAMPLE_PHASES
from memlens.core.runfolder.atomic import ExportError, atomic_open
from memlens.core.runfolder.format import SNAPSHOT_PICKLE

PICKLE_PROTOCOL = 4  # the viewer's unpickler rejects protocol 5
# Addresses given to allocations whose recorded address is unusable (zero, or shared with
# another live allocation): above the 47-bit user address space, below 2**53 so the
# viewer's JavaScript numbers stay exact.
SYNTHETIC_BASE = 1 << 48
_ALIGN = 512


class SnapshotUnavailable(ExportError):
    """This run has no allocation events to build a snapshot from."""


def unavailable_reason(history: RunHistory, use: str = " to build a memory snapshot from"
                       ) -> str | None:
    """Why this history cannot give a snapshot (a plain sentence), or None if it can.
    `use` says what the events would be for ("" for allocations.csv)."""
    if len(history.allocs):
        return None
    env = history.meta.get("environment") or {}
    if not env.get("precise") and not (history.meta.get("config") or {}).get("precise"):
        return ("this run was recorded without precise mode, so it has no allocation and "
                f"free events{use}. Rerun with --precise (precise=true); trace and timeline "
                "work without it.")
    return ("this precise run holds no allocation events (no step ran, or its "
            "allocations.npy is empty).")


def device_slot(history: RunHistory, cuda_device_count: int | None = None) -> tuple[int, int]:
    """(index of this run's trace in device_traces, number of device traces)."""
    if cuda_device_count is None:
        cuda_device_count = _cuda_device_count()
    device = str((history.meta.get("environment") or {}).get("device", "cpu"))
    if device.startswith("cuda"):
        _, _, idx = device.partition(":")
        index = int(idx) if idx.isdigit() else 0
        return index, max(cuda_device_count, index + 1)
    return cuda_device_count, cuda_device_count + 1


def _cuda_device_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count())


def window_start(events: AllocationEvents, max_entries: int | None) -> int:
    """First row of the trailing window that fits in max_entries trace entries (an
    allocation is one entry, a free two). Walks back from the end, so a long run's early
    rows are never touched."""
    n = len(events)
    if not max_entries or max_entries <= 0:
        return 0
    room, hi = max_entries, n
    while hi > 0:
        lo = max(0, hi - 65_536)
        per_row = np.where(events.is_free[lo:hi], 2, 1)[::-1]
        used = np.cumsum(per_row)
        fits = int(np.searchsorted(used, room, side="right"))
        if fits < hi - lo:
            return hi - fits
        room -= int(used[-1])
        hi = lo
    return 0


def assign_addresses(events: AllocationEvents, start: int, rows: np.ndarray,
                     addr: np.ndarray) -> np.ndarray:
    """An address for each of `rows` (sorted event rows with their recorded `addr`) such
    that no two allocations alive at once in the window share one. A free gets its
    allocation's address."""
    n = len(events)
    free = events.is_free[rows]
    partner = events.partner[rows]
    # One interval per allocation (its rows to its free, or to the end) and per free whose
    # allocation was never recorded (from before the first row to it).
    interval = ~free | ((partner < 0) & (rows >= start))
    ids = np.nonzero(interval)[0]
    begin = np.where(free[ids], -1, rows[ids])
    end = np.where(free[ids], rows[ids], np.where(partner[ids] >= 0, partner[ids], n))
    a = addr[ids]
    # Sorted by address then start, an interval clashes when an earlier one at the same
    # address has not ended by the time it starts, or when its address is unusable.
    order = np.lexsort((begin, a))
    a, b, e = a[order], begin[order], end[order]
    group = np.concatenate([[0], np.cumsum(a[1:] != a[:-1])]).astype(np.int64)
    stride = n + 2
    running = np.maximum.accumulate(group * stride + e)
    clash = a <= 0
    clash[1:] |= (group[1:] == group[:-1]) & (running[:-1] - group[1:] * stride > b[1:])
    final = a.copy()
    if clash.any():
        sizes = events.nbytes[rows[ids][order][clash]]
        rounded = (sizes + _ALIGN - 1) // _ALIGN * _ALIGN
        final[clash] = SYNTHETIC_BASE + np.concatenate([[0], np.cumsum(rounded)[:-1]])
    out = np.zeros(len(rows), dtype=np.int64)
    out[ids[order]] = final
    owner = np.where(free & (partner >= 0), np.searchsorted(rows, partner), np.arange(len(rows)))
    return out[owner]


def build_snapshot(history: RunHistory, *, max_entries: int | None = DEFAULT_MAX_ENTRIES,
                   device: tuple[int, int] | None = None,
                   events: AllocationEvents | None = None) -> dict:
    """The snapshot as plain dicts and lists (see the module docstring for the schema)."""
    reason = unavailable_reason(history)
    if reason:
        raise SnapshotUnavailable(f"cannot write {SNAPSHOT_PICKLE}: {reason}")
    events = events if events is not None else allocation_events(history)
    index, count = device if device is not None else device_slot(history)
    n = len(events)
    start = window_start(events, max_entries)
    window = np.arange(start, n, dtype=np.int64)
    partner = events.partner
    # Rows whose details the snapshot shows: the window, the allocations of frees in it,
    # and the storages still alive at the end (the segments).
    earlier = partner[window][events.is_free[start:]]
    earlier = earlier[(earlier >= 0) & (earlier < start)]
    alive = np.nonzero(events.alive_at_end)[0]
    rows = np.sort(np.concatenate([window, earlier, alive]))
    first = np.ones(len(rows), dtype=bool)
    first[1:] = rows[1:] != rows[:-1]
    rows = rows[first]
    info = events.details(rows)
    addresses = assign_addresses(events, start, rows, info["addr"])
    # Per window row: its position in rows, and its allocation's (a free's is its alloc's).
    w = slice(start, n)
    pos = np.searchsorted(rows, window)
    mates = partner[w]
    owner = np.where(events.is_free[w] & (mates >= 0), np.searchsorted(rows, mates), pos)
    alive_pos = np.searchsorted(rows, alive)
    frames_of = _stacks(history, info, np.concatenate([owner, alive_pos]))
    names = list(MEMORY_CATEGORIES)
    trace: list[dict] = []
    for free, addr, t, size, cat, frames in zip(
            events.is_free[w].tolist(), addresses[pos].tolist(), events.t_us[w].tolist(),
            events.nbytes[w].tolist(), events.category[w].tolist(), frames_of[: len(owner)],
            strict=True):
        entry = {"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t,
                 "frames": frames, "category": names[cat]}
        if free:
            trace.append({**entry, "action": "free_requested"})
            entry["action"] = "free_completed"
        trace.append(entry)
    # The viewer colours by category and expects 'unknown' among them (without it, it fails
    # on a misspelt list); a 'snapshot' entry, which marks when the state was taken,
    # carries it and no memory.
    trace.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0,
                  "time_us": int(events.t_us[-1]) if n else 0, "frames": [],
                  "category": "unknown"})
    segments = []
    order = np.argsort(addresses[alive_pos], kind="stable")
    for k in order.tolist():
        row, i, frames = int(alive[k]), int(alive_pos[k]), frames_of[len(owner) + k]
        size, addr = int(events.nbytes[row]), int(addresses[i])
        segments.append({
            "device": index, "address": addr, "total_size": size, "allocated_size": size,
            "active_size": size, "requested_size": size, "stream": 0, "frames": frames,
            "blocks": [{"address": addr, "size": size, "requested_size": size,
                        "state": "active_allocated", "frames": frames}],
        })
    device_traces: list[list] = [[] for _ in range(count)]
    device_traces[index] = trace
    return {"segments": segments, "device_traces": device_traces}


def _stacks(history: RunHistory, info: dict[str, np.ndarray], which: np.ndarray) -> list:
    """The frames list of each of `which` (positions into info's rows): its Python stack,
    newest first, then a frame naming the step and phase it was allocated in. One list
    per distinct (stack, step, phase), shared: pickle writes it once, the viewer holds it
    once."""
    frame, step, phase = (info[c][which] for c in ("frame", "step", "phase"))
    if not len(which):
        return []
    low = int(step.min())
    span = int(step.max()) - low + 1
    key = (frame * span + (step - low)) * len(SAMPLE_PHASES) + phase
    distinct, inverse = np.unique(key, return_inverse=True)
    parsed: dict[int, list] = {}
    shared = np.empty(len(distinct), dtype=object)
    for j, k in enumerate(distinct.tolist()):
        f, rest = divmod(k, span * len(SAMPLE_PHASES))
        s, p = divmod(rest, len(SAMPLE_PHASES))
        if f not in parsed:
            parsed[f] = parse_frames(history.frames[f])
        shared[j] = [*parsed[f], {"filename": "<memlens step>", "line": s + low,
                                  "name": SAMPLE_PHASES[p]}]
    return shared[inverse.reshape(-1)].tolist()


def write_snapshot(history: RunHistory, path: str | Path, *,
                   max_entries: int | None = DEFAULT_MAX_ENTRIES,
                   device: tuple[int, int] | None = None,
                   events: AllocationEvents | None = None) -> Path:
    """Write snapshot.pickle atomically."""
    snapshot = build_snapshot(history, max_entries=max_entries, device=device, events=events)
    path = Path(path)
    with atomic_open(path, "wb") as fh:
        pickle.dump(snapshot, fh, protocol=PICKLE_PROTOCOL)
    return path

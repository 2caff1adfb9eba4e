"""Read a memory snapshot (snapshot.pickle) safely: allocated memory over its events, the peak.

The file is what `torch.cuda.memory._dump_snapshot` writes (or memlens's own, see
core/exports/snapshot.py): plain dicts, lists, strings and numbers. It is read with an
unpickler that refuses every global, so nothing in the file can run code: a pickle that
names a class or a callable (what a malicious file needs) is refused with the reason.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memlens.core.runfolder.format import SNAPSHOT_PICKLE

MAX_SNAPSHOT_BYTES = 4 << 30  # a larger file is surely not a snapshot; refuse, do not load
TOP_ALLOCATIONS = 20
BEFORE_WINDOW = "(allocated before the recorded window)"


class SnapshotFileError(ValueError):
    """A file that is not a readable, safe snapshot; the message says why and what to do."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle makes without a global: dicts, lists, tuples, sets, str,
    bytes, numbers, None, booleans. Every class, function or callable is refused."""

    def find_class(self, module: str, name: str):
        raise SnapshotFileError(
            f"the file asks to load {module}.{name}, and a snapshot holds only plain data "
            "(dicts, lists, numbers, strings). It was refused unread, so nothing in it ran. "
            "Open a snapshot written by torch.cuda.memory._dump_snapshot or by memlens.")

    def persistent_load(self, pid):
        raise SnapshotFileError("the file refers to outside objects (persistent ids); "
                                "a snapshot does not, so it was refused unread")


def load_plain_pickle(data: bytes) -> object:
    """Unpickle bytes that may hold only plain containers and scalars."""
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except SnapshotFileError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, MemoryError, RecursionError) as exc:
        raise SnapshotFileError(f"not a readable pickle ({type(exc).__name__}: {exc})"
                                ) from None


@dataclass
class LiveAllocation:
    """One allocation alive at the peak: its size, address, category and stack."""

    size: int
    addr: int
    category: str
    frames: list[str]  # "file:line name", newest first


@dataclass
class SnapshotTimeline:
    """What a snapshot shows: allocated (and reserved) bytes after each trace event."""

    path: Path
    device: int
    actions: int  # trace events read (alloc, free, segment, ...)
    allocated: np.ndarray  # bytes after each event; index 0 is before the first one
    reserved: np.ndarray | None  # from segment events, where the trace has them
    categories: dict[str, np.ndarray] = field(default_factory=dict)  # name -> bytes
    peak_index: int = 0
    peak_bytes: int = 0
    top: list[LiveAllocation] = field(default_factory=list)  # largest alive at the peak
    live_at_peak: int = 0  # how many allocations were alive there

    @property
    def x(self) -> np.ndarray:
        return np.arange(len(self.allocated), dtype=np.float64)


def read_snapshot(path: str | Path) -> SnapshotTimeline:
    """Read and check a snapshot file; raises SnapshotFileError with the reason."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_SNAPSHOT_BYTES:
            raise SnapshotFileError(f"{path}: {size} bytes is too large for a snapshot")
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        doc = load_plain_pickle(data)
    except SnapshotFileError as exc:
        raise SnapshotFileError(f"{path}: {exc}") from None
    try:
        return timeline_of(doc, path)
    except SnapshotFileError as exc:
        raise SnapshotFileError(f"{path}: {exc}") from None


def _frames(entry: dict) -> list[str]:
    out = []
    for f in entry.get("frames") or ():
        if isinstance(f, dict):
            out.append(f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '')}")
    return out


def _int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotFileError(f"a size or address is not an integer ({value!r})")
    return value


def _pick_device(traces: list) -> int:
    """The device whose trace has the most entries (one device in almost every file)."""
    best, most = 0, -1
    for i, t in enumerate(traces):
        if isinstance(t, list) and len(t) > most:
            best, most = i, len(t)
    return best


def timeline_of(doc: object, path: Path = Path(SNAPSHOT_PICKLE)) -> SnapshotTimeline:
    """The timeline of an unpickled snapshot dict (see read_snapshot)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("device_traces"), list):
        raise SnapshotFileError("not a memory snapshot: no device_traces. Write one with "
                                "torch.cuda.memory._dump_snapshot after "
                                "torch.cuda.memory._record_memory_history()")
    traces = doc["device_traces"]
    device = _pick_device(traces)
    trace = [e for e in (traces[device] if traces else []) if isinstance(e, dict)]
    segments = [s for s in doc.get("segments") or () if isinstance(s, dict)
                and s.get("device", device) == device]
    if not trace and not segments:
        raise SnapshotFileError("the snapshot holds no trace events and no segments: was "
                                "_record_memory_history on while the program ran?")
    n = len(trace)
    delta = np.zeros(n, dtype=np.int64)
    seg_delta = np.zeros(n, dtype=np.int64)
    cat_names = sorted({str(e["category"]) for e in trace if e.get("category")
                        and e.get("action") in ("alloc", "free_completed", "free")})
    cat_index = {c: i for i, c in enumerate(cat_names)}
    cat_delta = np.zeros((len(cat_names), n), dtype=np.int64)
    has_segment_events = False
    for i, e in enumerate(trace):
        action = e.get("action")
        size = _int(e.get("size", 0))
        sign = {"alloc": 1, "free_completed": -1, "free": -1}.get(action, 0)
        if sign:
            delta[i] = sign * size
            c = cat_index.get(str(e.get("category"))) if e.get("category") else None
            if c is not None:
                cat_delta[c, i] = sign * size
        seg = {"segment_alloc": 1, "segment_free": -1,
               "segment_map": 1, "segment_unmap": -1}.get(action, 0)
        if seg:
            has_segment_events = True
            seg_delta[i] = seg * size
    # A trace is a ring buffer: what was alive before its first event is known from the
    # end state (the segments' active blocks) less what the trace added.
    alive_end = 0
    reserved_end = 0
    blocks: list[tuple[int, dict, dict]] = []
    for s in segments:
        reserved_end += _int(s.get("total_size", 0))
        for b in s.get("blocks") or ():
            # A block freed on its stream but not yet released still counts, as the
            # trace counts a free at free_completed.
            if isinstance(b, dict) and b.get("state") in ("active_allocated",
                                                          "active_pending_free"):
                alive_end += _int(b.get("size", 0))
                blocks.append((_int(b.get("address", 0)), b, s))
    allocated = np.empty(n + 1, dtype=np.int64)
    allocated[0] = alive_end - int(delta.sum()) if segments else max(0, -_min_prefix(delta))
    np.cumsum(delta, out=allocated[1:])
    allocated[1:] += allocated[0]
    # Reserved memory over time only where the trace records segments coming and going
    # (CUDA's caching allocator); memlens's CPU file has none, so it gets no such curve.
    reserved = None
    if has_segment_events:
        reserved = np.empty(n + 1, dtype=np.int64)
        reserved[0] = reserved_end - int(seg_delta.sum()) if segments else 0
        np.cumsum(seg_delta, out=reserved[1:])
        reserved[1:] += reserved[0]
    categories = {}
    for c, name in enumerate(cat_names):
        curve = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(cat_delta[c], out=curve[1:])
        categories[name] = curve  # bytes added within the window, by category
    peak_index = int(np.argmax(allocated))
    top, live = _live_at(trace, peak_index, blocks)
    return SnapshotTimeline(path=path, device=device, actions=n, allocated=allocated,
                            reserved=reserved, categories=categories, peak_index=peak_index,
                            peak_bytes=int(allocated[peak_index]), top=top, live_at_peak=live)


def _min_prefix(delta: np.ndarray) -> int:
    return int(np.cumsum(delta).min()) if len(delta) else 0


def _live_at(trace: list[dict], index: int, blocks: list) -> tuple[list[LiveAllocation], int]:
    """The largest allocations alive after `index` events, and how many were alive."""
    live: dict[int, LiveAllocation] = {}
    for e in trace[:index]:
        action = e.get("action")
        addr = _int(e.get("addr", 0))
        if action == "alloc":
            live[addr] = LiveAllocation(_int(e.get("size", 0)), addr,
                                        str(e.get("category") or ""), _frames(e))
        elif action in ("free_completed", "free"):
            live.pop(addr, None)
    # Alive at the peak but allocated before the window: freed after the peak without an
    # alloc in the trace, or still alive at the end without one.
    allocated_in_window = {_int(e.get("addr", 0)) for e in trace if e.get("action") == "alloc"}
    for e in trace[index:]:
        addr = _int(e.get("addr", 0))
        if e.get("action") in ("free_completed", "free") and addr not in allocated_in_window \
                and addr not in live:
            live[addr] = LiveAllocation(_int(e.get("size", 0)), addr,
                                        str(e.get("category") or ""),
                                        [BEFORE_WINDOW, *_frames(e)])
    for addr, block, _segment in blocks:
        if addr not in allocated_in_window and addr not in live:
            live[addr] = LiveAllocation(_int(block.get("size", 0)), addr, "",
                                        [BEFORE_WINDOW, *_frames(block)])
    top = sorted(live.values(), key=lambda a: a.size, reverse=True)[:TOP_ALLOCATIONS]
    return top, len(live)

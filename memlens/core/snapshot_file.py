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
from typing import IO

import numpy as np

from memlens.core.excerpt import excerpt as _excerpt
from memlens.core.runfolder.format import SNAPSHOT_PICKLE
from memlens.core.safe_read import MAX_SNAPSHOT, FileReadError, open_checked
from memlens.core.snapshot_alive import ALLOC, BLOCK, FREE, AllocationSpans, pair_allocations

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


def load_plain_pickle(data: bytes | IO[bytes]) -> object:
    """Unpickle bytes (or a binary file, read as it goes) that may hold only plain
    containers and scalars."""
    try:
        return _PlainUnpickler(io.BytesIO(data) if isinstance(data, bytes) else data).load()
    except SnapshotFileError:
        raise
    except (Exception, RecursionError) as exc:  # no global runs: whatever broke is damage
        raise SnapshotFileError(f"not a readable pickle ({type(exc).__name__}: "
                                f"{_excerpt(exc)})") from None


@dataclass
class LiveAllocation:
    """One allocation alive at some event: its size, address, category and stack."""

    size: int
    addr: int
    category: str
    frames: list[str]  # "file:line name", newest first


@dataclass
class AliveAllocations:
    """What was alive after `index` events: the curve's bytes there, how many allocations,
    and the largest of them with their stacks."""

    index: int
    allocated: int
    count: int
    largest: list[LiveAllocation]


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
    spans: AllocationSpans | None = None  # every allocation's lifetime, for alive_at
    entries: tuple[list[dict], list[dict]] = ([], [])  # trace events, end blocks: stacks

    @property
    def x(self) -> np.ndarray:
        return np.arange(len(self.allocated), dtype=np.float64)

    @property
    def last_event(self) -> int:
        """The largest event index there is: 0 is before the first event, this after the
        last."""
        return len(self.allocated) - 1

    def alive_at(self, index: int, limit: int = TOP_ALLOCATIONS) -> AliveAllocations:
        """The allocations alive after `index` events (0..last_event), largest first; only
        the `limit` listed get their stacks read."""
        if not 0 <= index <= self.last_event:
            raise IndexError(f"event {index} is outside 0..{self.last_event}")
        alive = self.spans.alive_at(index, limit)
        trace, blocks = self.entries
        cache: dict[int, list[str]] = {}
        largest = []
        for i in alive.largest.tolist():
            source = int(self.spans.source[i])
            if source >= 0:
                entry, addr = trace[source], _int(trace[source].get("addr", 0))
            else:
                block = blocks[BLOCK - source]
                entry, addr = {"frames": block.get("frames")}, _int(block.get("address", 0))
            frames = _frames(entry, cache)
            largest.append(LiveAllocation(int(self.spans.size[i]), addr,
                                          _category(entry) or "",
                                          [BEFORE_WINDOW, *frames] if self.spans.before[i]
                                          else list(frames)))
        return AliveAllocations(index, int(self.allocated[index]), alive.count, largest)


def read_snapshot(path: str | Path) -> SnapshotTimeline:
    """Read and check a snapshot file; raises SnapshotFileError with the reason. The file
    must be a regular one of at most MAX_SNAPSHOT bytes, checked before it is read, and
    is unpickled as it is read (its bytes are never held whole)."""
    path = Path(path)
    try:
        with open_checked(path, MAX_SNAPSHOT, "a snapshot") as fh:
            doc = load_plain_pickle(fh)
    except FileReadError as exc:
        raise SnapshotFileError(str(exc)) from None
    except SnapshotFileError as exc:
        raise SnapshotFileError(f"{path}: {exc}") from None
    try:
        return timeline_of(doc, path)
    except SnapshotFileError as exc:
        raise SnapshotFileError(f"{path}: {exc}") from None
    except (ArithmeticError, LookupError, TypeError, ValueError, MemoryError,
            RecursionError) as exc:  # a shape timeline_of does not name: still one line
        raise SnapshotFileError(f"{path}: not a snapshot memlens can read "
                                f"({type(exc).__name__}); the file is damaged") from None


MAX_EVENTS = 5_000_000  # trace events read; a larger trace is refused with the count
MAX_BLOCKS = 5_000_000  # segment blocks read, over all segments
MAX_CATEGORIES = 12  # curves drawn, the largest by peak; the rest are summed as OTHER
OTHER_CATEGORY = "other"
MAX_FRAMES = 64  # frames kept of one allocation's stack (newest first)
MAX_TEXT = 300  # characters kept of one string from the file (a frame, a category)
# Bytes are int64 in the curves: sizes past MAX_SIZE, or sums past it, are no real memory.
MAX_SIZE = 2**62


def _text(value) -> str:
    """A string from the file, cut to MAX_TEXT characters (a file's text is never echoed
    beyond a short excerpt)."""
    if not isinstance(value, str):
        raise SnapshotFileError(f"a name is {_kind(value)}, not text")
    return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "…"


def _kind(value) -> str:
    """What a value is, in words (never its content: it may be huge)."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    return {dict: "a dict", list: "a list", tuple: "a tuple", str: "text",
            type(None): "None"}.get(type(value), type(value).__name__)


def _list(value, what: str) -> list | tuple:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise SnapshotFileError(f"{what} is {_kind(value)}, not a list")
    return value


def _frames(entry: dict, cache: dict[int, list[str]] | None = None) -> list[str]:
    """The entry's stack as "file:line name" lines, at most MAX_FRAMES; a frames list that
    many entries share (a pickle's memo) is read once, through `cache` (by its id)."""
    frames = entry.get("frames")
    key = id(frames)
    if cache is not None and key in cache:
        return cache[key]
    out = []
    for f in _list(frames, "an entry's frames")[:MAX_FRAMES]:
        if isinstance(f, dict):
            out.append(_text(f"{_scalar(f.get('filename', '?'))}:{_scalar(f.get('line', '?'))} "
                             f"{_scalar(f.get('name', ''))}"))
    if cache is not None:
        cache[key] = out
    return out


def _scalar(value) -> str:
    """A frame's field as text: a string cut short, a number, else its kind."""
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < MAX_SIZE:
        return str(value)
    return "?"


def _int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotFileError(f"a size or address is {_kind(value)}, not an integer")
    if not 0 <= value < MAX_SIZE:
        raise SnapshotFileError(f"a size or address is outside 0..2**62 ({_kind(value)} of "
                                f"{value.bit_length()} bits)")
    return value


def _action(e: dict) -> str | None:
    action = e.get("action")
    if action is not None and not isinstance(action, str):
        raise SnapshotFileError(f"an event's action is {_kind(action)}, not text")
    return action


def _category(e: dict) -> str | None:
    c = e.get("category")
    if isinstance(c, int) and not isinstance(c, bool) and c:
        return _scalar(c)
    return _text(c) if c else None


def _pick_device(traces: list) -> int:
    """The device whose trace has the most entries (one device in almost every file)."""
    best, most = 0, -1
    for i, t in enumerate(traces):
        if not isinstance(t, list):
            raise SnapshotFileError(f"device_traces[{i}] is {_kind(t)}, not a list of events")
        if len(t) > most:
            best, most = i, len(t)
    return best


def _checked_sum(values: np.ndarray, what: str) -> None:
    if float(np.abs(values).sum(dtype=np.float64)) >= MAX_SIZE:
        raise SnapshotFileError(f"the {what} sum past 2**62 bytes: no real memory is that "
                                "large; the file is damaged")


def _drawn_categories(trace: list[dict], delta: np.ndarray,
                      names: list[str | None]) -> dict[str, np.ndarray]:
    """Curves of bytes added within the window by category: the MAX_CATEGORIES largest by
    their peak, the rest summed as OTHER_CATEGORY (one curve each, never one per name)."""
    index: dict[str, int] = {}
    codes = np.full(len(trace), -1, dtype=np.int64)
    for i, name in enumerate(names):
        if name is not None and delta[i]:
            codes[i] = index.setdefault(name, len(index))
    if not index:
        return {}
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    bounds = np.searchsorted(sorted_codes, np.arange(len(index) + 1))
    peaks = np.zeros(len(index), dtype=np.int64)
    for c in range(len(index)):  # each event is visited once over all categories
        rows = order[bounds[c]:bounds[c + 1]]
        peaks[c] = np.cumsum(delta[rows]).max()
    kept = sorted(range(len(index)), key=lambda c: -peaks[c])[:MAX_CATEGORIES]
    by_code = {c: n for n, c in index.items()}
    curves: dict[str, np.ndarray] = {}
    for c in sorted(kept, key=lambda c: by_code[c]):
        curves[by_code[c]] = _curve(delta, codes == c)
    rest = (codes >= 0) & ~np.isin(codes, kept)
    if rest.any():
        curves[OTHER_CATEGORY if OTHER_CATEGORY not in curves else OTHER_CATEGORY + " (rest)"] \
            = _curve(delta, rest)
    return curves


def _curve(delta: np.ndarray, mask: np.ndarray) -> np.ndarray:
    curve = np.zeros(len(delta) + 1, dtype=np.int64)
    np.cumsum(np.where(mask, delta, 0), out=curve[1:])
    return curve


def timeline_of(doc: object, path: Path = Path(SNAPSHOT_PICKLE)) -> SnapshotTimeline:
    """The timeline of an unpickled snapshot dict (see read_snapshot)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("device_traces"), list):
        raise SnapshotFileError("not a memory snapshot: no device_traces. Write one with "
                                "torch.cuda.memory._dump_snapshot after "
                                "torch.cuda.memory._record_memory_history()")
    traces = doc["device_traces"]
    device = _pick_device(traces)
    raw = traces[device] if traces else []
    if len(raw) > MAX_EVENTS:
        raise SnapshotFileError(f"the trace holds {len(raw):,} events; memlens reads up to "
                                f"{MAX_EVENTS:,}. Record a shorter window "
                                "(_record_memory_history(max_entries=...))")
    _check_distinct(raw)
    trace = [e for e in raw if isinstance(e, dict)]
    segments = [s for s in _list(doc.get("segments"), "segments") if isinstance(s, dict)
                and s.get("device", device) == device]
    if not trace and not segments:
        raise SnapshotFileError("the snapshot holds no trace events and no segments: was "
                                "_record_memory_history on while the program ran?")
    n = len(trace)
    delta = np.zeros(n, dtype=np.int64)
    seg_delta = np.zeros(n, dtype=np.int64)
    kinds = np.zeros(n, dtype=np.int64)
    addrs = np.zeros(n, dtype=np.int64)
    names: list[str | None] = [None] * n
    has_segment_events = False
    for i, e in enumerate(trace):
        action = _action(e)
        size = _int(e.get("size", 0))
        sign = {"alloc": ALLOC, "free_completed": FREE, "free": FREE}.get(action, 0)
        if sign:
            kinds[i] = sign
            addrs[i] = _int(e.get("addr", 0))
            delta[i] = sign * size
            names[i] = _category(e)
        seg = {"segment_alloc": 1, "segment_free": -1,
               "segment_map": 1, "segment_unmap": -1}.get(action, 0)
        if seg:
            has_segment_events = True
            seg_delta[i] = seg * size
    _checked_sum(delta, "trace's sizes")
    _checked_sum(seg_delta, "trace's segment sizes")
    # A trace is a ring buffer: what was alive before its first event is known from the
    # end state (the segments' active blocks) less what the trace added.
    alive_end, reserved_end, blocks = _end_state(segments)
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
    categories = _drawn_categories(trace, delta, names)
    peak_index = int(np.argmax(allocated))
    end_blocks = [b for _addr, b, _segment in blocks]
    spans = pair_allocations(kinds, addrs, np.abs(delta),
                             np.array([a for a, _b, _s in blocks], dtype=np.int64),
                             np.array([_int(b.get("size", 0)) for b in end_blocks],
                                      dtype=np.int64))
    timeline = SnapshotTimeline(path=path, device=device, actions=n, allocated=allocated,
                                reserved=reserved, categories=categories,
                                peak_index=peak_index, peak_bytes=int(allocated[peak_index]),
                                spans=spans, entries=(trace, end_blocks))
    at_peak = timeline.alive_at(peak_index)
    timeline.top, timeline.live_at_peak = at_peak.largest, at_peak.count
    return timeline


def _check_distinct(events: list) -> None:
    """A recorded trace has an object of its own for each event. One repeated (a pickle's
    memo lets a small file list one event millions of times) is refused before any work
    is done per event: that work, not the file's size, is what such a file would cost."""
    if len(events) < 2:
        return
    ids = np.fromiter(map(id, events), dtype=np.int64, count=len(events))
    distinct = len(np.unique(ids))
    if distinct < len(events):
        raise SnapshotFileError(
            f"its trace lists {len(events):,} events but only {distinct:,} distinct ones: "
            "the others repeat an entry (a pickle's shared references), which no recording "
            "writes; refused before reading its events")


def _end_state(segments: list[dict]) -> tuple[int, int, list[tuple[int, dict, dict]]]:
    """Bytes alive and reserved at the snapshot's end, and the alive blocks (address, block,
    segment), from its segments."""
    alive_end = 0
    reserved_end = 0
    blocks: list[tuple[int, dict, dict]] = []
    visited = 0
    for s in segments:
        reserved_end += _int(s.get("total_size", 0))
        seg_blocks = _list(s.get("blocks"), "a segment's blocks")
        visited += len(seg_blocks)
        if visited > MAX_BLOCKS:
            raise SnapshotFileError(f"the segments hold more than {MAX_BLOCKS:,} blocks; "
                                    "memlens reads up to that many")
        for b in seg_blocks:
            # A block freed on its stream but not yet released still counts, as the
            # trace counts a free at free_completed.
            if isinstance(b, dict) and b.get("state") in ("active_allocated",
                                                          "active_pending_free"):
                alive_end += _int(b.get("size", 0))
                blocks.append((_int(b.get("address", 0)), b, s))
    if alive_end >= MAX_SIZE or reserved_end >= MAX_SIZE:
        raise SnapshotFileError("the segments' sizes sum past 2**62 bytes: no real memory "
                                "is that large; the file is damaged")
    return alive_end, reserved_end, blocks


def _min_prefix(delta: np.ndarray) -> int:
    return int(np.cumsum(delta).min()) if len(delta) else 0

"""The run folder's format, once: its file names, run.json's tag and the parts readers use,
the CSV headers, and the row codecs both ways (a record to text, text to the history's
numbers). The writer, the reader, the follower, the exports and the app's rows table all
take them from here.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from memlens.core.history import SAMPLE_COLUMNS, STEP_COLUMNS, spread_x
from memlens.core.native import loaded as loaded_native
from memlens.core.records import (
    FIRST_CATEGORIES,
    LATER_CATEGORIES,
    MEMORY_CATEGORIES,
    SAMPLE_PHASE_CODE,
    SAMPLE_PHASES,
    RunEvent,
)

# --- file names -------------------------------------------------------------------------------
STEPS_CSV = "steps.csv"
MEMORY_CSV = "memory.csv"
RUN_JSON = "run.json"
ALLOCATIONS_NPY = "allocations.npy"  # precise mode (runfolder.allocations)
FRAMES_JSONL = "allocation_frames.jsonl"
CUDA_SNAPSHOT = "cuda_snapshot.pickle"  # PyTorch's own recording (CUDA runs)
# What the exports write into a run's folder (memlens.core.exports)
SNAPSHOT_PICKLE = "snapshot.pickle"
TRACE_JSON = "trace.json"
TIMELINE_JSON = "memory_timeline.json"
ALLOCATIONS_CSV = "allocations.csv"
# Every file a run or its exports write into the run's folder. A folder holding any of them
# holds a run: writing another into it would mix the two (an old allocations.npy beside new
# steps) or truncate the old one's CSVs.
RUN_FILE_NAMES: tuple[str, ...] = (
    STEPS_CSV, MEMORY_CSV, RUN_JSON, ALLOCATIONS_NPY, FRAMES_JSONL, ALLOCATIONS_CSV,
    CUDA_SNAPSHOT, SNAPSHOT_PICKLE, TRACE_JSON, TIMELINE_JSON,
)

RUN_FORMAT = "memlens-run"
RUN_FORMAT_VERSION = 2

# --- CSV headers: the history's columns, with `_bytes` on memory figures (the unit) -----------
STEPS_HEADER: tuple[str, ...] = STEP_COLUMNS
MEMORY_HEADER: tuple[str, ...] = (
    "step", "phase", "time_s", *(f"{c}_bytes" for c in FIRST_CATEGORIES), "total_bytes",
    "allocated_bytes", "reserved_bytes", "heap_bytes", "rss_bytes",
    *(f"{c}_bytes" for c in LATER_CATEGORIES), "carried",
)
# Columns came later at the end: rss_bytes, then the sharded categories (gathered, buckets),
# then `carried` (a watch's steps without detail: core.watch.detail). A folder written
# before one has the header without it: rss read as NaN, a category as 0 (nothing was
# counted as it then), carried as 0 (every sample measured).
BEFORE_CARRIED_HEADER: tuple[str, ...] = MEMORY_HEADER[:-1]
BEFORE_SHARDED_HEADER: tuple[str, ...] = BEFORE_CARRIED_HEADER[: -len(LATER_CATEGORIES)]
OLD_MEMORY_HEADER: tuple[str, ...] = BEFORE_SHARDED_HEADER[:-1]  # before rss_bytes
OLDER_MEMORY_HEADERS = (BEFORE_CARRIED_HEADER, BEFORE_SHARDED_HEADER,
                        OLD_MEMORY_HEADER)  # newest first
# allocations.csv (an export made on request): precise mode's events as text
ACTIONS = ("alloc", "free")
ALLOC_HEADER: tuple[str, ...] = (
    "t_us", "action", "storage", "addr", "bytes", "category", "step", "phase", "frames",
)
INT_STEP_COLUMNS = frozenset({
    "step", "allocated_bytes", "peak_bytes", "reserved_bytes", "graph_nodes", "saved_bytes",
    "retained_bytes", "optimizer_stepped", "peak_is_exact"})


class RunFolderError(ValueError):
    """A run folder that cannot be read; the message says what is wrong with it."""


# --- writing: a record's values to text ---------------------------------------------------------
_STEP_AS_INT = tuple(c in INT_STEP_COLUMNS for c in STEP_COLUMNS)


def steps_row(values: Any) -> list[str]:
    """A row of STEP_COLUMNS values as steps.csv's cells: an integer column's as an integer,
    another's to 6 significant digits, a missing value (None, NaN) empty. (One comprehension,
    no call a cell: the writer's thread runs it for every step, and its Python holds the GIL
    the training thread waits for between kernels; see RunWriter.)"""
    return ["" if v is None or v != v else str(int(v)) if as_int else f"{v:.6g}"
            for v, as_int in zip(values, _STEP_AS_INT, strict=True)]


def memory_row(values: Any) -> list[str]:
    """A row of SAMPLE_COLUMNS values (step, phase code, x, time_s, categories, ...) as
    memory.csv's cells (x is not written: a reader spreads it again)."""
    step, phase, _x, time_s, *rest = values
    return [str(int(step)), SAMPLE_PHASES[int(phase)], f"{time_s:.6f}",
            *["" if v is None or v != v else str(int(v)) for v in rest]]


# The row codecs above as the native format_rows' column kinds (core/native/csv_rows.h)
_STEP_KINDS = "".join("i" if as_int else "g" for as_int in _STEP_AS_INT)
_MEMORY_KINDS = "ip-f" + "i" * (len(SAMPLE_COLUMNS) - 4)


def steps_text(rows: list) -> str:
    """STEP_COLUMNS value rows as steps.csv's lines (steps_row's cells, "\r\n" after each,
    as the csv module writes them)."""
    return _lines(rows, _STEP_KINDS, (), steps_row)


def memory_text(rows: list) -> str:
    """SAMPLE_COLUMNS value rows as memory.csv's lines (memory_row's cells)."""
    return _lines(rows, _MEMORY_KINDS, SAMPLE_PHASES, memory_row)


def _lines(rows: list, kinds: str, names: tuple[str, ...], cells) -> str:
    """The rows' lines, formatted by the native helpers without the GIL where they are loaded
    and read every value (a run's writer thread: its Python is the training thread's time,
    see RunWriter), else by the row codec, which is the definition (the two agree cell for
    cell: tests/core/test_csv_rows.py)."""
    native = loaded_native()
    text = native.format_rows(rows, kinds, names) if native is not None else None
    if text is None:
        text = "".join([",".join(cells(r)) + "\r\n" for r in rows])
    return text


def alloc_row(values: Any, frames: str) -> list[str]:
    """An alloc/free row (ALLOC_COLUMNS values) and its stack's text as allocations.csv's
    cells."""
    t_us, action, storage, addr, nbytes, category, step, phase, *_ = values
    return [str(int(t_us)), ACTIONS[int(action)], str(int(storage)), str(int(addr)),
            str(int(nbytes)), MEMORY_CATEGORIES[int(category)], str(int(step)),
            SAMPLE_PHASES[int(phase)], frames]


def graph_summary(snapshot) -> dict[str, int]:
    """What run.json keeps of a graph capture."""
    return {"step": snapshot.step, "nodes": len(snapshot.nodes),
            "saved_bytes": snapshot.saved_bytes}


# --- reading: text to the history's numbers ----------------------------------------------------
def number(text: str) -> float:
    """A cell as a float; an empty cell is no value (NaN)."""
    return math.nan if text == "" else float(text)


def steps_table(rows: list[list[str]], path: Path, first_line: int = 2) -> np.ndarray:
    """steps.csv's rows (cells) as STEP_COLUMNS numbers. Rows shorter than the header (a
    torn last line) are left out; a cell that is not a number is a RunFolderError naming
    its line (`first_line`: the file's line of rows[0])."""
    n = len(STEPS_HEADER)
    out = np.empty((len(rows), n), dtype=np.float64)
    kept = 0
    for i, r in enumerate(rows):
        if len(r) < n:
            continue
        try:
            out[kept] = [number(v) for v in r[:n]]
        except ValueError:
            raise RunFolderError(f"{path}: line {first_line + i}: a value is not a number; "
                                 "the file is damaged") from None
        kept += 1
    return out[:kept]


def memory_header_of(got: Any) -> tuple[str, ...] | None:
    """The memory.csv header a file's first row starts with (today's or an older one), or
    None for none of them."""
    for header in (MEMORY_HEADER, *OLDER_MEMORY_HEADERS):
        if tuple(got[: len(header)]) == header:
            return header
    return None


def memory_table(rows: list[list[str]], path: Path, first_line: int = 2,
                 header: tuple[str, ...] = MEMORY_HEADER) -> np.ndarray:
    """memory.csv's rows (cells) as SAMPLE_COLUMNS numbers, x spread as the writer placed
    them; columns `header` lacks (an older file's) are NaN. Short rows are left out; a bad
    cell or an unknown phase is a RunFolderError naming its line."""
    width = len(header)
    absent = _absent(width)
    out = np.empty((len(rows), len(SAMPLE_COLUMNS)), dtype=np.float64)
    kept = 0
    for i, r in enumerate(rows):
        if len(r) < width:
            continue
        step, phase, time_s, *rest = r[:width]
        try:
            out[kept] = (int(step), SAMPLE_PHASE_CODE[phase], 0.0, float(time_s),
                         *(number(v) for v in rest), *absent)
        except (ValueError, KeyError, OverflowError):
            raise RunFolderError(f"{path}: line {first_line + i} is not valid (a value is not "
                                 "a number, or the phase is unknown); the file is damaged"
                                 ) from None
        kept += 1
    out = out[:kept]
    out[:, 2] = spread_x(out[:, 0], out[:, 1])
    return out


def parse_numbers(data: bytes, header: tuple[str, ...], phase_column: int | None = None
                  ) -> np.ndarray | None:
    """A whole CSV file's complete rows parsed by numpy in one pass (a 100,000-step run's
    memory.csv in well under a second, where row by row took seconds), or None when
    anything is unusual (quoting, a bad value, a short row), for the row-by-row codecs
    above to deal with and name. `phase_column`: the column holding phase names."""
    first = data.find(b"\n")
    if first < 0:
        return None
    got = data[:first].decode("utf-8", "replace").removeprefix("\ufeff").strip().split(",")
    if tuple(got[: len(header)]) != header:
        return None
    body = data[first + 1 : data.rfind(b"\n") + 1]  # a torn last line is left out
    if b'"' in body:
        return None
    if phase_column is not None:  # "12,forward,..." -> "12,2,...": the phase is column 1
        for name, code in SAMPLE_PHASE_CODE.items():
            body = body.replace(f",{name},".encode(), f",{code},".encode())
    body = body.replace(b"\r\n", b"\n").replace(b"\n", b",\n")
    for _ in range(2):  # empty cells (no value: NaN), also two in a row
        body = body.replace(b",,", b",nan,")
    lines = body.count(b"\n")
    with warnings.catch_warnings():  # numpy warns, then stops, at text it cannot parse
        warnings.simplefilter("error", DeprecationWarning)
        try:
            values = np.fromstring(body.replace(b",\n", b","), dtype=np.float64, sep=",")
        except (DeprecationWarning, ValueError):
            return None
    if len(values) != lines * len(got):
        return None
    return values.reshape(lines, len(got))[:, : len(header)]


def _absent(width: int) -> tuple[float, ...]:
    """The values of the columns a memory.csv header of `width` columns lacks (an older
    file's): a category held nothing then (0), another figure was not read (NaN)."""
    return tuple(0.0 if name.removesuffix("_bytes") in (*LATER_CATEGORIES, "carried")
                 else math.nan for name in MEMORY_HEADER[width:])


def memory_from_numbers(fast: np.ndarray) -> np.ndarray:
    """parse_numbers' memory.csv table (step, phase code, time_s, ...) laid out as
    SAMPLE_COLUMNS, x spread; the columns an older file lacks as _absent says."""
    out = np.empty((len(fast), len(SAMPLE_COLUMNS)), dtype=np.float64)
    out[:, :2] = fast[:, :2]
    out[:, 2] = spread_x(fast[:, 0], fast[:, 1])
    out[:, 3 : 1 + fast.shape[1]] = fast[:, 2:]
    out[:, 1 + fast.shape[1]:] = _absent(fast.shape[1])
    return out


def header_problem(path: Path, got: tuple[str, ...], header: tuple[str, ...]) -> str:
    """What is wrong with a CSV's header, in memlens's words: the expected columns are listed
    once, and nothing of the file's own text is repeated (it may not be ours: a link)."""
    expected = ", ".join(header)
    if 0 < len(got) < len(header) and got[:-1] == header[: len(got) - 1] \
            and header[len(got) - 1].startswith(got[-1]):
        return (f"{path}: the header is cut short after {len(got)} of {len(header)} "
                f"columns; expected: {expected}")
    return f"{path}: the first line is not a {path.name} header; expected the columns: {expected}"


# --- run.json: the parts readers use -----------------------------------------------------------
# The keys readers use, with the JSON type each must have when present.
_DOC_TYPES: dict[str, tuple[type, ...]] = {
    "config": (dict, type(None)), "environment": (dict,), "schedule": (list,),
    "events": (list,),
    "graphs": (list,), "summary": (dict, type(None)), "allocations": (dict,),
    "cuda_snapshot": (dict,),
}
_JSON_NAMES = {dict: "an object", list: "a list", str: "text", type(None): "null",
               bool: "true/false", int: "a whole number", float: "a number"}
_EVENT_TEXT = ("kind", "key", "phase", "message", "explanation", "where", "fix")
_EVENT_FIELDS = frozenset(RunEvent.__dataclass_fields__)  # others (a newer writer's) dropped
_NOT_META = ("events", "summary", "graphs")


MAX_JSON_TEXT = 4096  # characters kept of one string in run.json; the rest is cut on load
# (safe_read.parse_json: a damaged file's 50 MB string must not reach a label or a layout)


def is_run_doc(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("format") == RUN_FORMAT


def meta_of(doc: dict) -> dict:
    """What a history keeps as its meta: run.json without its events, summary and graphs."""
    return {k: v for k, v in doc.items() if k not in _NOT_META}


def check_run_doc(doc: dict, path: Path) -> list[RunEvent]:
    """run.json's parts that readers use have the types they expect; its events as RunEvents.
    RunFolderError names the part and what it should be, never the file's content."""
    for key, types in _DOC_TYPES.items():
        if key in doc and not isinstance(doc[key], types):
            want = " or ".join(_JSON_NAMES[t] for t in types)
            raise RunFolderError(f"{path}: {key!r} should be {want}, not "
                                 f"{_json_kind(doc[key])}; the file is damaged")
    for part, types in (("config", _config_types()), ("environment", ENVIRONMENT_TYPES)):
        for key, value in (doc.get(part) or {}).items():
            want = types.get(key)
            if want is not None and not _is_json_type(value, want):
                raise RunFolderError(f"{path}: '{part}.{key}' should be "
                                     f"{_JSON_NAMES.get(want, want.__name__)}, not "
                                     f"{_json_kind(value)}; the file is damaged")
    events = []
    for i, e in enumerate(doc.get("events") or ()):
        bad = _event_problem(e)
        if bad:
            raise RunFolderError(f"{path}: event {i}: {bad}; the file is damaged")
        events.append(RunEvent(**{k: v for k, v in e.items() if k in _EVENT_FIELDS}))
    for i, g in enumerate(doc.get("graphs") or ()):
        if not isinstance(g, dict):
            raise RunFolderError(f"{path}: graph {i} should be an object, not "
                                 f"{_json_kind(g)}; the file is damaged")
    return events


# The types of run.json's environment keys, as the recorder writes them (recorder.environment).
ENVIRONMENT_TYPES: dict[str, type] = {
    **dict.fromkeys(("torch", "python", "platform", "device", "device_name", "memory_source",
                     "memory_label", "timing", "precise_backend", "precise_note",
                     "heap_source"), str),
    "precise": bool, "parameters": int, "threads": int, "sizes": dict, "cpu": dict,
}


def _config_types() -> dict[str, type]:
    """run.json's config keys and their types: those of RunConfig's own to_dict()."""
    from memlens.core.config import RunConfig

    return {k: type(v) for k, v in RunConfig().to_dict().items()}


def _is_json_type(value: Any, want: type) -> bool:
    if want is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _event_problem(e: Any) -> str:
    if not isinstance(e, dict):
        return f"should be an object, not {_json_kind(e)}"
    for name in ("step", "time_s", "kind"):
        if name not in e:
            return f"no {name!r}"
    step = e["step"]
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**53:
        return "'step' should be a whole number >= 0"
    t = e["time_s"]
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        return "'time_s' should be a number of seconds"
    for name in _EVENT_TEXT:
        if name in e and not isinstance(e[name], str):
            return f"{name!r} should be text, not {_json_kind(e[name])}"
    for name in ("old", "new"):
        if isinstance(e.get(name), dict | list):
            return f"{name!r} should be a single value, not {_json_kind(e[name])}"
    if "bytes" in e and e["bytes"] is not None and (
            isinstance(e["bytes"], bool) or not isinstance(e["bytes"], int)):
        return "'bytes' should be a whole number"
    return ""

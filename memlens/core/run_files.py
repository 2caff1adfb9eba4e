"""A run folder on disk: steps.csv, memory.csv, run.json (and allocations.npy when precise).

RunWriter streams rows as the loop makes them, flushing each, so a crash keeps what was
measured; `write_history` writes the same files from a RunHistory; `export_run_files` (the
app's Export) copies the files a run streamed where they hold what the history holds, and
writes only the others; `load_run` reads a folder back into a RunHistory with clear errors
for bad or partial folders (also an older folder with allocations.csv).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from memlens.core.allocations_file import (
    ACTIONS,
    ALLOCATIONS_NPY,
    FRAMES_JSONL,
    HEADER_BYTES,
    AllocationsFileError,
    AllocationsStream,
    header_rows,
    load_allocations,
    read_frames,
    records,
    write_allocations,
)
from memlens.core.allocations_file import describe as describe_allocations
from memlens.core.atomic import ExportError, atomic_open, atomic_write_bytes, atomic_write_text
from memlens.core.effects import events_with_effects
from memlens.core.history import (
    ALLOC_COLUMNS,
    LEGACY_STEP_COLUMNS,
    SAMPLE_COLUMNS,
    STEP_COLUMNS,
    RunHistory,
    sample_values,
    sample_x,
    spread_x,
    step_values,
)
from memlens.core.records import MEMORY_CATEGORIES, PHASE_CODE, SAMPLE_PHASES, RunEvent

STEPS_CSV = "steps.csv"
MEMORY_CSV = "memory.csv"
RUN_JSON = "run.json"
ALLOCATIONS_CSV = "allocations.csv"  # an export made on request; version 1 run folders
CUDA_SNAPSHOT = "cuda_snapshot.pickle"  # PyTorch's own recording (CUDA runs)
RUN_FORMAT = "memlens-run"
RUN_FORMAT_VERSION = 2  # 2: allocations.npy + allocation_frames.jsonl, not allocations.csv

# File columns: the history's, with `_bytes` on memory figures so a reader knows the unit.
STEPS_HEADER: tuple[str, ...] = STEP_COLUMNS
MEMORY_HEADER: tuple[str, ...] = (
    "step", "phase", "time_s", *(f"{c}_bytes" for c in MEMORY_CATEGORIES), "total_bytes",
    "allocated_bytes", "reserved_bytes", "heap_bytes",
)
# memory.csv as runs wrote it before the buffers, amp_casts and temporaries columns.
_LEGACY_CATEGORIES = MEMORY_CATEGORIES[:5]
LEGACY_MEMORY_HEADER: tuple[str, ...] = (
    "step", "phase", "time_s", *(f"{c}_bytes" for c in _LEGACY_CATEGORIES), "total_bytes",
    "allocated_bytes", "reserved_bytes", "heap_bytes",
)
ALLOC_HEADER: tuple[str, ...] = (
    "t_us", "action", "storage", "addr", "bytes", "category", "step", "phase", "frames",
)
_INT_STEP_COLS = {"step", "allocated_bytes", "peak_bytes", "reserved_bytes", "graph_nodes",
                  "saved_bytes", "retained_bytes", "optimizer_stepped", "peak_is_exact"}
_ACTIONS = ACTIONS


def _cell(value: float, as_int: bool) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if as_int:
        return str(int(value))
    return f"{value:.6g}"


def steps_row(values: Any) -> list[str]:
    return [_cell(v, c in _INT_STEP_COLS) for c, v in zip(STEP_COLUMNS, values, strict=True)]


def memory_row(values: Any) -> list[str]:
    # values in SAMPLE_COLUMNS order: step, phase code, x, time_s, categories..., total, ...
    # _cell(v, True) inlined: a watch writes a row for every phase edge of the user's loop
    step, phase, _x, time_s, *rest = values
    return [str(int(step)), SAMPLE_PHASES[int(phase)], f"{time_s:.6f}",
            *["" if v is None or v != v else str(int(v)) for v in rest]]


def alloc_row(values: Any, frames: str) -> list[str]:
    t_us, action, storage, addr, nbytes, category, step, phase, *_ = values
    return [str(int(t_us)), _ACTIONS[int(action)], str(int(storage)), str(int(addr)),
            str(int(nbytes)), MEMORY_CATEGORIES[int(category)], str(int(step)),
            SAMPLE_PHASES[int(phase)], frames]


def graph_summary(snapshot) -> dict[str, int]:
    """What run.json keeps of a graph capture."""
    return {"step": snapshot.step, "nodes": len(snapshot.nodes),
            "saved_bytes": snapshot.saved_bytes}


class RunWriter:
    """A run sink that writes the run folder as the run goes."""

    def __init__(self, folder: str | Path, precise: bool = False,
                 meta: dict | None = None, history: RunHistory | None = None) -> None:
        """`meta` (e.g. `{"config": ...}`) goes into a preliminary run.json written at once,
        with the CSV headers: a run killed while it allocates still leaves a run folder
        that says what was asked for. `history`: the run's history, fed before this writer
        (a FanOut's earlier sink): run.json's toggle events then carry their effect
        (memlens.core.effects), as measured so far."""
        self.folder = Path(folder)
        self._history = history
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._steps_fh = open(self.folder / STEPS_CSV, "w", newline="", encoding="utf-8")  # noqa: SIM115
            self._mem_fh = open(self.folder / MEMORY_CSV, "w", newline="", encoding="utf-8")  # noqa: SIM115
            self._allocs = AllocationsStream(self.folder) if precise else None
        except OSError as exc:
            raise ExportError(
                f"cannot write the run folder {str(self.folder)!r}: {exc.strerror or exc}. "
                "Pass --out with a folder you can write to."
            ) from exc
        self._steps = csv.writer(self._steps_fh)
        self._mem = csv.writer(self._mem_fh)
        self._steps.writerow(STEPS_HEADER)
        self._mem.writerow(MEMORY_HEADER)
        self._doc: dict[str, Any] = {"format": RUN_FORMAT, "version": RUN_FORMAT_VERSION,
                                     "events": [], "graphs": [], "summary": None}
        if precise:
            self._doc["allocations"] = describe_allocations()
        self._last_json = 0.0
        self._doc.update(meta or {})
        try:
            self._steps_fh.flush()
            self._mem_fh.flush()
            self._write_json()
        except OSError as exc:
            self.close()
            raise ExportError(
                f"cannot write the run folder {str(self.folder)!r}: {exc.strerror or exc}. "
                "Pass --out with a folder you can write to."
            ) from exc

    # --- sink -----------------------------------------------------------------------------
    def on_start(self, meta: dict) -> None:
        self._doc.update(meta)
        self._write_json()

    def on_sample(self, sample) -> None:
        self._mem.writerow(memory_row(sample_values(sample)))
        self._mem_fh.flush()

    def on_samples(self, samples: list) -> None:
        """Several samples (a step's, written with its row): one flush."""
        self._mem.writerows([memory_row(sample_values(x)) for x in samples])
        self._mem_fh.flush()

    def on_step(self, record) -> None:
        self._steps.writerow(steps_row(step_values(record)))
        self._steps_fh.flush()
        if time.monotonic() - self._last_json > 2.0:
            self._write_json()

    def on_steps(self, rows: list[tuple[Any, list]]) -> None:
        """Several steps, each (record, its samples): the samples first, then the rows, one
        flush a file (a follower that reads a step's row finds its samples)."""
        self.on_samples([x for _, samples in rows for x in samples])
        self._steps.writerows([steps_row(step_values(record)) for record, _ in rows])
        self._steps_fh.flush()
        if time.monotonic() - self._last_json > 2.0:
            self._write_json()

    def on_allocations(self, rows: list[tuple]) -> None:
        if self._allocs is not None:
            self._allocs.append(rows)

    def on_cuda_snapshot(self, recorder) -> None:
        """CUDA: PyTorch's own allocator history for the chosen window of steps."""
        try:
            path = recorder.dump(self.folder / CUDA_SNAPSHOT)
            self._doc["cuda_snapshot"] = {"file": path.name,
                                          "steps": list(recorder.steps_recorded)}
        except OSError as exc:  # ExportError: a message, not a crash; the run data stays
            self._doc["cuda_snapshot"] = {"error": str(exc)}

    def on_event(self, event: RunEvent) -> None:
        self._doc["events"].append(event.to_dict())
        self._write_json()

    def on_graph(self, snapshot) -> None:
        self.on_graph_summary(graph_summary(snapshot))

    def on_graph_summary(self, summary: dict[str, int]) -> None:
        """What run.json keeps of a capture (graph_summary), without the snapshot: a writer
        on another thread must not hold a snapshot's graph (core.watch.writes)."""
        self._doc["graphs"].append(summary)

    def on_finish(self, summary: dict) -> None:
        self._doc["summary"] = summary
        self._write_json()
        self.close()

    # --- helpers --------------------------------------------------------------------------
    def _write_json(self) -> None:
        self._last_json = time.monotonic()
        if self._history is not None and any(e.get("kind") == "toggle"
                                             for e in self._doc["events"]):
            effects = events_with_effects(self._history)
            if len(effects) == len(self._doc["events"]):
                self._doc["events"] = effects
        atomic_write_text(self.folder / RUN_JSON, json.dumps(self._doc, indent=1, default=str))

    def close(self) -> None:
        for fh in (self._steps_fh, self._mem_fh):
            if not fh.closed:
                fh.close()
        if self._allocs is not None:
            self._allocs.close()


def write_history(history: RunHistory, folder: str | Path) -> list[Path]:
    """Write a history's run files (the same formats RunWriter streams), atomically."""
    folder = Path(folder)
    written = [_write_csv(folder / STEPS_CSV, STEPS_HEADER, map(steps_row, history.steps.rows())),
               _write_csv(folder / MEMORY_CSV, MEMORY_HEADER,
                          map(memory_row, history.samples.rows()))]
    if len(history.allocs):
        written += write_allocations(history, folder)
    written.append(_write_run_json(history, folder))
    return written


def _write_csv(path: Path, header: tuple[str, ...], rows) -> Path:
    with atomic_open(path) as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def _write_run_json(history: RunHistory, folder: Path) -> Path:
    doc = {"format": RUN_FORMAT, **history.meta, "version": RUN_FORMAT_VERSION,
           "events": events_with_effects(history),
           "graphs": [graph_summary(g) for g in history.graphs],
           "summary": history.summary}
    doc.pop("allocations", None)
    if len(history.allocs):
        doc["allocations"] = describe_allocations()
    atomic_write_text(folder / RUN_JSON, json.dumps(doc, indent=1, default=str))
    return folder / RUN_JSON


# --- Export's run files: copy what the run streamed ------------------------------------------


class _Mismatch(Exception):
    """A file in the run's folder does not hold what the history holds."""


def export_run_files(history: RunHistory, folder: str | Path, source: str | Path | None = None,
                     copied: list[str] | None = None) -> list[Path]:
    """The run files of `history` in `folder`, as write_history writes them.

    `source` is the folder the run streamed its files into (or was loaded from). A file
    there that holds exactly what the history holds (same rows, header and last row; for
    run.json a finished run's same summary and events) is copied byte for byte: the rows
    are not formatted a second time. Any other file (a run still going, a writer that
    stopped on a full disk, a torn last line) is written from the history. The names of the
    copied files go into `copied` when it is given.
    """
    folder = Path(folder)
    src = Path(source) if source is not None else None
    if src is not None and not src.is_dir():
        src = None
    same = src is not None and folder.is_dir() and os.path.samefile(src, folder)
    written: list[Path] = []

    def attempt(names: list[str], copy, write) -> None:
        if src is not None:
            try:
                written.extend(copy(src, folder, history, same))
                if copied is not None:
                    copied.extend(names)
                return
            except ExportError:  # the destination failed: writing would fail the same way
                raise
            except (OSError, ValueError, _Mismatch):
                pass
        written.extend(write())

    attempt([STEPS_CSV], _csv_copier(STEPS_CSV, STEPS_HEADER, lambda h: h.steps, steps_row),
            lambda: [_write_csv(folder / STEPS_CSV, STEPS_HEADER,
                                map(steps_row, history.steps.rows()))])
    attempt([MEMORY_CSV],
            _csv_copier(MEMORY_CSV, MEMORY_HEADER, lambda h: h.samples, memory_row),
            lambda: [_write_csv(folder / MEMORY_CSV, MEMORY_HEADER,
                                map(memory_row, history.samples.rows()))])
    if len(history.allocs):
        attempt([ALLOCATIONS_NPY, FRAMES_JSONL], _copy_allocations,
                lambda: write_allocations(history, folder))
    attempt([RUN_JSON], _copy_run_json, lambda: [_write_run_json(history, folder)])
    return written


def _csv_copier(name: str, header: tuple[str, ...], table_of, row_of):
    def copy(src: Path, folder: Path, history: RunHistory, same: bool) -> list[Path]:
        data = (src / name).read_bytes()
        table = table_of(history)
        n = len(table)
        text = io.StringIO(newline="")
        w = csv.writer(text)
        w.writerow(header)
        head = text.getvalue().encode()
        if n:
            text.seek(0)
            text.truncate()
            w.writerow(row_of(table.rows(n - 1)[0]))
        last = text.getvalue().encode()
        if not (data.startswith(head) and data.endswith(last)
                and data.count(b"\n") == n + 1):
            raise _Mismatch(name)
        if not same:
            atomic_write_bytes(folder / name, data)
        return [folder / name]

    return copy


def _copy_allocations(src: Path, folder: Path, history: RunHistory, same: bool) -> list[Path]:
    frames_bytes = (src / FRAMES_JSONL).read_bytes()
    if read_frames(src / FRAMES_JSONL) != history.frames:
        raise _Mismatch(FRAMES_JSONL)
    n = len(history.allocs)
    last = records(history.allocs.rows(n - 1)).tobytes()
    size = HEADER_BYTES + n * len(last)

    def check(fd: int) -> None:
        if (os.fstat(fd).st_size != size or header_rows(os.pread(fd, HEADER_BYTES, 0)) != n
                or os.pread(fd, len(last), size - len(last)) != last):
            raise _Mismatch(ALLOCATIONS_NPY)

    with open(src / ALLOCATIONS_NPY, "rb") as inp:
        if same:
            check(inp.fileno())
        else:
            with atomic_open(folder / ALLOCATIONS_NPY, "wb") as out:
                out.flush()
                offset, end = 0, os.fstat(inp.fileno()).st_size
                while offset < end:
                    sent = os.sendfile(out.fileno(), inp.fileno(), offset, end - offset)
                    if not sent:
                        break
                    offset += sent
                check(out.fileno())
            atomic_write_bytes(folder / FRAMES_JSONL, frames_bytes)
    return [folder / ALLOCATIONS_NPY, folder / FRAMES_JSONL]


def _copy_run_json(src: Path, folder: Path, history: RunHistory, same: bool) -> list[Path]:
    data = (src / RUN_JSON).read_bytes()
    doc = json.loads(data)
    summary = json.loads(json.dumps(history.summary, default=str))
    if (not isinstance(doc, dict) or doc.get("summary") is None or doc["summary"] != summary
            or len(doc.get("events") or ()) != history.event_count
            or doc.get("version") != RUN_FORMAT_VERSION):
        raise _Mismatch(RUN_JSON)
    out = [folder / RUN_JSON]
    cuda = Path(str((doc.get("cuda_snapshot") or {}).get("file") or "")).name  # in the folder
    if cuda and (src / cuda).is_file():
        if not same:
            atomic_write_bytes(folder / cuda, (src / cuda).read_bytes())
        out.append(folder / cuda)
    if not same:
        atomic_write_bytes(folder / RUN_JSON, data)
    return out


class RunFolderError(ValueError):
    """A run folder that cannot be read; the message says what is wrong with it."""


# run.json's keys that readers use, with the JSON type each must have when present.
_DOC_TYPES: dict[str, tuple[type, ...]] = {
    "config": (dict,), "environment": (dict,), "schedule": (list,), "events": (list,),
    "graphs": (list,), "summary": (dict, type(None)), "allocations": (dict,),
    "cuda_snapshot": (dict,),
}
_JSON_NAMES = {dict: "an object", list: "a list", str: "text", type(None): "null"}
_EVENT_TEXT = ("kind", "key", "phase", "message", "explanation")
_EVENT_FIELDS = frozenset(RunEvent.__dataclass_fields__)  # others (a newer writer's) dropped


def check_run_doc(doc: dict, path: Path) -> list[RunEvent]:
    """run.json's parts that readers use have the types they expect; its events as RunEvents.
    RunFolderError names the part and what it should be, never the file's content."""
    for key, types in _DOC_TYPES.items():
        if key in doc and not isinstance(doc[key], types):
            want = " or ".join(_JSON_NAMES[t] for t in types)
            raise RunFolderError(f"{path}: {key!r} should be {want}, not "
                                 f"{_json_kind(doc[key])}; the file is damaged")
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
    return ""


def rank_folders(folder: str | Path) -> list[Path]:
    """The per-rank run folders (rank0, rank1, ...) of a distributed watch's parent folder,
    in rank order; [] for a folder that is a run itself or holds no rank folders."""
    folder = Path(folder)
    if (folder / RUN_JSON).exists():
        return []
    try:
        found = [(int(p.name[4:]), p) for p in folder.iterdir()
                 if p.name.startswith("rank") and p.name[4:].isdigit() and p.is_dir()
                 and (p / RUN_JSON).exists()]
    except OSError:
        return []
    return [p for _rank, p in sorted(found)]


def load_run(folder: str | Path) -> RunHistory:
    """Read a run folder written by RunWriter or write_history into a RunHistory.

    A partial folder (a run that crashed) loads what is complete: a torn last CSV line is
    dropped, and allocations.npy gives the rows its header counts. A folder that is not a
    run, or a damaged file, raises RunFolderError with the reason.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise RunFolderError(f"{str(folder)!r} is not a folder; choose a run folder")
    missing = [n for n in (STEPS_CSV, MEMORY_CSV, RUN_JSON) if not (folder / n).is_file()]
    if missing:
        raise RunFolderError(
            f"{str(folder)!r} is not a memlens run folder: {', '.join(missing)} missing. "
            "A run folder holds steps.csv, memory.csv and run.json."
        )
    try:
        doc = json.loads((folder / RUN_JSON).read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunFolderError(f"{folder / RUN_JSON}: not readable JSON ({exc})") from None
    except RecursionError:
        raise RunFolderError(f"{folder / RUN_JSON}: nested too deeply to be a run.json; "
                             "the file is damaged") from None
    if not isinstance(doc, dict) or doc.get("format") != RUN_FORMAT:
        raise RunFolderError(f"{folder / RUN_JSON}: not a memlens run.json (no format tag)")
    events = check_run_doc(doc, folder / RUN_JSON)
    history = RunHistory()
    history.meta = {k: v for k, v in doc.items() if k not in ("events", "summary", "graphs")}
    history.summary = doc.get("summary")
    for e in events:
        history.on_event(e)
    history.steps.extend(_read_steps(folder / STEPS_CSV))
    history.samples.extend(_read_memory(folder / MEMORY_CSV))
    if (folder / ALLOCATIONS_NPY).is_file():
        try:
            load_allocations(folder, history)
        except AllocationsFileError as exc:
            raise RunFolderError(str(exc)) from None
    elif (folder / ALLOCATIONS_CSV).is_file():  # a version 1 folder
        _read_allocs(folder / ALLOCATIONS_CSV, history)
    return history


def _read_csv(path: Path, header: tuple[str, ...]) -> list[list[str]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # -sig: a BOM is dropped
            rows = list(csv.reader(fh))
    except UnicodeDecodeError:
        raise RunFolderError(f"{path}: not UTF-8 text; the file is damaged") from None
    except csv.Error:
        raise RunFolderError(f"{path}: not CSV text; the file is damaged") from None
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not rows:
        raise RunFolderError(f"{path}: empty file, no header")
    got = tuple(rows[0])
    if got[: len(header)] != header:
        raise RunFolderError(header_problem(path, got, header))
    body = rows[1:]
    # A crash mid-write can leave a torn last line: keep only complete rows.
    while body and len(body[-1]) != len(got):
        body.pop()
    return body


def header_problem(path: Path, got: tuple[str, ...], header: tuple[str, ...]) -> str:
    """What is wrong with a CSV's header, in memlens's words: the expected columns are listed
    once, and nothing of the file's own text is repeated (it may not be ours: a link)."""
    expected = ", ".join(header)
    if 0 < len(got) < len(header) and got[:-1] == header[: len(got) - 1] \
            and header[len(got) - 1].startswith(got[-1]):
        return (f"{path}: the header is cut short after {len(got)} of {len(header)} "
                f"columns; expected: {expected}")
    return f"{path}: the first line is not a {path.name} header; expected the columns: {expected}"


def _read_numbers(path: Path, header: tuple[str, ...], phase_column: int | None = None
                  ) -> np.ndarray | None:
    """The file's complete rows, parsed by numpy in one pass (a 100,000-step run's
    memory.csv in well under a second, where row by row took seconds), or None when
    anything is unusual (quoting, a bad value, a short row), for the row-by-row reader to
    deal with and name."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
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
        for name, code in PHASE_CODE.items():
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


def _float(text: str) -> float:
    return math.nan if text == "" else float(text)


# Whole numbers (steps, bytes, counts) are exact in a float64 below 2**53; a larger, an
# infinite or (where a value is required) a missing one is damage, not a measurement.
_WHOLE_LIMIT = 2.0**53
_TIME_LIMIT_S = 1e9  # seconds or milliseconds: a run's times are far below this


def _check_values(path: Path, table: np.ndarray, columns: tuple[str, ...],
                  whole: set[str], required: set[str], times: set[str]) -> np.ndarray:
    """RunFolderError naming the first bad value's line in the file and its column; the
    table itself when every value is one a run could have written."""
    for j, name in enumerate(columns):
        col = table[:, j]
        missing = np.isnan(col)
        if name in whole:
            bad = ~missing & ((np.abs(col) >= _WHOLE_LIMIT) | (col != np.floor(col)))
            what = "a whole number"
        elif name in times:
            bad = ~missing & ~(np.abs(col) < _TIME_LIMIT_S)
            what = "a time"
        else:
            continue
        if name in required:
            bad |= missing
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise RunFolderError(f"{path}: line {i + 2}, column {name!r}: not {what} "
                                 f"({_describe(col[i])}); the file is damaged")
    return table


def _describe(value: float) -> str:
    if math.isnan(value):
        return "empty"
    if math.isinf(value):
        return "infinite"
    return "too large" if abs(value) >= _WHOLE_LIMIT else "has a fraction"


_STEP_TIMES = {c for c in STEP_COLUMNS if c.endswith("_ms") or c == "time_s"}
_SAMPLE_WHOLE = {"step", "phase", *MEMORY_CATEGORIES, "total", "allocated", "reserved", "heap"}
_SAMPLE_REQUIRED = {"step", "phase", *MEMORY_CATEGORIES, "total", "time_s"}


def _read_steps(path: Path) -> np.ndarray:
    table = _read_steps_table(path)
    return _check_values(path, table, STEP_COLUMNS, _INT_STEP_COLS, {"step", "time_s"},
                         _STEP_TIMES)


def _read_steps_table(path: Path) -> np.ndarray:
    header = STEPS_HEADER if _has_header(path, STEPS_HEADER) else LEGACY_STEP_COLUMNS
    width = len(header)
    fast = _read_numbers(path, header)
    if fast is None:
        rows = _read_csv(path, header)
        try:
            fast = np.array([[_float(v) for v in r[:width]] for r in rows],
                            dtype=np.float64).reshape(-1, width)
        except ValueError:
            raise RunFolderError(f"{path}: a value is not a number; the file is damaged") from None
    if width == len(STEP_COLUMNS):
        return fast
    out = np.full((len(fast), len(STEP_COLUMNS)), np.nan)  # an older run: no such columns
    out[:, :width] = fast
    return out


def _has_header(path: Path, header: tuple[str, ...]) -> bool:
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as fh:
            got = fh.readline().strip().split(",")
    except OSError:
        return False
    return tuple(got[: len(header)]) == header


def _read_memory(path: Path) -> np.ndarray:
    table = _check_values(path, _read_memory_table(path), SAMPLE_COLUMNS, _SAMPLE_WHOLE,
                          _SAMPLE_REQUIRED, {"time_s"})
    phase = table[:, SAMPLE_COLUMNS.index("phase")]
    bad = np.flatnonzero((phase < 0) | (phase >= len(SAMPLE_PHASES)))
    if len(bad):
        raise RunFolderError(f"{path}: line {int(bad[0]) + 2}, column 'phase': not one of "
                             f"{', '.join(SAMPLE_PHASES)}; the file is damaged")
    return table


def _read_memory_table(path: Path) -> np.ndarray:
    if _has_header(path, MEMORY_HEADER) or not _has_header(path, LEGACY_MEMORY_HEADER):
        return _read_memory_as(path, MEMORY_HEADER)
    # An older run: its categories where they are now, the newer ones 0 (not separated then).
    old = _read_memory_as(path, LEGACY_MEMORY_HEADER)
    out = np.zeros((len(old), len(SAMPLE_COLUMNS)), dtype=np.float64)
    first = SAMPLE_COLUMNS.index(MEMORY_CATEGORIES[0])
    n_old = len(_LEGACY_CATEGORIES)
    out[:, : first + n_old] = old[:, : first + n_old]
    rest = first + len(MEMORY_CATEGORIES)
    out[:, rest:] = old[:, first + n_old :]
    return out


def _read_memory_as(path: Path, header: tuple[str, ...]) -> np.ndarray:
    """memory.csv's rows with `header`'s columns, as SAMPLE_COLUMNS lays them out for it."""
    width = len(header)  # and x, after step and phase
    fast = _read_numbers(path, header, phase_column=1)
    if fast is not None:
        out = np.empty((len(fast), width + 1), dtype=np.float64)
        out[:, :2] = fast[:, :2]
        out[:, 2] = spread_x(fast[:, 0], fast[:, 1])
        out[:, 3:] = fast[:, 2:]
        return out
    rows = _read_csv(path, header)
    out = np.empty((len(rows), width + 1), dtype=np.float64)
    try:
        for i, r in enumerate(rows):
            step, phase, time_s, *rest = r[: len(header)]
            step_i = int(step)
            out[i] = (step_i, PHASE_CODE[phase], sample_x(step_i, phase), float(time_s),
                      *(_float(v) for v in rest))
    except (ValueError, KeyError, OverflowError):
        raise RunFolderError(f"{path}: line {i + 2} is not valid (a value is not a number, or "
                             "the phase is unknown); the file is damaged") from None
    out[:, 2] = spread_x(out[:, 0], out[:, 1])
    return out


def _read_allocs(path: Path, history: RunHistory) -> None:
    rows = _read_csv(path, ALLOC_HEADER)
    cats = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
    batch = []
    try:
        for r in rows:
            t_us, action, storage, addr, nbytes, category, step, phase, frames = r
            batch.append((int(t_us), _ACTIONS.index(action), int(storage), int(addr),
                          int(nbytes), cats[category], int(step), PHASE_CODE[phase], frames))
    except (ValueError, KeyError) as exc:
        raise RunFolderError(f"{path}: a row is not valid ({exc})") from None
    history.on_allocations(batch)


assert len(ALLOC_HEADER) == len(ALLOC_COLUMNS)

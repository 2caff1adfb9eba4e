"""Reading a run folder back into a RunHistory, with a clear error for a bad or partial one.

The one reader of the format (runfolder.format's codecs): `load_run` here, the follower
(runfolder.follow), export, `shot --open` and the app all come through it.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

import numpy as np

from memlens.core.history import SAMPLE_COLUMNS, STEP_COLUMNS, RunHistory
from memlens.core.records import MEMORY_CATEGORIES, SAMPLE_PHASES
from memlens.core.runfolder.allocations import AllocationsFileError, load_allocations
from memlens.core.runfolder.format import (
    ALLOCATIONS_NPY,
    INT_STEP_COLUMNS,
    MAX_JSON_TEXT,
    MEMORY_CSV,
    MEMORY_HEADER,
    OLD_MEMORY_HEADER,
    OLDER_MEMORY_HEADERS,
    RUN_JSON,
    STEPS_CSV,
    STEPS_HEADER,
    RunFolderError,
    check_run_doc,
    header_problem,
    is_run_doc,
    memory_from_numbers,
    memory_header_of,
    memory_table,
    meta_of,
    parse_numbers,
    steps_table,
)
from memlens.core.safe_read import (
    MAX_CSV,
    MAX_RUN_JSON,
    FileReadError,
    read_bytes,
    read_json,
    what_is,
)


def load_run(folder: str | Path) -> RunHistory:
    """Read a run folder into a RunHistory.

    A partial folder (a run that crashed) loads what is complete: a torn last CSV line is
    dropped, and allocations.npy gives the rows its header counts. A folder that is not a
    run, or a damaged file, raises RunFolderError with the reason.
    """
    folder = _run_folder(folder)
    missing = [n for n in (STEPS_CSV, MEMORY_CSV, RUN_JSON) if not os.path.lexists(folder / n)]
    if missing:
        raise RunFolderError(
            f"{str(folder)!r} is not a memlens run folder: {', '.join(missing)} missing. "
            "A run folder holds steps.csv, memory.csv and run.json."
        )
    doc = read_run_json(folder / RUN_JSON)
    events = check_run_doc(doc, folder / RUN_JSON)
    history = RunHistory()
    history.meta = meta_of(doc)
    history.summary = doc.get("summary")
    for e in events:
        history.on_event(e)
    history.steps.extend(_read_steps(folder / STEPS_CSV))
    history.samples.extend(_read_memory(folder / MEMORY_CSV))
    if os.path.lexists(folder / ALLOCATIONS_NPY):  # what is there is read, or named
        try:
            load_allocations(folder, history)
        except AllocationsFileError as exc:
            raise RunFolderError(str(exc)) from None
    return history


def read_header_and_steps(folder: str | Path) -> tuple[dict, np.ndarray]:
    """run.json and steps.csv's STEP_COLUMNS table alone, checked as load_run checks them
    (memory.csv is left unread: what a list of runs shows); RunFolderError says why not."""
    folder = _run_folder(folder)
    for name in (RUN_JSON, STEPS_CSV):
        if not os.path.lexists(folder / name):
            raise RunFolderError(f"{str(folder)!r} is not a memlens run folder: {name} missing")
    doc = read_run_json(folder / RUN_JSON)
    check_run_doc(doc, folder / RUN_JSON)
    return doc, _read_steps(folder / STEPS_CSV)


def _run_folder(folder: str | Path) -> Path:
    """`folder` when it is a folder memlens may list; RunFolderError saying what it is
    otherwise (a file, a FIFO, missing, or a folder it may not read)."""
    folder = Path(folder)
    if not folder.is_dir():
        what = what_is(folder) or "is a regular file"
        raise RunFolderError(f"{str(folder)!r} is not a folder: it {what}; choose a run "
                             "folder")
    if not os.access(folder, os.R_OK | os.X_OK):
        raise RunFolderError(f"{str(folder)!r}: permission denied (the folder cannot be "
                             "read); choose a run folder you may read")
    return folder


def read_run_json(path: Path) -> dict:
    """run.json as a dict of our format, or RunFolderError saying why not (its size checked
    before it is read, its numbers and texts bounded as it is parsed)."""
    try:
        doc = read_json(path, MAX_RUN_JSON, "a run.json", max_text=MAX_JSON_TEXT)
    except FileReadError as exc:
        raise RunFolderError(str(exc)) from None
    if not is_run_doc(doc):
        raise RunFolderError(f"{path}: not a memlens run.json (no format tag)")
    return doc


def rank_folders(folder: str | Path) -> list[Path]:
    """The per-rank run folders (rank0, rank1, ...) of a distributed watch's parent folder,
    in rank order; [] for a folder that is a run itself or holds no rank folders."""
    folder = Path(folder)
    if os.path.lexists(folder / RUN_JSON):
        return []
    try:
        found = [(int(p.name[4:]), p) for p in folder.iterdir()
                 if is_rank_name(p.name) and p.is_dir()
                 # one that cannot be read is listed: its reading says so, by name
                 and (os.path.lexists(p / RUN_JSON) or not os.access(p, os.R_OK | os.X_OK))]
    except OSError:
        return []
    return [p for _rank, p in sorted(found)]


def is_rank_name(name: str) -> bool:
    """rank<N> with N a rank number: ASCII digits, below 10**9 (a longer N is no job's)."""
    digits = name[4:]
    return (name.startswith("rank") and digits.isascii() and digits.isdigit()
            and len(digits) <= 9)


def _read_csv(path: Path, header: tuple[str, ...]) -> list[list[str]]:
    return _csv_rows(path, header, header)[1]


def _csv_rows(path: Path, header: tuple[str, ...], told: tuple[str, ...]
              ) -> tuple[tuple[str, ...], list[list[str]]]:
    """The file's header, which starts with `header`, and its complete rows; a bad header
    is a RunFolderError that names the columns `told`."""
    try:
        text = read_bytes(path, MAX_CSV, f"a {path.name}").decode("utf-8-sig")  # BOM dropped
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except FileReadError as exc:
        raise RunFolderError(str(exc)) from None
    except UnicodeDecodeError:
        raise RunFolderError(f"{path}: not UTF-8 text; the file is damaged") from None
    except csv.Error:
        raise RunFolderError(f"{path}: not CSV text; the file is damaged") from None
    if not rows:
        raise RunFolderError(f"{path}: empty file, no header")
    got = tuple(rows[0])
    if got[: len(header)] != header:
        raise RunFolderError(header_problem(path, got, told))
    body = rows[1:]
    # A crash mid-write can leave a torn last line: keep only complete rows.
    while body and len(body[-1]) != len(got):
        body.pop()
    return got, body


def _fast(path: Path, header: tuple[str, ...], phase_column: int | None = None):
    try:
        data = read_bytes(path, MAX_CSV, f"a {path.name}")
    except FileReadError as exc:
        raise RunFolderError(str(exc)) from None
    return parse_numbers(data, header, phase_column)


# Whole numbers (steps, bytes, counts) are exact in a float64 below 2**53; a larger, an
# infinite or (where a value is required) a missing one is damage, not a measurement.
_WHOLE_LIMIT = 2.0**53
_TIME_LIMIT_S = 1e9  # seconds or milliseconds: a run's times are far below this


def _check_values(path: Path, table: np.ndarray, columns: tuple[str, ...],
                  whole: set[str] | frozenset[str], required: set[str],
                  times: set[str]) -> np.ndarray:
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
_SAMPLE_WHOLE = {"step", "phase", *MEMORY_CATEGORIES, "total", "allocated", "reserved", "heap",
                 "rss", "carried"}
_SAMPLE_REQUIRED = {"step", "phase", *MEMORY_CATEGORIES, "total", "time_s"}


def _read_steps(path: Path) -> np.ndarray:
    table = _fast(path, STEPS_HEADER)
    if table is None:
        table = steps_table(_read_csv(path, STEPS_HEADER), path)
    return _check_values(path, table, STEP_COLUMNS, INT_STEP_COLUMNS, {"step", "time_s"},
                         _STEP_TIMES)


def _read_memory(path: Path) -> np.ndarray:
    for header in (MEMORY_HEADER, *OLDER_MEMORY_HEADERS):  # newest first: each the next's
        fast = _fast(path, header, phase_column=1)  # prefix (a folder written before
        if fast is not None:  # rss_bytes or the sharded categories, or one the codecs
            break  # must name)
    if fast is not None:
        table = memory_from_numbers(fast)
    else:
        got, body = _csv_rows(path, OLD_MEMORY_HEADER, MEMORY_HEADER)
        table = memory_table(body, path, header=memory_header_of(got))
    _check_values(path, table, SAMPLE_COLUMNS, _SAMPLE_WHOLE, _SAMPLE_REQUIRED, {"time_s"})
    phase = table[:, SAMPLE_COLUMNS.index("phase")]
    bad = np.flatnonzero((phase < 0) | (phase >= len(SAMPLE_PHASES)))
    if len(bad):
        raise RunFolderError(f"{path}: line {int(bad[0]) + 2}, column 'phase': not one of "
                             f"{', '.join(SAMPLE_PHASES)}; the file is damaged")
    return table

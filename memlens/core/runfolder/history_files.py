"""A history's run files written whole: `write_history` (the formats RunWriter streams,
each file atomically), and `export_run_files` (the app's Export), which copies the files a
run streamed where they hold what the history holds, and writes only the others."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from memlens.core.effects import events_with_effects
from memlens.core.history import RunHistory
from memlens.core.runfolder import format as fmt
from memlens.core.runfolder.allocations import (
    HEADER_BYTES,
    header_rows,
    read_frames,
    records,
    write_allocations,
)
from memlens.core.runfolder.allocations import describe as describe_allocations
from memlens.core.runfolder.atomic import (
    ExportError,
    atomic_open,
    atomic_write_bytes,
    atomic_write_text,
)
from memlens.core.safe_read import (
    MAX_ALLOCATIONS_NPY,
    MAX_CSV,
    MAX_FRAMES_JSONL,
    MAX_RUN_JSON,
    MAX_SNAPSHOT,
    open_checked,
    parse_json,
    read_bytes,
)


def write_history(history: RunHistory, folder: str | Path) -> list[Path]:
    """Write a history's run files (the same formats RunWriter streams), atomically."""
    folder = Path(folder)
    written = [_write_table(history, folder, name) for name in _TABLES]
    if len(history.allocs):
        written += write_allocations(history, folder)
    written.append(_write_run_json(history, folder))
    return written


# The CSV files: (header, the history's table, a row's cells)
_TABLES = {
    fmt.STEPS_CSV: (fmt.STEPS_HEADER, lambda h: h.steps, fmt.steps_row),
    fmt.MEMORY_CSV: (fmt.MEMORY_HEADER, lambda h: h.samples, fmt.memory_row),
}


def _write_table(history: RunHistory, folder: Path, name: str) -> Path:
    header, table_of, row_of = _TABLES[name]
    return _write_csv(folder / name, header, map(row_of, table_of(history).rows()))


def _write_csv(path: Path, header: tuple[str, ...], rows) -> Path:
    with atomic_open(path) as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def _write_run_json(history: RunHistory, folder: Path) -> Path:
    doc = {"format": fmt.RUN_FORMAT, **history.meta, "version": fmt.RUN_FORMAT_VERSION,
           "events": events_with_effects(history),
           "graphs": [fmt.graph_summary(g) for g in history.graphs],
           "summary": history.summary}
    doc.pop("allocations", None)
    if len(history.allocs):
        doc["allocations"] = describe_allocations()
    atomic_write_text(folder / fmt.RUN_JSON, json.dumps(doc, indent=1, default=str))
    return folder / fmt.RUN_JSON


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

    for name in _TABLES:
        attempt([name], _csv_copier(name, *_TABLES[name]),
                lambda name=name: [_write_table(history, folder, name)])
    if len(history.allocs):
        attempt([fmt.ALLOCATIONS_NPY, fmt.FRAMES_JSONL], _copy_allocations,
                lambda: write_allocations(history, folder))
    attempt([fmt.RUN_JSON], _copy_run_json, lambda: [_write_run_json(history, folder)])
    return written


def _csv_copier(name: str, header: tuple[str, ...], table_of, row_of):
    def copy(src: Path, folder: Path, history: RunHistory, same: bool) -> list[Path]:
        data = read_bytes(src / name, MAX_CSV, f"a {name}")
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
    frames_bytes = read_bytes(src / fmt.FRAMES_JSONL, MAX_FRAMES_JSONL, "a frames file")
    if read_frames(src / fmt.FRAMES_JSONL) != history.frames:
        raise _Mismatch(fmt.FRAMES_JSONL)
    n = len(history.allocs)
    last = records(history.allocs.rows(n - 1)).tobytes()
    size = HEADER_BYTES + n * len(last)

    def check(fd: int) -> None:
        if (os.fstat(fd).st_size != size or header_rows(os.pread(fd, HEADER_BYTES, 0)) != n
                or os.pread(fd, len(last), size - len(last)) != last):
            raise _Mismatch(fmt.ALLOCATIONS_NPY)

    with open_checked(src / fmt.ALLOCATIONS_NPY, MAX_ALLOCATIONS_NPY,
                      "an allocations.npy") as inp:
        if same:
            check(inp.fileno())
        else:
            with atomic_open(folder / fmt.ALLOCATIONS_NPY, "wb") as out:
                out.flush()
                offset, end = 0, os.fstat(inp.fileno()).st_size
                while offset < end:
                    sent = os.sendfile(out.fileno(), inp.fileno(), offset, end - offset)
                    if not sent:
                        break
                    offset += sent
                check(out.fileno())
            atomic_write_bytes(folder / fmt.FRAMES_JSONL, frames_bytes)
    return [folder / fmt.ALLOCATIONS_NPY, folder / fmt.FRAMES_JSONL]


def _copy_run_json(src: Path, folder: Path, history: RunHistory, same: bool) -> list[Path]:
    data = read_bytes(src / fmt.RUN_JSON, MAX_RUN_JSON, "a run.json")
    doc = parse_json(data)
    summary = json.loads(json.dumps(history.summary, default=str))
    if (not isinstance(doc, dict) or doc.get("summary") is None or doc["summary"] != summary
            or len(doc.get("events") or ()) != history.event_count
            or doc.get("version") != fmt.RUN_FORMAT_VERSION):
        raise _Mismatch(fmt.RUN_JSON)
    out = [folder / fmt.RUN_JSON]
    cuda = Path(str((doc.get("cuda_snapshot") or {}).get("file") or "")).name  # in the folder
    if cuda and (src / cuda).is_file():
        if not same:
            atomic_write_bytes(folder / cuda, read_bytes(src / cuda, MAX_SNAPSHOT,
                                                         "a snapshot"))
        out.append(folder / cuda)
    if not same:
        atomic_write_bytes(folder / fmt.RUN_JSON, data)
    return out

"""Exports of a run for the tools people already use: memory_viz, Perfetto, profiler scripts.

    export_run(history, folder, ["all"])  ->  [snapshot.pickle, trace.json, memory_timeline.json]

"all" means every format this run can give: a run recorded without precise mode has no
allocation events, so it gets no snapshot (`unavailable(history)` says why). Asking for a
snapshot by name from such a run raises SnapshotUnavailable before anything is written.
"allocations" (allocations.csv: precise mode's events as text, four times the run folder's
allocations.npy) is written only when named; "all" leaves it out.
Every file is written atomically (memlens.core.runfolder.atomic): a failure leaves no
partial file behind.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from memlens.core.exports.limits import DEFAULT_MAX_ENTRIES, DEFAULT_MAX_ROWS
from memlens.core.runfolder.atomic import ExportError
from memlens.core.runfolder.format import (
    ALLOCATIONS_CSV,
    SNAPSHOT_PICKLE,
    TIMELINE_JSON,
    TRACE_JSON,
)

if TYPE_CHECKING:  # numpy and the history load only when something is exported
    from memlens.core.history import RunHistory

FORMATS: tuple[str, ...] = ("snapshot", "trace", "timeline")  # what "all" means
ON_REQUEST: tuple[str, ...] = ("allocations",)  # only when named
FILES: dict[str, str] = {
    "snapshot": SNAPSHOT_PICKLE, "trace": TRACE_JSON, "timeline": TIMELINE_JSON,
    "allocations": ALLOCATIONS_CSV,
}

__all__ = ["DEFAULT_MAX_ENTRIES", "DEFAULT_MAX_ROWS", "FILES", "FORMATS", "ON_REQUEST",
           "ExportError", "export_run", "parse_formats", "unavailable"]


def parse_formats(formats: str | Iterable[str]) -> list[str]:
    """'snapshot,trace' or ['all'] -> the named formats in FORMATS order (then ON_REQUEST);
    ValueError if bad."""
    if isinstance(formats, str):
        formats = formats.split(",")
    names = [f.strip().lower() for f in formats if f.strip()]
    known = (*FORMATS, *ON_REQUEST)
    bad = [f for f in names if f != "all" and f not in known]
    if bad:
        raise ValueError(f"unknown export format {', '.join(map(repr, bad))}; "
                         f"choose from {', '.join(known)} or all")
    if not names:
        raise ValueError(f"no export format given; choose from {', '.join(known)} or all")
    return [f for f in known if f in names or ("all" in names and f in FORMATS)]


def unavailable(history: RunHistory) -> dict[str, str]:
    """Formats this history cannot give, each with the reason in plain words."""
    from memlens.core.exports.snapshot import unavailable_reason

    reason = unavailable_reason(history)
    if not reason:
        return {}
    return {"snapshot": reason, "allocations": unavailable_reason(history, use=" to write")}


def export_run(history: RunHistory, folder: str | Path, formats: str | Iterable[str] = "all",
               *, max_entries: int | None = DEFAULT_MAX_ENTRIES,
               max_rows: int | None = DEFAULT_MAX_ROWS,
               notes: list[str] | None = None) -> list[Path]:
    """Write the chosen formats into `folder`; returns the files written.

    max_entries bounds the snapshot to its last trace entries, max_rows the timeline to
    that many rows (thinned, peaks kept); None or 0 means all. `notes`, if given, receives
    a line for each format skipped or shortened.
    """
    given = formats.split(",") if isinstance(formats, str) else list(formats)
    explicit = "all" not in (f.strip().lower() for f in given)  # named, so must be produced
    chosen = parse_formats(given)
    missing = unavailable(history)
    for name in chosen:
        if name in missing and explicit:
            from memlens.core.exports.snapshot import SnapshotUnavailable

            raise SnapshotUnavailable(f"cannot write {FILES[name]}: {missing[name]}")
    folder = Path(folder)
    wanted = [name for name in chosen if name not in missing]
    if notes is not None:
        notes += [f"{FILES[name]} not written: {missing[name]}" for name in chosen
                  if name in missing]
    done: dict[str, Path] = {}
    # One after the other: on a second thread, trace.json's many small numpy steps and the
    # event pairing take turns at the GIL and slow each other (docs/performance-notes.md).
    for name in wanted:
        if name in ("trace", "allocations"):
            done[name] = _write_from_history(name, history, folder / FILES[name])
    events = None
    if "snapshot" in wanted or "timeline" in wanted:
        from memlens.core.exports._allocs import allocation_events

        events = allocation_events(history) if len(history.allocs) else None
    if "snapshot" in wanted:
        from memlens.core.exports.snapshot import window_start, write_snapshot

        done["snapshot"] = write_snapshot(history, folder / FILES["snapshot"],
                                          max_entries=max_entries, events=events)
        start = window_start(events, max_entries)
        if start and notes is not None:
            first_step = int(events.details([start])["step"][0])
            notes.append(
                f"{FILES['snapshot']} holds the last {max_entries:,} trace entries (from "
                f"step {first_step}); storages from earlier that are still alive, or "
                "freed in the window, still count. Raise --max-entries, or 0 for all.")
    if "timeline" in wanted:
        from memlens.core.exports.memory_timeline import write_memory_timeline

        path = folder / FILES["timeline"]
        rows = write_memory_timeline(history, path, events=events, max_rows=max_rows)
        done["timeline"] = path
        if len(rows.times) < rows.rows_before_thinning and notes is not None:
            notes.append(
                f"{FILES['timeline']}: {rows.rows_before_thinning:,} allocation-event rows "
                f"thinned to {len(rows.times):,} (each stretch keeps its peak and last "
                "state). Raise --max-rows, or 0 for all.")
    return [done[name] for name in wanted]


def _write_from_history(name: str, history: RunHistory, path: Path) -> Path:
    if name == "trace":
        from memlens.core.exports.chrome_trace import write_chrome_trace

        return write_chrome_trace(history, path)
    from memlens.core.exports.allocations_csv import write_allocations_csv

    return write_allocations_csv(history, path)

"""allocations.csv: precise mode's storage events as text, written only when asked for.

The run folder keeps the events as allocations.npy (memlens.core.runfolder.allocations);
this is the same table for spreadsheets and scripts that want text, one row per alloc or
free with names instead of codes: t_us, action, storage, addr, bytes, category, step,
phase, frames. It is big (four times allocations.npy), so the rows are formatted by numpy
(memlens.core.exports._text), not one by one: the bytes are those Python's csv module
writes, at a tenth of the time.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from memlens.core.exports import _text
from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES, SAMPLE_PHASES
from memlens.core.runfolder.atomic import atomic_open
from memlens.core.runfolder.format import ACTIONS, ALLOC_HEADER

_CHUNK = 1 << 20  # table rows read at a time


def csv_field(text: str) -> str:
    """`text` as the csv module writes it inside a row (quoted only when it must be)."""
    out = io.StringIO()
    csv.writer(out).writerow(["", text])
    return out.getvalue()[1:].rstrip("\r\n")


def write_allocations_csv(history: RunHistory, path: str | Path) -> Path:
    """Write allocations.csv atomically; returns its path."""
    path = Path(path)
    table = history.allocs
    n = len(table)
    col = table.index
    tops = {c: _text.max_abs(table.column(c)) for c in ("t_us", "storage", "addr", "bytes",
                                                       "step")}
    parts: list = []
    for c in ALLOC_HEADER:
        if parts:
            parts.append(",")
        if c in tops:
            parts.append(_text.Int(tops[c], signed=True))
        else:
            options = {"action": ACTIONS, "category": MEMORY_CATEGORIES, "phase": SAMPLE_PHASES,
                       "frames": history.frames}[c]
            parts.append(_text.Choice(tuple(csv_field(o) for o in options) or ("",)))
    parts.append("\r\n")
    template = _text.RowTemplate(parts)
    order = [("frame" if c == "frames" else c) for c in ALLOC_HEADER]
    with atomic_open(path, "wb") as fh:
        fh.write((",".join(ALLOC_HEADER) + "\r\n").encode())
        for lo in range(0, n, _CHUNK):
            rows = table.rows(lo, lo + _CHUNK)
            for chunk in template.render(*(rows[:, col[c]] for c in order)):
                fh.write(chunk)
    return path

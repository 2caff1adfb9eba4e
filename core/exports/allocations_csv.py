"""allocations.csv: precise mode's storage events as text, written only when asked for.

The run folder keeps the events as allocations.npy (core.allocations_file); this is the
same table for spreadsheets and scripts that want text, one row per alloc or free with
names instead of codes: t_us, action, storage, addr, bytes, category, step, phase, frames.
It is big (about 200 bytes an event: 2.2 GB for a 100,000-step precise run).
"""

from __future__ import annotations

import csv
from pathlib import Path

from core.atomic import atomic_open
from core.history import RunHistory
from core.run_files import ALLOC_HEADER, alloc_row

ALLOCATIONS_FILE = "allocations.csv"
_CHUNK = 65_536


def write_allocations_csv(history: RunHistory, path: str | Path) -> Path:
    """Write allocations.csv atomically; returns its path."""
    path = Path(path)
    frames = history.frames
    table = history.allocs
    with atomic_open(path) as fh:
        w = csv.writer(fh)
        w.writerow(ALLOC_HEADER)
        for lo in range(0, len(table), _CHUNK):
            w.writerows(alloc_row(r, frames[int(r[-1])]) for r in table.rows(lo, lo + _CHUNK))
    return path

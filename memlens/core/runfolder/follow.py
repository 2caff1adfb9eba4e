"""Following a run folder that another process is writing: only the new complete rows.

`RunFollower.poll()` reads what was appended to steps.csv and memory.csv since the last
poll (a partial last line waits for its newline), re-reads run.json when it changed, and
appends to a RunHistory. It says whether the writer is live, finished (run.json has its
summary) or gone (its pid no longer runs on this host and it never finished: runfolder.header).
"""

from __future__ import annotations

import csv
import os
import stat
from collections.abc import Callable
from pathlib import Path

from memlens.core.history import RunHistory
from memlens.core.runfolder import format as fmt
from memlens.core.runfolder.header import FINISHED, GONE, LIVE, writer_state
from memlens.core.safe_read import (
    MAX_CSV,
    MAX_RUN_JSON,
    FileReadError,
    open_checked,
    read_json,
    what_is,
)

__all__ = ["FINISHED", "GONE", "LIVE", "WAITING", "RunFollower"]
WAITING = "waiting"


class _Tail:
    """New complete lines of a growing CSV file, header checked once."""

    def __init__(self, path: Path, header: tuple[str, ...],
                 found: Callable[[list[str]], tuple[str, ...] | None] | None = None) -> None:
        self.path, self.header = path, header
        # The header a file's first row has, of those the format reads (memory.csv's two).
        self.found = found or (lambda got: header if tuple(got[: len(header)]) == header
                               else None)
        self.offset = 0
        self.line = 1  # the file's line number of the next row read
        self.checked = False

    def new_rows(self) -> tuple[list[list[str]], int]:
        """The rows appended since the last call, and the file's line number of the first."""
        if not os.path.lexists(self.path):
            return [], self.line
        try:
            with open_checked(self.path, MAX_CSV, f"a {self.path.name}") as fh:
                fh.seek(self.offset)  # what was appended since: at most what it holds now
                data = fh.read(max(os.fstat(fh.fileno()).st_size - self.offset, 0))
        except FileReadError as exc:
            raise fmt.RunFolderError(str(exc)) from None
        except OSError as exc:
            raise fmt.RunFolderError(
                f"{self.path}: cannot be read ({exc.strerror or exc})") from None
        end = data.rfind(b"\n")
        if end < 0:
            return [], self.line
        self.offset += end + 1
        lines = data[: end + 1].decode("utf-8", "replace").splitlines()
        rows = list(csv.reader(lines))
        first = self.line
        self.line += len(rows)
        if not self.checked:
            self.checked = True
            header = self.found(rows[0]) if rows else None
            if header is None:
                raise fmt.RunFolderError(f"{self.path}: not a memlens {self.path.name}; expected "
                                     f"the columns: {', '.join(self.header)}")
            self.header = header
            rows = rows[1:]
            first += 1
        return rows, first


class RunFollower:
    """A RunHistory that grows as another process writes the folder."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise fmt.RunFolderError(f"{str(self.folder)!r} is not a folder; choose a run folder")
        self.history = RunHistory()
        self._steps = _Tail(self.folder / fmt.STEPS_CSV, fmt.STEPS_HEADER)
        self._memory = _Tail(self.folder / fmt.MEMORY_CSV, fmt.MEMORY_HEADER,
                             fmt.memory_header_of)
        self._json_stamp: tuple | None = None
        self._events_seen = 0
        self.state = WAITING
        self._header: dict = {}  # what says whether the writer runs (runfolder.header)
        self.meta_reads = 0  # run.json reads that found it changed

    def poll(self) -> tuple[int, int]:
        """Take in what was written since the last poll: (new steps, new samples)."""
        self._read_json()
        steps, first = self._steps.new_rows()
        if steps:
            self.history.steps.extend(fmt.steps_table(steps, self._steps.path, first))
        samples, first = self._memory.new_rows()
        if samples:  # a watch writes a step's samples whole: x spread within the batch
            self.history.samples.extend(fmt.memory_table(samples, self._memory.path, first,
                                                         self._memory.header))
        self.state = self._state()
        return len(steps), len(samples)

    def _read_json(self) -> None:
        path = self.folder / fmt.RUN_JSON
        try:
            st = path.stat()
        except FileNotFoundError:
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._json_stamp:
            return
        if not stat.S_ISREG(st.st_mode):  # never a FIFO's open, a device's endless read
            raise fmt.RunFolderError(f"{path}: {what_is(path)}, not a regular file; the "
                                     "folder is not a run's")
        try:
            doc = read_json(path, MAX_RUN_JSON, "a run.json", max_text=fmt.MAX_JSON_TEXT)
        except FileReadError as exc:
            if not os.path.lexists(path):
                return  # replaced between the two looks: the next poll reads the new one
            # A writer replaces run.json whole (an atomic rename), so what does not parse is
            # damage, not a file caught half-written.
            raise fmt.RunFolderError(str(exc)) from None
        if not fmt.is_run_doc(doc):
            raise fmt.RunFolderError(f"{path}: not a memlens run.json (no format tag)")
        events = fmt.check_run_doc(doc, path)  # as load_run's
        self._json_stamp = stamp
        self.meta_reads += 1
        h = self.history
        h.meta = fmt.meta_of(doc)
        h.summary = doc.get("summary")
        self._header = {k: doc.get(k) for k in ("pid", "host", "finished")}
        for e in events[self._events_seen:]:
            h.on_event(e)
        self._events_seen = len(events)

    def _state(self) -> str:
        h = self.history
        if h.summary is None and not h.meta:
            return WAITING
        return writer_state({**self._header, "summary": h.summary})

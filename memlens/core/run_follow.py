"""Following a run folder that another process is writing: only the new complete rows.

`RunFollower.poll()` reads what was appended to steps.csv and memory.csv since the last
poll (a partial last line waits for its newline), re-reads run.json when it changed, and
appends to a RunHistory. It says whether the writer is live, finished (run.json has its
summary) or gone (its pid no longer runs and it never finished).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from memlens.core.history import RunHistory, sample_x, spread_x
from memlens.core.records import PHASE_CODE, RunEvent
from memlens.core.run_files import (
    MEMORY_CSV,
    MEMORY_HEADER,
    RUN_FORMAT,
    RUN_JSON,
    STEPS_CSV,
    STEPS_HEADER,
    RunFolderError,
)

LIVE, FINISHED, GONE, WAITING = "live", "finished", "writer gone", "waiting"


class _Tail:
    """New complete lines of a growing CSV file, header checked once."""

    def __init__(self, path: Path, header: tuple[str, ...]) -> None:
        self.path, self.header = path, header
        self.offset = 0
        self.checked = False

    def new_rows(self) -> list[list[str]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RunFolderError(f"{self.path}: cannot be read ({exc.strerror or exc})") from None
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        lines = data[: end + 1].decode("utf-8", "replace").splitlines()
        rows = list(csv.reader(lines))
        if not self.checked:
            self.checked = True
            if not rows or tuple(rows[0][: len(self.header)]) != self.header:
                raise RunFolderError(f"{self.path}: not a memlens {self.path.name} (columns "
                                     f"{rows[0][:4] if rows else []})")
            rows = rows[1:]
        return rows


def _float(text: str) -> float:
    return float("nan") if text == "" else float(text)


class RunFollower:
    """A RunHistory that grows as another process writes the folder."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise RunFolderError(f"{str(self.folder)!r} is not a folder; choose a run folder")
        self.history = RunHistory()
        self._steps = _Tail(self.folder / STEPS_CSV, STEPS_HEADER)
        self._memory = _Tail(self.folder / MEMORY_CSV, MEMORY_HEADER)
        self._json_stamp: tuple | None = None
        self._events_seen = 0
        self.state = WAITING
        self.pid: int | None = None
        self.meta_reads = 0  # run.json reads that found it changed

    def poll(self) -> tuple[int, int]:
        """Take in what was written since the last poll: (new steps, new samples)."""
        self._read_json()
        steps = self._steps.new_rows()
        if steps:
            n = len(STEPS_HEADER)
            try:
                self.history.steps.extend(np.array(
                    [[_float(v) for v in r[:n]] for r in steps if len(r) >= n],
                    dtype=np.float64).reshape(-1, n))
            except ValueError as exc:
                raise RunFolderError(f"{self._steps.path}: a value is not a number ({exc})"
                                     ) from None
        samples = self._memory.new_rows()
        if samples:
            rows = []
            try:
                for r in samples:
                    if len(r) < len(MEMORY_HEADER):
                        continue
                    step, phase, time_s, *rest = r[: len(MEMORY_HEADER)]
                    rows.append((int(step), PHASE_CODE[phase], sample_x(int(step), phase),
                                 float(time_s), *(_float(v) for v in rest)))
            except (ValueError, KeyError) as exc:
                raise RunFolderError(f"{self._memory.path}: a row is not valid ({exc})") from None
            if rows:
                block = np.array(rows, dtype=np.float64)
                block[:, 2] = spread_x(block[:, 0], block[:, 1])  # a watch writes a step whole
                self.history.samples.extend(block)
        self.state = self._state()
        return len(steps), len(samples)

    def _read_json(self) -> None:
        path = self.folder / RUN_JSON
        try:
            st = path.stat()
        except FileNotFoundError:
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._json_stamp:
            return
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return  # written atomically, so a bad read is a passing moment: next poll
        if not isinstance(doc, dict) or doc.get("format") != RUN_FORMAT:
            raise RunFolderError(f"{path}: not a memlens run.json (no format tag)")
        self._json_stamp = stamp
        self.meta_reads += 1
        h = self.history
        h.meta = {k: v for k, v in doc.items() if k not in ("events", "summary", "graphs")}
        h.summary = doc.get("summary")
        self.pid = doc.get("pid") if isinstance(doc.get("pid"), int) else None
        events = doc.get("events") or []
        for e in events[self._events_seen:]:
            try:
                h.on_event(RunEvent(**e))
            except TypeError:
                continue
        self._events_seen = len(events)

    def _state(self) -> str:
        h = self.history
        if h.summary is not None:
            return FINISHED
        if not h.meta:
            return WAITING
        if self.pid is not None and not pid_alive(self.pid):
            return GONE
        return LIVE


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True

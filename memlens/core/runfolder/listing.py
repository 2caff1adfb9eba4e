"""The run folders under one folder, as a list of runs shows them: name, what ran, steps,
peak and when. Read through the format's one reader; nothing in a folder is ever run."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memlens.core.history import STEP_COLUMNS
from memlens.core.model_file import preset_label
from memlens.core.runfolder.format import RUN_JSON, RunFolderError
from memlens.core.runfolder.header import FINISHED, writer_state
from memlens.core.runfolder.reader import read_header_and_steps

DAMAGED = "damaged"  # a RunListing's state where run.json is there but not a readable run

_PEAK = STEP_COLUMNS.index("peak_bytes")


@dataclass(frozen=True, slots=True)
class RunListing:
    """One run folder's line in a list of runs."""

    folder: Path
    name: str  # the folder's name
    what: str  # the preset (its label) or, for a watched run, the script's file name
    steps: int  # steps recorded in steps.csv
    peak_bytes: int | None  # run.json's summary peak, else the highest step peak; None: none
    written: float  # run.json's last change, seconds since the epoch
    state: str  # runfolder.header's: live, finished, or writer gone (killed before its end)
    problem: str = ""  # a damaged run: what is wrong (the reader's one line); "" for a run

    @property
    def finished(self) -> bool:
        """Whether the run's writer ended it (run.json has its summary)."""
        return self.state == FINISHED


def damaged_run(folder: Path, problem: str) -> RunListing:
    """The listing of a folder whose run.json is there but cannot be read as a run."""
    try:
        written = os.lstat(folder / RUN_JSON).st_mtime
    except OSError:
        written = 0.0
    return RunListing(folder, folder.name, "damaged", 0, None, written, DAMAGED, problem)


def list_run(folder: str | Path) -> RunListing:
    """A run folder's listing; RunFolderError when it is not a readable run."""
    folder = Path(folder)
    doc, steps = read_header_and_steps(folder)
    config = doc.get("config") or {}
    script = doc.get("script")
    what = (Path(script).name if isinstance(script, str) and script
            else preset_label(str(config.get("preset", "run"))))
    peak = None
    summary = doc.get("summary") or {}
    value = summary.get("peak_bytes")
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        peak = int(value)
    elif len(steps) and np.isfinite(steps[:, _PEAK]).any():
        peak = int(np.nanmax(steps[:, _PEAK]))
    try:
        written = (folder / RUN_JSON).stat().st_mtime
    except OSError as exc:
        raise RunFolderError(f"{folder}: cannot be read ({exc.strerror or exc})") from None
    return RunListing(folder, folder.name, what, len(steps), peak, written, writer_state(doc))


def list_runs(parent: str | Path) -> tuple[list[RunListing], list[Path]]:
    """The runs in `parent`'s folders, by folder name (a damaged one, whose run.json is
    there but cannot be read, listed with its `problem`), and the folders that hold no run
    yet (a run's folder is made before its files), by folder name."""
    parent = Path(parent)
    try:
        folders = sorted(p for p in parent.iterdir() if p.is_dir())
    except OSError:
        return [], []
    runs, others = [], []
    for folder in folders:
        try:
            runs.append(list_run(folder))
        except RunFolderError as exc:
            if os.path.lexists(folder / RUN_JSON):
                runs.append(damaged_run(folder, str(exc)))
            else:
                others.append(folder)
    return runs, others

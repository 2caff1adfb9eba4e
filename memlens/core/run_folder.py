"""Choosing a run's folder: a new one, or a given one that holds no other run."""

from __future__ import annotations

import os
import time
from pathlib import Path

from memlens.core.options import ConfigError

# Every file a run or its exports write into the run's folder. A folder holding any of them
# holds a run: writing another into it would mix the two (an old allocations.npy beside new
# steps) or truncate the old one's CSVs.
RUN_FILE_NAMES: tuple[str, ...] = (
    "steps.csv", "memory.csv", "run.json", "allocations.npy", "allocation_frames.jsonl",
    "allocations.csv", "cuda_snapshot.pickle", "snapshot.pickle", "trace.json",
    "memory_timeline.json",
)


def run_files_in(folder: Path) -> list[str]:
    """The names of RUN_FILE_NAMES present in `folder` (as files, links or anything else)."""
    return [n for n in RUN_FILE_NAMES if os.path.lexists(folder / n)]


def new_run_folder(runs_dir: str | Path, preset: str) -> Path:
    """Make and return a folder `runs_dir/<time>-<preset>[-n]` that did not exist before.

    mkdir without exist_ok is the check: two runs started in the same second (two windows,
    a window and the CLI) never get the same folder.
    """
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{stamp}-{preset}"
    n = 1
    while True:
        folder = runs_dir / (base if n == 1 else f"{base}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            n += 1


def claim_out_folder(text: str, force: bool = False) -> Path:
    """`--out DIR` for a new run: refused (ConfigError) when DIR holds another run, unless
    `force`, which removes that run's files first (nothing else in the folder)."""
    if not text.strip():
        raise ConfigError("--out '': give a folder name, or leave --out out for a new "
                          "folder in runs/")
    folder = Path(text)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {text!r} is a file, not a folder; choose a folder")
    old = run_files_in(folder) if folder.is_dir() else []
    if old and not force:
        raise ConfigError(
            f"--out {text!r} already holds a run ({', '.join(old)}); choose another folder, "
            "or pass --force to delete that run's files first"
        )
    for name in old:
        try:
            os.unlink(folder / name)
        except OSError as exc:
            raise ConfigError(f"--force: cannot delete {str(folder / name)!r}: "
                              f"{exc.strerror or exc}") from None
    return folder

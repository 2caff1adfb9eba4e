"""What a path given to Open (the app's File > Open, `app --open`, `shot --open`) is: a run
folder or a memory snapshot, checked by reading it, with the reason when it cannot be."""

from __future__ import annotations

from pathlib import Path

from memlens.core.runfolder.format import RUN_JSON, RunFolderError
from memlens.core.runfolder.reader import load_run, rank_folders
from memlens.core.safe_read import what_is
from memlens.core.snapshot_file import SnapshotFileError, read_snapshot

SNAPSHOT_SUFFIXES = (".pickle", ".pkl")


class OpenError(ValueError):
    """A path that cannot be opened; the message says why and what to open instead."""


def resolve(path: str | Path) -> tuple[str, Path]:
    """("run", its folder) or ("snapshot", the file). A file inside a run folder (run.json,
    steps.csv...) stands for its folder."""
    path = Path(path).expanduser()
    if path.is_dir():
        return "run", path
    if path.is_file():
        if path.suffix.lower() in SNAPSHOT_SUFFIXES:
            return "snapshot", path
        if (path.parent / RUN_JSON).is_file():
            return "run", path.parent
        raise OpenError(f"{str(path)!r} is neither a run folder nor a snapshot (.pickle); "
                        "open a run folder, a file in one, or a snapshot.pickle")
    # a FIFO, a device, a link to one, a broken link: said as what it is
    raise OpenError(f"{str(path)!r} {what_is(path)}; open a run folder or a snapshot.pickle")


def check_openable(path: str | Path) -> tuple[str, Path]:
    """resolve(), then read the run or snapshot once: raises OpenError with the reason."""
    kind, target = resolve(path)
    try:
        if kind == "run":  # a torchrun job's folder: every rank in it
            for folder in rank_folders(target) or [target]:
                load_run(folder)
        else:
            read_snapshot(target)
    except (RunFolderError, SnapshotFileError, OSError) as exc:
        raise OpenError(str(exc)) from None
    except (ArithmeticError, LookupError, TypeError, ValueError, MemoryError,
            RecursionError) as exc:  # a reader's gap: still one line, never a traceback
        raise OpenError(f"{target}: cannot be read as a {kind} ({type(exc).__name__}); "
                        "the file is damaged") from None
    return kind, target

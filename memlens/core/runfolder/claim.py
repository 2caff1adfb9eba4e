"""Claiming a run's folder: a new one, or a given one that holds no other run.

One rule for every producer (run, watch, lessons, the app): a folder that holds a run is
never written again. `claim_out_folder` refuses it (naming --force), and --force deletes
only that run's files, never following a link. The claim itself is an exclusive create
(O_EXCL, no link followed) of each file the writer makes (runfolder.writer): of two
processes claiming one folder at once, one wins and the other is refused, where a check
before an open would let both write.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from memlens.core.options import ConfigError
from memlens.core.runfolder.format import RUN_FILE_NAMES

_EXCLUSIVE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))


class FolderTaken(ConfigError):
    """A folder that holds a run (or one another process has just claimed)."""


def run_files_in(folder: Path) -> list[str]:
    """The names of RUN_FILE_NAMES present in `folder` (as files, links or anything else)."""
    return [n for n in RUN_FILE_NAMES if os.path.lexists(folder / n)]


def create_new(path: Path) -> int:
    """A new file at `path`, opened for writing (a file descriptor); FolderTaken when
    anything is there already, a link included (never followed)."""
    try:
        return os.open(path, _EXCLUSIVE, 0o666)
    except FileExistsError:
        raise FolderTaken(f"{str(path.parent)!r} already holds a run ({path.name}); choose "
                          "another folder, or pass --force to delete that run's files "
                          "first") from None


def create_new_text(path: Path, text: str) -> None:
    with open(create_new(path), "w", encoding="utf-8") as fh:
        fh.write(text)


def claim_out_folder(text: str, force: bool = False, flag: str = "--out") -> Path:
    """`--out DIR` for a new run: refused (FolderTaken) when DIR holds another run, unless
    `force`, which removes that run's files first (links themselves, not what they point
    at; nothing else in the folder). The writer's exclusive creates make the claim."""
    if not text.strip():
        raise ConfigError(f"{flag} '': give a folder name, or leave {flag} out for a new "
                          "folder in runs/")
    folder = Path(text).expanduser()
    if os.path.lexists(folder) and not folder.is_dir():
        raise ConfigError(f"{flag} {text!r} is a file, not a folder; choose a folder")
    old = run_files_in(folder) if folder.is_dir() else []
    if old and not force:
        raise FolderTaken(
            f"{flag} {text!r} already holds a run ({', '.join(old)}); choose another "
            "folder, or pass --force to delete that run's files first"
        )
    for name in old:
        try:
            os.unlink(folder / name)  # a link is removed, its target left alone
        except OSError as exc:
            raise ConfigError(f"--force: cannot delete {str(folder / name)!r}: "
                              f"{exc.strerror or exc}") from None
    return folder


def discard_run(folder: Path, made: bool) -> None:
    """Remove a run that recorded nothing: its files (links themselves, never what they
    point at), and the folder where this run made it and nothing else is in it."""
    for name in run_files_in(folder):
        with contextlib.suppress(OSError):
            os.unlink(folder / name)
    if made:
        for f in (folder, folder.parent) if folder.name.startswith("rank") else (folder,):
            with contextlib.suppress(OSError):
                f.rmdir()  # only an empty one goes


def new_run_folder(runs_dir: str | Path, label: str) -> Path:
    """Make and return a folder `runs_dir/<time>-<label>[-n]` that did not exist before.

    mkdir without exist_ok is the check: two runs started in the same second (two windows,
    two watches, a window and the CLI) never get the same folder.
    """
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{label}"
    n = 1
    while True:
        folder = runs_dir / (base if n == 1 else f"{base}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            n += 1


def job_folder_name(label: str, environ: dict | None = None) -> str | None:
    """The folder a torchrun job's ranks share, named once for the whole job: the job's
    rendezvous id where one is set, else the launcher's start time and pid (every rank of a
    node is the launcher's child). None outside torchrun."""
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" not in env and "LOCAL_RANK" not in env:
        return None
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":  # torchrun's default when no --rdzv-id is given
        return f"{_safe(run_id)}-{label}"
    launcher = os.getppid()
    started = _process_start(launcher) or time.time()
    return f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}-{label}-job{launcher}"


def _process_start(pid: int) -> float | None:
    """A process's start time (seconds since the epoch) on Linux, else None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80] or "job"

"""Claiming a producer's folder: a new one, or a given one that holds nothing of another's.

One policy for every producer (run, watch, the app, the lessons report and its arms): a
folder that holds a run or a report is never written again. `claim_folder` refuses it,
naming --force only where --force can act: --force deletes exactly the files memlens wrote
there, as the folder's own record says (a run's run.json: the run files beside it; a
report's lessons.json: the files and run folders it lists), never a file that record does
not account for, never what a link points at, and says what it deleted. A folder holding
anything unaccounted for under those names is refused whole, --force or not.

The claim itself is an exclusive create (O_EXCL, no link followed) of each file the writer
makes (runfolder.writer): of two processes claiming one folder at once, one wins and the
other is refused, where a check before an open would let both write.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memlens.core.options import ConfigError
from memlens.core.runfolder.format import RUN_FILE_NAMES, RUN_JSON, is_run_doc
from memlens.core.safe_read import MAX_RUN_JSON, FileReadError, read_json, what_is

_EXCLUSIVE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))
MAX_LISTED = 10_000  # entries looked at under a producer's names before the folder is refused
SHOWN = 4  # names a message lists before "and N more"


class FolderTaken(ConfigError):
    """A folder that holds a run or a report (or one another process has just claimed)."""


@dataclass(frozen=True)
class Manifest:
    """What memlens wrote in a folder, by the folder's own record: files and folders
    relative to it (--force deletes the files, then the folders once empty)."""

    files: tuple[Path, ...]
    folders: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Layout:
    """What one producer writes into its folder. `written(folder)` reads the folder's own
    record: its Manifest, or why it has none (then nothing there is memlens's to delete).
    `refused`: names of another producer's that keep a folder from being this one's."""

    what: str  # "a run", "a lessons report"
    names: tuple[str, ...]
    written: Callable[[Path], Manifest | str]
    refused: tuple[str, ...] = ()
    refused_what: str = ""


def run_files_in(folder: Path) -> list[str]:
    """The names of RUN_FILE_NAMES present in `folder` (as files, links or anything else)."""
    return [n for n in RUN_FILE_NAMES if os.path.lexists(folder / n)]


def run_manifest(folder: Path) -> Manifest | str:
    """A run folder's files memlens wrote: the run files beside a run.json of memlens's."""
    try:
        doc = read_json(folder / RUN_JSON, MAX_RUN_JSON, "a run.json")
    except FileReadError as exc:
        return f"its {RUN_JSON} cannot be read ({exc})"
    if not is_run_doc(doc):
        return f"its {RUN_JSON} is not memlens's (no format tag)"
    return Manifest(tuple(Path(n) for n in run_files_in(folder)))


RUN = Layout("a run", RUN_FILE_NAMES, run_manifest)


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


def _names(paths: list[str]) -> str:
    more = f" and {len(paths) - SHOWN:,} more" if len(paths) > SHOWN else ""
    return ", ".join(paths[:SHOWN]) + more


def unaccounted(folder: Path, names: list[str], manifest: Manifest) -> list[str]:
    """What lies under `names` in `folder` that `manifest` does not list (relative paths),
    links never followed; past MAX_LISTED entries, the rest counts as unaccounted."""
    files = {str(f) for f in manifest.files}
    folders = {str(f) for f in manifest.folders}
    found: list[str] = []
    seen = 0
    stack = list(names)
    while stack:
        rel = stack.pop()
        seen += 1
        if seen > MAX_LISTED:
            return [*found, f"more than {MAX_LISTED:,} entries under {_names(names)}"]
        path = folder / rel
        if path.is_dir() and not path.is_symlink():
            if rel not in folders:
                found.append(rel + "/")
                continue
            try:
                stack += [f"{rel}/{entry}" for entry in sorted(os.listdir(path))]
            except OSError as exc:
                found.append(f"{rel}/ (cannot be listed: {exc.strerror or exc})")
        elif rel not in files:
            found.append(rel)
    return sorted(found)


def claim_folder(text: str, layout: Layout = RUN, *, force: bool | None = False,
                 flag: str = "--out", said: Callable[[str], None] | None = None) -> Path:
    """`--out DIR` for a new run or report: refused (FolderTaken) when DIR holds one, unless
    `force` and DIR's own record accounts for everything under the layout's names; then
    those files are deleted (links themselves, not what they point at), the record's
    folders removed once empty, and `said` told what went. `force` None: there is no
    --force to offer (the app's dialogs). Nothing is written here: the producer's exclusive
    creates make the claim."""
    if not text.strip():
        raise ConfigError(f"{flag} '': give a folder name, or leave {flag} out for a new "
                          "folder in runs/")
    folder = Path(text).expanduser()
    if os.path.lexists(folder) and not folder.is_dir():
        what = what_is(folder).removeprefix("is ") or "a file"
        raise ConfigError(f"{flag} {text!r} is {what}, not a folder; choose a folder")
    if not folder.is_dir():
        return folder
    other = [n for n in layout.refused if os.path.lexists(folder / n)]
    if other:
        raise FolderTaken(f"{flag} {text!r} holds {layout.refused_what} ({_names(other)}), "
                          f"not {layout.what}: choose another folder (nothing was deleted)")
    present = [n for n in layout.names if os.path.lexists(folder / n)]
    if not present:
        return folder
    manifest = layout.written(folder)
    if isinstance(manifest, str):
        raise FolderTaken(
            f"{flag} {text!r} holds {_names(present)}, the names {layout.what} writes, but "
            f"they are not {layout.what} memlens wrote: {manifest}. Choose another folder "
            "(--force deletes only files memlens wrote; nothing was deleted)")
    foreign = unaccounted(folder, present, manifest)
    if foreign:
        raise FolderTaken(
            f"{flag} {text!r} holds {layout.what} and also {_names(foreign)}, which it did "
            "not write. Choose another folder, or move those out (--force deletes only "
            "files memlens wrote; nothing was deleted)")
    if not force:
        offer = ("" if force is None else ", or pass --force to delete the "
                 f"{len(manifest.files)} files memlens wrote there first")
        raise FolderTaken(f"{flag} {text!r} already holds {layout.what} ({_names(present)}); "
                          f"choose another folder{offer}")
    removed = _remove(folder, manifest, flag)
    (said or _say)(f"{flag} {text}: --force deleted the {len(removed)} files memlens wrote "
                   f"there for {layout.what}: {_names([str(p) for p in removed])}")
    return folder


def _remove(folder: Path, manifest: Manifest, flag: str) -> list[Path]:
    removed = []
    for rel in manifest.files:
        if not os.path.lexists(folder / rel):
            continue
        try:
            os.unlink(folder / rel)  # a link is removed, its target left alone
        except OSError as exc:
            raise ConfigError(f"--force: cannot delete {str(folder / rel)!r}: "
                              f"{exc.strerror or exc}") from None
        removed.append(rel)
    for rel in manifest.folders:  # deepest first
        with contextlib.suppress(OSError):
            (folder / rel).rmdir()  # only an empty one goes
    return removed


def _say(text: str) -> None:
    print(f"memlens: {text}", file=sys.stderr)


def claim_out_folder(text: str, force: bool = False, flag: str = "--out") -> Path:
    """`--out DIR` for a new run (claim_folder with the run's layout)."""
    return claim_folder(text, RUN, force=force, flag=flag)


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

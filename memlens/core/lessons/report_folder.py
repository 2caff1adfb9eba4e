"""A lessons report's folder: the names a report writes there, its arms' run folders, and
the report's own record of them (lessons.json's `files` and `run_folders`), by which the
one claim policy (runfolder.claim) refuses a used folder and --force deletes a report."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from memlens.core.runfolder.claim import Layout, Manifest, run_manifest
from memlens.core.runfolder.format import RUN_FILE_NAMES
from memlens.core.safe_read import MAX_REPORT_JSON, FileReadError, read_json

LESSONS_JSON = "lessons.json"
LESSONS_MD = "lessons.md"
CHARTS = "charts"
RUNS = "runs"  # the arms' run folders
REPORT_FORMAT = "memlens-lessons"


def arm_folder_name(preset_label: str, lesson: str, arm: str) -> str:
    """An arm's run folder under RUNS: <preset>-<lesson>-<off|on>."""
    return f"{preset_label}-{lesson}-{arm}"


def _relative(text: object, top: tuple[str, ...], depth: int | None = None) -> Path | None:
    """A path a report lists, when it is one it could have written: relative, without
    '..', under one of `top` (at exactly `depth` parts where given); else None."""
    if not isinstance(text, str) or not text:
        return None
    p = PurePosixPath(text)
    if p.is_absolute() or ".." in p.parts or p.parts[0] not in top or \
            (depth is not None and len(p.parts) != depth) or str(p) != text:
        return None
    return Path(*p.parts)


def report_manifest(folder: Path) -> Manifest | str:
    """What a report in `folder` wrote, by its lessons.json: its files, and the run files
    of each arm folder it lists that holds a run of memlens's; or why there is no record."""
    if not os.path.lexists(folder / LESSONS_JSON):
        return f"no {LESSONS_JSON} lists them"
    try:
        doc = read_json(folder / LESSONS_JSON, MAX_REPORT_JSON, "a lessons report")
    except FileReadError as exc:
        return f"no report of memlens's lists them ({exc})"
    if not isinstance(doc, dict) or doc.get("format") != REPORT_FORMAT:
        return f"its {LESSONS_JSON} is not a memlens lessons report (no format tag)"
    listed, arms = doc.get("files"), doc.get("run_folders")
    if not isinstance(listed, list) or not isinstance(arms, list):
        return (f"its {LESSONS_JSON} lists no files (a report from an older memlens); "
                "delete what you no longer need yourself")
    files = [p for p in (_relative(t, (LESSONS_JSON, LESSONS_MD, CHARTS)) for t in listed)
             if p is not None]
    folders: list[Path] = []
    for arm in (_relative(t, (RUNS,), depth=2) for t in arms):
        if arm is None:
            continue
        folders.append(arm)
        runs = run_manifest(folder / arm) if (folder / arm).is_dir() else None
        if isinstance(runs, Manifest):  # else its files stay unaccounted for: refused
            files += [arm / f for f in runs.files]
    return Manifest(tuple(files), (*folders, Path(CHARTS), Path(RUNS)))


REPORT = Layout("a lessons report", (LESSONS_JSON, LESSONS_MD, CHARTS, RUNS), report_manifest,
                refused=RUN_FILE_NAMES, refused_what="a run's files")


def claim_report_folder(out: str | None, force: bool,
                        said: Callable[[str], None] | None = None) -> Path:
    """The report's folder, claimed by the one policy (recorder.output.choose_folder): a
    new one in runs/, or `out` when it holds no report and no run (with `force`, the files
    an earlier report there lists are deleted first). Made now: a folder that cannot be is
    refused before anything is measured."""
    from memlens.core.options import ConfigError
    from memlens.core.recorder.output import choose_folder

    folder = choose_folder(out, "lessons", force=force, layout=REPORT, said=said)
    try:
        (folder / RUNS).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out!r}: cannot make the report folder there "
                          f"({exc.strerror or exc}); choose a folder you can write to") from None
    return folder


def written_run_folders(runs: list[str], out: Path) -> list[str]:
    """The arms' run folders (as rows name them) that lie in the report's RUNS folder, as
    lessons.json lists them: relative, POSIX."""
    base = (out / RUNS).resolve()
    found = []
    for text in runs:
        try:
            rel = Path(text).resolve().relative_to(base)
        except (ValueError, OSError):
            continue  # an arm recorded elsewhere (the app's export): not this folder's
        if len(rel.parts) == 1:
            found.append(f"{RUNS}/{rel.as_posix()}")
    return sorted(set(found))

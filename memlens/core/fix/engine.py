"""`fix` from start to end: watch the script, plan the fixes of its diagnoses, write the
patched copies, watch them for the same steps and arguments, and write the report.

The fix folder holds `before/` and `after/` (the two run folders, each with the script's
printed output beside it: before.stdout...), `fixed/` (the patched copies: the script, and
the modules of its folder a fix changed), fix.diff, fix.json and patch.json (--write's).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memlens.core.fix.plan import Fix, Planner, copy_path, patched_texts
from memlens.core.fix.report import FIX_JSON, Report, text, unified, write
from memlens.core.fix.runs import WatchedRun, watch_run
from memlens.core.fix.write import PATCH_JSON, save_patch
from memlens.core.options import ConfigError
from memlens.core.recorder.output import choose_folder
from memlens.core.runfolder.claim import Layout

DEFAULT_STEPS = 12  # enough for a diagnosis that needs growth over several steps
PACKAGE_COPY_LIMIT = 2000  # files of a package copied under fixed/ so a patched module imports
FOLDER_PARTS = ("before", "after", "fixed", FIX_JSON, PATCH_JSON)
# A fix's folder, claimed as every producer's is (runfolder.claim); fix has no --force, and
# keeps no record of its files: one that holds a fix is refused whole.
FIX_LAYOUT = Layout("a fix", FOLDER_PARTS,
                    lambda _folder: "fix keeps no record of the files it wrote")

Progress = Callable[[int, int, str], None]  # (stage, of stages, what runs now)


class FixInputError(Exception):
    """Bad input for fix (exit 2): the message says what is wrong, in one line."""


@dataclass
class FixOutcome:
    out: Path
    fixes: list[Fix]
    before: WatchedRun
    after: WatchedRun | None
    entries: list[dict]
    new: list[str]  # diagnoses of the patched copy no fix answers for
    patched_ok: bool
    why_not: str | None  # why the patched copy is not accepted

    def text(self, steps: int) -> str:
        return text(self.entries, steps, self.new)


def fix_folder(out: str | None, script: Path) -> tuple[Path, bool]:
    """The fix folder: `out` (refused where it holds an earlier fix), else a new
    runs/<time>-fix-<script>; and whether this call made it."""
    if out is not None and Path(out).expanduser().is_dir():
        held = [n for n in FOLDER_PARTS if os.path.lexists(Path(out).expanduser() / n)]
        if held:
            raise FixInputError(f"--out {out!r} already holds a fix ({', '.join(held)}): "
                                "choose another folder (fix never overwrites one; nothing "
                                "was deleted)")
    try:
        folder = choose_folder(out, f"fix-{script.stem}", force=None, layout=FIX_LAYOUT)
    except ConfigError as exc:  # FolderTaken too: one line, nothing deleted
        raise FixInputError(str(exc)) from None
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    return folder, made


def fix_script(script: Path, args: list[str], *, out: str | None = None,
               steps: int = DEFAULT_STEPS, progress: Progress | None = None) -> FixOutcome:
    """Run the whole fix (see the module doc); FixInputError for bad input, before the
    user's files are touched (they never are here: --write is core.fix.write)."""
    say = progress or (lambda *_: None)
    script = script.resolve()
    cwd = Path.cwd()
    folder, made = fix_folder(out, script)
    original = script.read_bytes()
    say(1, 3, f"watching {script.name} for {steps} steps")
    before = watch_run(script, args, folder / "before", steps, cwd=cwd,
                       script_dir=script.parent)
    try:
        _check_before(before, script)
    except FixInputError:
        _forget_before(folder, made)  # nothing trained: the same --out takes the next try
        raise
    if script.read_bytes() != original:
        raise FixInputError(f"{script} changed while it was watched: run fix again")
    say(2, 3, "planning the fixes")
    planner = Planner(script)
    fixes = planner.plan(before.diagnoses)
    texts = patched_texts(planner, fixes)
    fixed_dir = folder / "fixed"
    copies = _write_copies(texts, script, fixed_dir) if texts else {}
    after = None
    if texts:
        say(3, 3, f"watching the patched copy for {steps} steps")
        after = watch_run(fixed_dir / script.name, args, folder / "after", steps, cwd=cwd,
                          script_dir=script.parent)
    report = Report(planner, fixes, before, after, fixed_dir, copies)
    entries = report.entries()
    ok, why_not = _accepted(before, after)
    patch = "".join(unified(planner.sources[p].text, t, p, str(copies[p].relative_to(folder)))
                    for p, t in texts.items())
    write(folder, entries, patch)
    save_patch(folder, script=script, args=args, steps=steps, cwd=cwd,
               files={p: (planner.sources[p].text.encode("utf-8"), copies[p]) for p in texts},
               patched_ok=ok, why_not=why_not)
    return FixOutcome(folder, fixes, before, after, entries, report.new_diagnoses(), ok,
                      why_not)


def _check_before(before: WatchedRun, script: Path) -> None:
    if before.doc is None and before.exit_code != 0:
        raise FixInputError(f"{script.name} failed before it trained (exit code "
                            f"{before.exit_code}: {before.last_error_line()}); give it the "
                            "arguments it needs after --")
    if before.doc is None or before.nothing_found:
        raise FixInputError(f"the watch found no model call and no optimizer in "
                            f"{script.name} (it ran to its end, exit code "
                            f"{before.exit_code}): nothing to fix")


def _forget_before(folder: Path, made: bool) -> None:
    """A watch that recorded no training leaves no `before/` (and no folder fix made) that
    would refuse the next try; the script's printed output stays beside it."""
    before = folder / "before"
    if before.is_dir() and not any(before.iterdir()):
        before.rmdir()
    if made and not any(folder.iterdir()):
        folder.rmdir()


def _accepted(before: WatchedRun, after: WatchedRun | None) -> tuple[bool, str | None]:
    """Whether the patched copy runs as far as the original (the same exit code, or 0)."""
    if after is None:
        return False, "nothing was changed"
    if after.exit_code in (0, before.exit_code) and after.doc is not None:
        return True, None
    return False, (f"the patched copy failed (exit code {after.exit_code}: "
                   f"{after.last_error_line()})")


def _write_copies(texts: dict[Path, str], script: Path, fixed_dir: Path) -> dict[Path, Path]:
    """Each changed file's patched text under fixed/, beside the script's copy as it is
    beside the script (a module of a package: that package copied whole first, so it still
    imports); the script is copied even where only a module changed."""
    fixed_dir.mkdir()
    copies: dict[Path, Path] = {}
    for path in texts:
        rel = copy_path(path, script)
        if len(rel.parts) > 1 and not (fixed_dir / rel.parts[0]).exists():
            _copy_package(script.parent / rel.parts[0], fixed_dir / rel.parts[0])
        copies[path] = fixed_dir / rel
    if script not in texts:
        shutil.copy2(script, fixed_dir / script.name)
    for path, new in texts.items():
        copies[path].parent.mkdir(parents=True, exist_ok=True)
        copies[path].write_text(new, encoding="utf-8")
    return copies


def _copy_package(src: Path, dst: Path) -> None:
    count = sum(len(files) for _, _, files in os.walk(src))
    if count > PACKAGE_COPY_LIMIT:
        raise FixInputError(f"{src} holds {count} files: too many to copy beside the patched "
                            "script; fix the module in place by hand")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                    symlinks=True)

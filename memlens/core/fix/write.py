"""`fix --write` (and the app's Write the fix): the accepted patch applied to the user's own
files, from a fix folder's patch.json, only where nothing stands in the way.

Every check is made before anything is written: each file is as it was when the fix was
planned (its sha256), can be written (not read-only), and has no backup beside it yet
(`train.py.orig` is never overwritten); the patched copy ran. Then each file's backup is
created (exclusively) and the file written in place (its mode kept). A write that fails
half way puts back what it had written.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

PATCH_JSON = "patch.json"
BACKUP_SUFFIX = ".orig"


class FixWriteError(Exception):
    """The patch was not written; the message says why and what to do, in one line."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_patch(out: Path, *, script: Path, args: list[str], steps: int, cwd: Path,
               files: dict[Path, tuple[bytes, Path]], patched_ok: bool,
               why_not: str | None) -> None:
    """patch.json: what --write needs (files: the user's file -> (its bytes as planned
    from, its patched copy))."""
    doc = {"script": str(script), "args": args, "steps": steps, "cwd": str(cwd),
           "patched_ok": patched_ok, "why_not": why_not,
           "files": [{"path": str(p), "sha256": sha256(data),
                      "copy": str(copy.relative_to(out))}
                     for p, (data, copy) in files.items()]}
    (out / PATCH_JSON).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def read_patch(out: Path) -> dict:
    try:
        doc = json.loads((out / PATCH_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FixWriteError(f"{out} holds no patch to write ({PATCH_JSON}: {exc}); run "
                            "`main.py fix` first") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise FixWriteError(f"{out / PATCH_JSON} is not a patch memlens wrote")
    return doc


def write_fix(out: Path) -> list[Path]:
    """Apply the patch in fix folder `out` to the user's files; returns the files written.
    FixWriteError (nothing written) where a check fails."""
    doc = read_patch(out)
    if not doc["files"]:
        raise FixWriteError("the fix changed nothing: there is nothing to write")
    if not doc.get("patched_ok"):
        raise FixWriteError("the patched copy did not run as the original did "
                            f"({doc.get('why_not') or 'see fix.json'}): nothing written")
    plan = []
    for f in doc["files"]:
        path, copy = Path(f["path"]), out / f["copy"]
        plan.append((path, _checked(path, f["sha256"]), copy.read_bytes()))
    written: list[tuple[Path, bytes]] = []
    try:
        for path, original, new in plan:
            backup = path.with_name(path.name + BACKUP_SUFFIX)
            with open(backup, "xb") as fh:  # exclusive: an existing backup is never replaced
                fh.write(original)
            written.append((path, original))
            mode = stat.S_IMODE(path.stat().st_mode)
            path.write_bytes(new)
            os.chmod(path, mode)
    except OSError as exc:
        for path, original in written:  # put back what was changed; the backups stay
            path.write_bytes(original)
        raise FixWriteError(f"writing {exc.filename or path} failed ({exc.strerror or exc}); "
                            "the files written were put back") from None
    return [p for p, _ in written]


def _checked(path: Path, expected: str) -> bytes:
    """The file's bytes, where it may be patched; FixWriteError saying why not."""
    try:
        data = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as exc:
        raise FixWriteError(f"{path} cannot be read ({exc.strerror or exc}): nothing "
                            "written") from None
    if sha256(data) != expected:
        raise FixWriteError(f"{path} changed since the fix was planned: nothing written; run "
                            "`main.py fix` again on it")
    why = why_not_writable(path, mode)
    if why:
        raise FixWriteError(f"{why}: nothing written")
    return data


def why_not_writable(path: Path, mode: int | None = None) -> str | None:
    """Why `path` may not be patched in place (read-only, its backup already there, its
    folder not writable), or None."""
    mode = path.stat().st_mode if mode is None else mode
    # A file without write permission is the user's "do not change" (root could write it)
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(path, os.W_OK):
        return (f"{path} is read-only (make it writable, or copy the patched file from the "
                "fix folder yourself)")
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if os.path.lexists(backup):
        return (f"{backup} already exists (memlens never overwrites a backup; move it away "
                "first)")
    if not os.access(path.parent, os.W_OK):
        return f"{path.parent} cannot be written (the backup goes there)"
    return None

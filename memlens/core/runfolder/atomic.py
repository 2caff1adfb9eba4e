"""Atomic file writes: a temporary file beside the target, then one rename."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO


class ExportError(OSError):
    """A file could not be written; the message says which and what to do."""


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write to a temporary file; replace `path` only once everything was written and synced.

    On any failure the temporary file is removed and an existing `path` is left untouched.
    """
    path = Path(path)
    binary = "b" in mode
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temporary(path)
    except OSError as exc:
        raise ExportError(
            f"cannot write {str(path)!r}: {exc.strerror or exc}. "
            "Choose a folder you can write to."
        ) from exc
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding,
                       newline=None if binary else "") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, ExportError):
            raise ExportError(
                f"cannot write {str(path)!r}: {exc.strerror or exc}. "
                "Check free disk space and permissions."
            ) from exc
        raise


def _create_temporary(path: Path) -> tuple[int, str]:
    """A new, unique file beside `path`, opened for writing, with the mode a plain open()
    gives (0666 less the umask). The kernel applies the umask as it creates the file: reading
    the umask meant setting it, process-wide, which raced with every other thread's files."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path, "w") as fh:
        fh.write(text)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def rewrite_in_place(path: str | Path, data: bytes) -> bool:
    """Overwrite an existing file with `data` where it fits in the space the file already
    holds on disk (its size, or its allocated blocks): the last resort on a full disk,
    where a temporary beside it cannot be written. Not atomic; False where it would not fit
    (nothing written then). Links are not followed."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if len(data) > max(st.st_size, st.st_blocks * 512):
            return False
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)

"""Reading a file memlens may not have written: a regular file under a size limit checked
before a byte is read, and JSON whose numbers and texts are bounded as they are parsed.

Every reader of outside files comes through here (run folders, rank folders, allocation
frames, allocations.npy, snapshots, settings files, model files and watched scripts), so a
FIFO, /dev/zero, a folder or a link to a device where a file belongs is one line naming the
path and what it is, never a read that blocks or fills memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from memlens.core.units import format_bytes

# The most bytes memlens reads of each kind of file: far above what memlens writes or a
# person types, far below what would fill memory. One table: the readers import their limit.
MAX_RUN_JSON = 256 << 20
MAX_CSV = 4 << 30  # steps.csv, memory.csv of a long run (parsed whole by numpy)
MAX_FRAMES_JSONL = 1 << 30
MAX_ALLOCATIONS_NPY = 64 << 30  # memory-mapped, never read whole
MAX_SNAPSHOT = 1 << 30  # unpickled from the file as it is read, never held whole as bytes
MAX_SETTINGS = 1 << 20  # a TOML settings file
MAX_SOURCE = 16 << 20  # a model file or a watched script
MAX_REPORT_JSON = 64 << 20  # a lessons report's lessons.json

MAX_INT_DIGITS = 40  # a whole number in a JSON file memlens reads: int64 needs 19 digits
_SURROGATE = re.compile("[\ud800-\udfff]")

_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_NOCTTY", 0))


class FileReadError(ValueError):
    """A file that cannot be read as the kind asked for; the message names the path and
    what is wrong with it."""


def describe_mode(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def what_is(path: str | Path) -> str:
    """`path` in words when it is not a regular file ("does not exist", "is a folder",
    "is a link to /dev/zero, a character device"), else ""."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return ("is a link to a missing file" if os.path.islink(path) else "does not exist")
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    kind = describe_mode(mode)
    if kind is None:
        return ""
    if os.path.islink(path):
        return f"is a link to {os.path.realpath(path)}, {kind}"
    return f"is {kind}"


def _problem(path: Path, kind: str) -> FileReadError:
    return FileReadError(f"{path}: {what_is(path) or 'is ' + kind}, not a regular file")


@contextlib.contextmanager
def open_checked(path: str | Path, limit: int, what: str) -> Iterator[IO[bytes]]:
    """`path` opened for reading once it is known to be a regular file of at most `limit`
    bytes (checked on the open file, so nothing can swap it in between); FileReadError
    otherwise. Opening never blocks: a FIFO is refused, not waited on."""
    path = Path(path)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise FileReadError(f"{path}: {what_is(path)}") from None
    except OSError as exc:
        raise FileReadError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        kind = describe_mode(st.st_mode)
        if kind is not None:
            raise _problem(path, kind)
        if st.st_size > limit:
            raise FileReadError(f"{path}: {format_bytes(st.st_size)}, more than the "
                                f"{format_bytes(limit)} memlens reads of {what}; it is not "
                                f"{what}, or it is damaged")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh


def read_bytes(path: str | Path, limit: int, what: str) -> bytes:
    """The whole of a regular file of at most `limit` bytes (see open_checked). A file
    that grows while it is read is cut at `limit`, never read past it."""
    with open_checked(path, limit, what) as fh:
        try:
            data = _read_all(fh, limit)
        except OSError as exc:
            raise FileReadError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise FileReadError(f"{path}: grew past the {format_bytes(limit)} memlens reads of "
                            f"{what} while it was read")
    return data


def _read_all(fh: IO[bytes], limit: int) -> bytes:
    """What the file holds, at most `limit` + 1 bytes: read at its size (a read of `limit`
    bytes would ask for a buffer that large first), then on in steps where it grew."""
    size = os.fstat(fh.fileno()).st_size
    chunks = [fh.read(min(size, limit) + 1)]
    total = len(chunks[0])
    while size < total <= limit:  # it grew while it was read
        more = fh.read(min(1 << 20, limit + 1 - total))
        if not more:
            break
        chunks.append(more)
        total += len(more)
    return b"".join(chunks)


def read_text(path: str | Path, limit: int, what: str, encoding: str = "utf-8") -> str:
    """read_bytes as text; FileReadError for text that is not `encoding`."""
    try:
        return read_bytes(path, limit, what).decode(encoding)
    except UnicodeDecodeError as exc:
        raise FileReadError(f"{path}: not UTF-8 text (byte {exc.start:,}); it is not {what}, "
                            "or it is damaged") from None


# --- JSON with bounded numbers and text ----------------------------------------------------

class _TooLong(ValueError):
    pass


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise _TooLong(f"a whole number of {len(text):,} digits")
    return int(text)


def clean_text(text: str) -> str:
    """`text` with lone surrogates (valid in JSON's escapes, not in UTF-8) replaced by
    U+FFFD, so it prints and encodes like any other text."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


# A surrogate can only come from an escape ("\ud800"): where the text holds none, the walk
# that cleans every string is skipped.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json(text: str | bytes, max_text: int | None = None) -> Any:
    """json.loads with every whole number at most MAX_INT_DIGITS digits (a longer one is
    damage, and Python refuses past 4,300 digits with its own error), every string and key
    free of lone surrogates, and each cut to `max_text` characters (marked "…") where that
    is given. ValueError (json.JSONDecodeError among them) says what is wrong;
    RecursionError for nesting past Python's limit."""
    if isinstance(text, bytes):
        text = text.decode("utf-8-sig")
    doc = json.loads(text, parse_int=_bounded_int)
    surrogates = _SURROGATE_ESCAPE.search(text) is not None
    if surrogates or max_text is not None:
        doc = clean_strings(doc, max_text, surrogates)
    return doc


def clean_strings(doc: Any, limit: int | None = None, surrogates: bool = True) -> Any:
    """`doc` (parsed JSON) with clean_text applied to every string and key (where
    `surrogates`), and each cut to `limit` characters, marked "…" (where a limit is given).
    Walked without recursion."""
    cap = limit if limit is not None else -1

    def fix(s: str) -> str:
        if surrogates and not s.isascii():
            s = clean_text(s)
        return s if cap < 0 or len(s) <= cap else s[:cap] + "…"

    if isinstance(doc, str):
        return fix(doc)
    stack: list[dict | list] = [doc] if isinstance(doc, dict | list) else []
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            odd = [k for k in node if (surrogates and not k.isascii()) or len(k) > cap >= 0]
            for k in odd:
                node[fix(k)] = node.pop(k)
            items = list(node.items())
        else:
            items = list(enumerate(node))
        for k, v in items:
            if isinstance(v, str):
                if (surrogates and not v.isascii()) or len(v) > cap >= 0:
                    node[k] = fix(v)
            elif isinstance(v, dict | list):
                stack.append(v)
    return doc


def read_json(path: str | Path, limit: int, what: str, max_text: int | None = None) -> Any:
    """A JSON file through read_bytes and parse_json (strings cut to `max_text`);
    FileReadError says what is wrong."""
    data = read_bytes(path, limit, what)
    try:
        return parse_json(data, max_text)
    except UnicodeDecodeError as exc:
        raise FileReadError(f"{path}: not UTF-8 text (byte {exc.start:,}); the file is "
                            "damaged") from None
    except _TooLong as exc:
        raise FileReadError(f"{path}: {exc}, no figure memlens writes is that long; the "
                            "file is damaged") from None
    except ValueError as exc:  # json.JSONDecodeError: its message names line and column
        raise FileReadError(f"{path}: not readable JSON ({exc})") from None
    except RecursionError:
        raise FileReadError(f"{path}: nested too deeply to be {what}; the file is "
                            "damaged") from None


def parse_json_line(line: str) -> Any:
    """One line of a JSON-lines file, as parse_json; ValueError says what is wrong."""
    try:
        return parse_json(line)
    except RecursionError:
        raise ValueError("nested too deeply") from None

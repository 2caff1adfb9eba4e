"""allocations.npy: precise mode's storage events as a binary table, streamed as the run goes.

A standard .npy file (`np.load("allocations.npy")` gives a structured array) with one record
per alloc or free, with the fields of ALLOC_COLUMNS (ALLOC_DTYPE). Its header has a fixed
size and is rewritten after each block the run appends, so the file always says how many
whole rows it holds: a crash keeps what was measured. `frame` indexes
allocation_frames.jsonl, whose line i is frame i as a JSON string ("file:line:function|...",
newest first; "" when none was taken). Codes: action 0 = alloc, 1 = free; category indexes
MEMORY_CATEGORIES; phase indexes SAMPLE_PHASES (run.json's "allocations" says the same).

48 bytes a row, written at disk speed, where text took four times the space and most of a
long run's writing time; allocations.csv is an export made on request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

import numpy as np

from memlens.core.excerpt import excerpt
from memlens.core.history import (
    ALLOC_COLUMNS,
    ColumnTable,
    RunHistory,
    as_alloc_block,
    remap_frames,
)
from memlens.core.records import MEMORY_CATEGORIES, SAMPLE_PHASES, AllocBlock
from memlens.core.runfolder.atomic import atomic_open
from memlens.core.runfolder.format import ACTIONS, ALLOCATIONS_NPY, FRAMES_JSONL
from memlens.core.safe_read import (
    MAX_ALLOCATIONS_NPY,
    MAX_FRAMES_JSONL,
    FileReadError,
    open_checked,
    parse_json_line,
    read_text,
)

# Each field on its natural alignment and 48 bytes a row, so numpy reads a column at memory
# speed (a packed 43-byte row took twice as long to convert). The file's dtype lists the
# fields by offset, as .npy needs.
_OFFSETS = {"t_us": 0, "storage": 8, "addr": 16, "bytes": 24, "step": 32, "frame": 36,
            "action": 40, "category": 41, "phase": 42}
_FORMATS = {"t_us": "<i8", "storage": "<i8", "addr": "<i8", "bytes": "<i8", "step": "<i4",
            "frame": "<i4", "action": "u1", "category": "u1", "phase": "u1"}
ALLOC_DTYPE = np.dtype({"names": list(_OFFSETS), "formats": list(_FORMATS.values()),
                        "offsets": list(_OFFSETS.values()), "itemsize": 48})
_CODES = {"action": ACTIONS, "category": MEMORY_CATEGORIES, "phase": SAMPLE_PHASES}
_MAGIC = b"\x93NUMPY\x01\x00"
_CHUNK = 1 << 20  # rows converted at a time: a few tens of MB of temporaries


class AllocationsFileError(ValueError):
    """allocations.npy or its frames cannot be read; the message says what is wrong."""


def describe() -> dict:
    """What run.json says about the two files, so the folder explains itself."""
    return {"file": ALLOCATIONS_NPY, "frames": FRAMES_JSONL,
            "columns": {n: ALLOC_DTYPE[n].str for n in ALLOC_COLUMNS},
            "codes": {k: list(v) for k, v in _CODES.items()}}


# The header is built once: only the row count changes, inside a fixed-size space-padded
# body (numpy accepts the padding), so rewriting it costs a few microseconds a block.
_DICT_START = f"{{'descr': {ALLOC_DTYPE.descr!r}, 'fortran_order': False, 'shape': ("
_BODY = -(-(len(_MAGIC) + 2 + len(_DICT_START) + 20 + len(",), }") + 1) // 64) * 64 \
    - len(_MAGIC) - 2
_HEAD = _MAGIC + _BODY.to_bytes(2, "little") + _DICT_START.encode("latin1")
HEADER_BYTES = len(_MAGIC) + 2 + _BODY


def _header(rows: int) -> bytes:
    """The .npy header for `rows` records, always HEADER_BYTES long (room for 20 digits)."""
    return _HEAD + f"{rows},), }}".ljust(_BODY - len(_DICT_START) - 1).encode() + b"\n"


def records(rows: np.ndarray) -> np.ndarray:
    """ColumnTable rows (float64, ALLOC_COLUMNS) as ALLOC_DTYPE records."""
    out = np.zeros(len(rows), dtype=ALLOC_DTYPE)  # zeros: the padding bytes too
    for j, name in enumerate(ALLOC_COLUMNS):
        out[name] = rows[:, j]
    return out


def table_rows(recs: np.ndarray) -> np.ndarray:
    """ALLOC_DTYPE records as ColumnTable rows (float64; every value is exact there)."""
    out = np.empty((len(recs), len(ALLOC_COLUMNS)), dtype=np.float64)
    for j, name in enumerate(ALLOC_COLUMNS):
        out[:, j] = recs[name]
    return out


class AllocationsStream:
    """RunWriter's half for precise mode: appends each block of events and makes it durable
    against a crash of the process (flushed, then the header's row count moves on)."""

    def __init__(self, folder: Path) -> None:
        # Unbuffered: each block is one write(2), and the header one pwrite(2) after it.
        self._fh: IO[bytes] = open(folder / ALLOCATIONS_NPY, "w+b", buffering=0)  # noqa: SIM115
        self._frames_fh = open(folder / FRAMES_JSONL, "w", encoding="utf-8")  # noqa: SIM115
        _write_all(self._fh.fileno(), _header(0))
        self._frame_ids: dict[str, int] = {}
        self._frame_luts: dict = {}  # remap_frames's, by recorder
        self.rows = 0

    def append(self, rows: list[tuple] | AllocBlock) -> None:
        """A block of alloc/free events as the trackers drain them (or rows: ALLOC_COLUMNS
        values with a frames string last)."""
        if not len(rows):
            return
        table, new = remap_frames(as_alloc_block(rows), self._frame_ids, self._frame_luts)
        self._write_frames(new)
        self._write_rows(records(table).tobytes(), len(table))

    def _write_frames(self, new: list[str]) -> None:
        if new:  # frames first: a row on disk never names a frame that is not
            self._frames_fh.write("".join(json.dumps(f) + "\n" for f in new))
            self._frames_fh.flush()

    def _write_rows(self, data: bytes, n: int) -> None:
        fd = self._fh.fileno()
        _write_all(fd, data)
        self.rows += n
        os.pwrite(fd, _header(self.rows), 0)

    def close(self) -> None:
        for fh in (self._fh, self._frames_fh):
            if not fh.closed:
                fh.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_allocations(history: RunHistory, folder: Path) -> list[Path]:
    """A history's events as allocations.npy and its frames, each written atomically."""
    table = history.allocs
    n = len(table)
    with atomic_open(folder / FRAMES_JSONL) as fh:
        fh.write("".join(json.dumps(f) + "\n" for f in history.frames))
    with atomic_open(folder / ALLOCATIONS_NPY, "wb") as fh:
        fh.write(_header(n))
        for lo in range(0, n, _CHUNK):
            fh.write(records(table.rows(lo, lo + _CHUNK)).tobytes())
    return [folder / ALLOCATIONS_NPY, folder / FRAMES_JSONL]


def header_rows(head: bytes) -> int | None:
    """The row count an allocations.npy header (its first HEADER_BYTES) declares, or None
    if it is not one of ours."""
    if len(head) < HEADER_BYTES or not head.startswith(_MAGIC):
        return None
    text = head[len(_MAGIC) + 2 : HEADER_BYTES].decode("latin1")
    start = text.find("'shape': (")
    if start < 0:
        return None
    digits = text[start + 10 :].split(",", 1)[0]
    return int(digits) if digits.isdigit() else None


def read_frames(path: Path) -> list[str]:
    try:
        text = read_text(path, MAX_FRAMES_JSONL, f"an {FRAMES_JSONL}")
    except FileReadError as exc:
        raise AllocationsFileError(str(exc)) from None
    lines = text.split("\n")
    lines.pop()  # after the last newline: "" in a whole file, a torn line after a crash
    frames = []
    for i, line in enumerate(lines):
        try:
            frames.append(parse_json_line(line))
        except ValueError as exc:  # json's error, or a number or nesting past the limits
            raise AllocationsFileError(f"{path}: line {i + 1} is not a JSON string "
                                       f"({excerpt(exc, 120)})") from None
    if not all(isinstance(f, str) for f in frames):
        raise AllocationsFileError(f"{path}: every line must be a JSON string")
    return frames


def read_allocations(folder: Path) -> tuple[np.ndarray, list[str]]:
    """allocations.npy's records and the frames they index; AllocationsFileError with the
    reason for a file that is not a regular file, is cut short, of another layout, or holds
    impossible codes."""
    path = folder / ALLOCATIONS_NPY
    frames = read_frames(folder / FRAMES_JSONL) if os.path.lexists(folder / FRAMES_JSONL) \
        else []
    try:
        with open_checked(path, MAX_ALLOCATIONS_NPY, f"an {ALLOCATIONS_NPY}") as fh:
            version = np.lib.format.read_magic(fh)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(fh)
            offset = fh.tell()
            size = os.fstat(fh.fileno()).st_size
    except FileReadError as exc:
        raise AllocationsFileError(str(exc)) from None
    except OSError as exc:
        raise AllocationsFileError(f"{path}: cannot be read ({exc})") from None
    except Exception:  # ValueError, SyntaxError, tokenize.TokenError...: numpy's parse
        # numpy's own message quotes the header: never repeat a file's text
        raise AllocationsFileError(f"{path}: not a .npy file memlens wrote (its header "
                                   "cannot be read)") from None
    if dtype != ALLOC_DTYPE or len(shape) != 1 or fortran:
        raise AllocationsFileError(
            f"{path}: unexpected layout {dtype.names or dtype.str} {shape}; expected a "
            f"1-D table of {', '.join(ALLOC_COLUMNS)} as memlens writes it")
    whole = (size - offset) // dtype.itemsize
    if shape[0] < 0:
        raise AllocationsFileError(f"{path}: its header gives {shape[0]:,} events, fewer than "
                                   "none: the file is damaged")
    if shape[0] > whole:
        raise AllocationsFileError(
            f"{path}: cut short: its header promises {shape[0]:,} events, the file holds "
            f"{whole:,} ({size:,} bytes). It was truncated after the run wrote it.")
    recs = (np.memmap(path, dtype=ALLOC_DTYPE, mode="r", offset=offset, shape=shape)
            if shape[0] else np.empty(0, dtype=ALLOC_DTYPE))
    if len(recs) and not frames:
        raise AllocationsFileError(f"{folder / FRAMES_JSONL}: missing or empty, but "
                                   f"{path.name} holds {len(recs):,} events that name frames")
    for name, limit in (("action", len(ACTIONS)), ("category", len(MEMORY_CATEGORIES)),
                        ("phase", len(SAMPLE_PHASES)), ("frame", len(frames))):
        bad = np.flatnonzero((recs[name] < 0) | (recs[name] >= limit))
        if len(bad):
            held = f" ({FRAMES_JSONL} holds {len(frames):,})" if name == "frame" else ""
            raise AllocationsFileError(
                f"{path}: event {int(bad[0]):,} has {name} {int(recs[name][bad[0]])}, "
                f"outside 0..{limit - 1}{held}: the file is damaged")
    return recs, frames


def load_allocations(folder: Path, history: RunHistory) -> None:
    """Read allocations.npy into a fresh history (no events yet): its frame ids index the
    file's frames, which become the history's frames in the same order."""
    recs, frames = read_allocations(folder)
    extend(history.allocs, recs)
    history.frames.extend(frames)


def extend(table: ColumnTable, recs: np.ndarray) -> None:
    for lo in range(0, len(recs), _CHUNK):
        table.extend(table_rows(recs[lo : lo + _CHUNK]))

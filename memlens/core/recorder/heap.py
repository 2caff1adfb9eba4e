"""The process heap (glibc's mallinfo2): memory no tensor explains, on CPU."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _load_mallinfo2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


_mallinfo2 = _load_mallinfo2()


def process_heap_bytes() -> int | None:
    """Bytes in use by malloc in this process (glibc mallinfo2), or None where unavailable."""
    if _mallinfo2 is None:
        return None
    info = _mallinfo2()
    return int(info.uordblks + info.hblkhd)

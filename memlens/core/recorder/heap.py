"""The process heap (glibc's mallinfo2, CPU) and resident memory (RSS): memory no tensor
explains."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
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


STATM = "/proc/self/statm"  # "size resident shared ...", in pages (Linux; the native twin too)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_rss_bytes() -> int | None:
    """The process's resident memory: /proc/self/statm's resident pages times the page size,
    or None where there is no /proc (macOS, Windows)."""
    try:
        fd = os.open(STATM, os.O_RDONLY)
    except OSError:
        return None
    try:
        return int(os.read(fd, 128).split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None
    finally:
        os.close(fd)

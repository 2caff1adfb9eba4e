"""Writing a value back into a widget without it echoing as a user change."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from PySide6.QtCore import QObject


@contextlib.contextmanager
def signals_blocked(obj: QObject) -> Iterator[None]:
    """QSignalBlocker's job. PySide6 6.12's QSignalBlocker (its unblock() and __exit__) drops
    a reference to None on Python 3.11 each call, which aborts the interpreter at exit once
    enough toggles were written back; blockSignals() is safe."""
    old = obj.blockSignals(True)
    try:
        yield
    finally:
        obj.blockSignals(old)

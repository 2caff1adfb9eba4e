"""The memlens desktop app: the only package where Qt lives."""

import os
import sys

# pyqtgraph picks its Qt binding at import; every app module comes through here first.
os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")


def _keep_none_alive() -> None:
    """PySide6 6.12 on CPython 3.11 drops one reference to None per call of a Qt method that
    returns void (QLabel.setText, QWidget.update, ...), and to True through some virtuals
    Python overrides: a live window reaches zero in seconds and the interpreter aborts with
    "none_dealloc" / "bool_dealloc". From 3.12 on these objects are immortal and the bug is
    harmless; before it, give them references they can never run out of."""
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return
    import ctypes

    for obj in (None, True, False):
        ctypes.c_ssize_t.from_address(id(obj)).value += 1 << 60


_keep_none_alive()

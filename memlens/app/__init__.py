"""The memlens desktop app: the only package where Qt lives."""

import os

# pyqtgraph picks its Qt binding at import; every app module comes through here first.
os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

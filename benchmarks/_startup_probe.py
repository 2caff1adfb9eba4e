"""Run `main.py` as `python main.py` would, and print the wall time of the first painted window.

Used by benchmarks.startup as `python benchmarks/_startup_probe.py`. It wraps
QApplication.exec so that, once the app's event loop starts, an event filter on the main
window notes its first update (the backing store painting the window) and the moment
that paint has finished, and whether torch was imported by then; then the process exits at
once.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

T_PROBE = time.time()
ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    from PySide6.QtCore import QEvent, QObject, QTimer
    from PySide6.QtWidgets import QApplication, QMainWindow

    original_exec = QApplication.exec
    marks: dict[str, float] = {}

    class FirstPaint(QObject):
        def eventFilter(self, obj, event) -> bool:
            if event.type() in (QEvent.UpdateRequest, QEvent.Paint) and "paint" not in marks:
                marks["paint"] = time.time()
                # Runs once the current event (the paint) has been handled.
                QTimer.singleShot(0, done)
            return False

    def done() -> None:
        print(f"STARTUP probe={T_PROBE:.6f} exec={marks['exec']:.6f} "
              f"painted={time.time():.6f} torch={int('torch' in sys.modules)}", flush=True)
        os._exit(0)

    def exec_(self, *args):
        marks["exec"] = time.time()
        windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, QMainWindow)]
        spy = FirstPaint()
        for w in windows:
            w.installEventFilter(spy)
        self._memlens_spy = spy
        if not windows:
            print("STARTUP error: no main window shown", flush=True)
            os._exit(2)
        return original_exec()

    QApplication.exec = exec_
    sys.argv = [str(ROOT / "main.py")]
    sys.path.insert(0, str(ROOT))
    runpy.run_path(str(ROOT / "main.py"), run_name="__main__")


if __name__ == "__main__":
    main()

"""Start-up: the window shown, the interpreter settled for a session, the event loop run."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

from PySide6.QtWidgets import QApplication

from memlens.app.app_settings import AppSettings
from memlens.app.window.first_paint import after_first_paint
from memlens.app.window.main_window import MainWindow

SWITCH_INTERVAL_S = 0.0001  # see finish_start_up

FULL_GC_EVERY = 100  # middle-generation collections per full one (CPython's default: 10)


def finish_start_up(window: MainWindow) -> None:
    """Show the window and settle the interpreter for a session (launch() does this before
    it enters the event loop; the benchmarks mirror it)."""
    window.show()
    # It imports torch (seconds, holding the GIL): not before the window is on screen.
    after_first_paint(window, window.amp_support.check)
    gc.freeze()  # start-up objects live for the whole session: keep GC passes short
    # After the freeze the collector sees almost no old objects, so its guard against full
    # collections (old survivors must grow by a quarter) no longer holds them back: a full
    # collection then runs every 10th middle one, over everything a graph capture or its
    # layout keeps alive, and stops every thread, the GUI's included, for longer than a
    # frame. Full collections come ten times rarer; young garbage is collected as before.
    young, middle, _full = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_GC_EVERY)
    # The training thread runs Python at thousands of steps a second and holds the GIL
    # until CPython asks it to let go, after the switch interval (5 ms by default). Every
    # time Qt calls back into Python on the GUI thread (a timer slot, an item's paint, a
    # bounding rect) it may wait that long for the GIL: a frame makes dozens of such calls.
    # A shorter interval bounds each wait; the worker only pays a few more switches
    # (measured: docs/performance-notes.md, "GIL switch interval").
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def launch(argv: list[str] | None = None, open_path: Path | None = None,
           follow: str | None = None) -> int:
    """`python main.py`: open the window (and `open_path`, a run folder or a snapshot, as
    File > Open does; or follow a run folder another process writes). Returns the exit
    status."""
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    app.setApplicationName("memlens")
    window = MainWindow(settings=AppSettings.user())
    finish_start_up(window)
    if open_path is not None:
        window.opener.open_path(open_path)
    if follow:
        window.follow_run(Path(follow).expanduser())
    code = app.exec()
    if window.running:  # "Quit now": a step that never ended holds the training thread
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the run's files were finalised by abandon(); nothing else is open
    return code

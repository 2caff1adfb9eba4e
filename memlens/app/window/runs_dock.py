"""The Runs dock (View > Runs): the runs panel beside the plots, each ticked run a pin.

A ticked run is read and laid out for the plots (the format's one reader, then its plot
series) on a thread of its own: a long run takes seconds to read, and the window keeps
painting and answering meanwhile, the panel saying which runs are being read."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import QDockWidget, QMainWindow

from memlens.app.panels.runs_panel import RunsPanel
from memlens.app.series.run_series import RunSeries
from memlens.app.window.layout import dock
from memlens.core.runfolder import reader
from memlens.core.runfolder.format import RunFolderError


def read_for_plots(folder: Path) -> RunSeries:
    """A run folder read and laid out as the plots draw it (no Qt: any thread)."""
    series = RunSeries(reader.load_run(folder))
    series.pull()
    return series


class _Answer(QObject):
    """Carries one read's result from its thread (see amp_support._Answer: owned by the
    thread's closure, so a dock deleted meanwhile drops the queued answer)."""

    done = Signal(object, int, object, str)  # folder, ticket, series or None, error text


class RunsDock(QObject):
    """Lists the runs under `runs_dir` (or a folder the user chooses); a ticked run is read
    off the GUI thread, then pinned on `board` (a PinBoard); unticking removes that pin, or
    forgets a read still going. `say(text, ms)` shows a message in the status bar."""

    read_done = Signal(object)  # the folder whose read ended (pinned, refused or dropped)

    def __init__(self, window: QMainWindow, runs_dir: Path | None, board,
                 say: Callable[[str, int], None], view_menu) -> None:
        super().__init__(window)
        self._board, self._say = board, say
        self.panel = RunsPanel(runs_dir)
        self.dock = dock(window, "Runs", self.panel, Qt.RightDockWidgetArea, "runs_dock")
        # A tab beside the events: the right column has no room for a third dock's columns.
        events = window.findChild(QDockWidget, "events_dock")
        if events is not None:
            window.tabifyDockWidget(events, self.dock)
        # Closable, as an optional dock is (Qt enables its View action only then).
        self.dock.setFeatures(self.dock.features() | QDockWidget.DockWidgetClosable)
        self.action = self.dock.toggleViewAction()
        # Hidden until View > Runs (or a remembered layout shows it). Before the window is
        # shown a hide sends no event, so the action, which follows those events, is
        # unticked here.
        self.dock.hide()
        with QSignalBlocker(self.action):
            self.action.setChecked(False)
        self.action.setObjectName("runs_action")
        self.action.setText("&Runs")
        self.action.triggered.connect(lambda on: self.dock.raise_() if on else None)
        view_menu.addAction(self.action)
        self.pin_ids: dict[Path, int] = {}  # a ticked run's folder -> its pin
        self.reading: dict[Path, int] = {}  # a ticked run being read -> its ticket
        self._tickets = 0
        self.panel.run_checked.connect(self._on_run_checked)

    def _on_run_checked(self, folder: Path, on: bool) -> None:
        pin_id = self.pin_ids.pop(folder, None)
        if pin_id is not None and any(p.pin_id == pin_id for p in self._board.pins):
            self._board.remove(pin_id)
        self.reading.pop(folder, None)  # a read still going is dropped when it ends
        if on:
            self._read(folder)
        self._show_reading()

    def _read(self, folder: Path) -> None:
        self._tickets += 1
        ticket = self.reading[folder] = self._tickets
        answer = _Answer()
        answer.done.connect(self._on_read_done)  # queued to the GUI thread

        def work() -> None:
            series, error = None, ""
            try:
                series = read_for_plots(folder)
            except RunFolderError as exc:  # the reader's one error: damaged, or unreadable
                error = str(exc)
            except Exception as exc:  # a folder changed under the reader: said, not raised
                error = f"{folder}: cannot be read as a run ({type(exc).__name__}: {exc})"
            with contextlib.suppress(RuntimeError):
                answer.done.emit(folder, ticket, series, error)

        threading.Thread(target=work, name="memlens-read-run", daemon=True).start()

    def _on_read_done(self, folder: Path, ticket: int, series, error: str) -> None:
        if self.reading.get(folder) == ticket:  # still ticked, and by this tick
            del self.reading[folder]
            if series is None:
                self.panel.set_checked(folder, False)
                self._say(error, 6000)
            else:
                self.pin_ids[folder] = self._board.add(series, folder.name).pin_id
            self._show_reading()
        self.read_done.emit(folder)

    def _show_reading(self) -> None:
        self.panel.show_reading([f.name for f in self.reading])

    def on_pin_removed(self, pin_id: int) -> None:
        """A pin removed in the pins list unticks its run."""
        for folder, held in list(self.pin_ids.items()):
            if held == pin_id:
                del self.pin_ids[folder]
                self.panel.set_checked(folder, False)

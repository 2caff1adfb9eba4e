"""The Runs dock (View > Runs): the runs panel beside the plots, each ticked run a pin."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import QDockWidget

from memlens.app.panels.runs_panel import RunsPanel
from memlens.app.window.layout import dock
from memlens.core.runfolder.format import RunFolderError
from memlens.core.runfolder.reader import load_run


class RunsDock:
    """Lists the runs under the window's runs folder (or one the user chooses); ticking a
    run loads it (the format's one reader) and pins it, unticking removes that pin."""

    def __init__(self, window, view_menu) -> None:
        self.window = window
        self.panel = RunsPanel(window.runs_dir)
        self.dock = dock(window, "Runs", self.panel, Qt.RightDockWidgetArea, "runs_dock")
        # A tab beside the events: the right column has no room for a third dock's columns.
        events = window.findChild(QDockWidget, "events_dock")
        if events is not None:
            window.tabifyDockWidget(events, self.dock)
        # Closable, as an optional dock is (Qt enables its View action only then).
        self.dock.setFeatures(self.dock.features() | QDockWidget.DockWidgetClosable)
        self.action = self.dock.toggleViewAction()
        # Hidden until View > Runs. Before the window is shown a hide sends no event, so
        # the action, which follows those events, is unticked here.
        self.dock.hide()
        with QSignalBlocker(self.action):
            self.action.setChecked(False)
        self.action.setObjectName("runs_action")
        self.action.setText("&Runs")
        self.action.triggered.connect(lambda on: self.dock.raise_() if on else None)
        view_menu.addAction(self.action)
        self.pin_ids: dict[Path, int] = {}  # a ticked run's folder -> its pin
        self.panel.run_checked.connect(self._on_run_checked)
        # A pin removed in the pins list unticks its run.
        window.pins_panel.remove_clicked.connect(self._on_pin_removed)
        # File > Runs folder… moves the list with it.
        window.conventions.runs_folder.folder_changed.connect(self.panel.set_folder)

    def _on_run_checked(self, folder: Path, on: bool) -> None:
        board = self.window.board
        pin_id = self.pin_ids.pop(folder, None)
        if pin_id is not None and any(p.pin_id == pin_id for p in board.pins):
            board.remove(pin_id)
        if not on:
            return
        try:
            history = load_run(folder)
        except RunFolderError as exc:  # the reader's one error: damaged, or unreadable
            self.panel.set_checked(folder, False)
            self.window.statusBar().showMessage(str(exc), 6000)
            return
        self.pin_ids[folder] = board.add_history(history, folder.name).pin_id

    def _on_pin_removed(self, pin_id: int) -> None:
        for folder, held in list(self.pin_ids.items()):
            if held == pin_id:
                del self.pin_ids[folder]
                self.panel.set_checked(folder, False)

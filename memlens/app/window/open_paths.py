"""Opening what a user points at: File > Open (a run folder or a snapshot.pickle), File >
Recent runs, a folder or file dropped on the window, and `app --open PATH`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QApplication, QFileDialog, QMenu, QMessageBox, QTabWidget, QWidget

from memlens.app.app_settings import AppSettings
from memlens.app.window.shown_run import RunOnScreen
from memlens.core.runfolder.open_target import OpenError, resolve
from memlens.core.snapshot_file import SnapshotFileError, read_snapshot

FILTERS = ("Runs and snapshots (run.json steps.csv memory.csv *.pickle *.pkl)",
           "Memory snapshots (*.pickle *.pkl)", "All files (*)")


class Opener(QObject):
    """Owns the window's Open dialog, Recent runs menu and drop target (`window`), and the
    Snapshot tab it adds to `tabs`. A run is opened by `open_run(folder)`; a snapshot here.
    `runs_dir()`: where Open starts when no folder is remembered; `set_title(text)`: the
    window's title for a snapshot."""

    def __init__(self, window: QWidget, settings: AppSettings, shown: RunOnScreen,
                 tabs: QTabWidget, open_run: Callable[[Path], bool],
                 runs_dir: Callable[[], Path | None], set_title: Callable[[str], None]) -> None:
        super().__init__(window)
        self._target, self.settings, self._shown, self._tabs = window, settings, shown, tabs
        self._open_run, self._runs_dir, self._set_title = open_run, runs_dir, set_title
        self.snapshot_view = None  # memlens.app.snapshot_view.SnapshotView, made on first use
        self.recent_menu = QMenu("Recent &runs", window)
        self.recent_menu.setObjectName("recent_menu")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        self._fill_recent()
        window.setAcceptDrops(True)
        window.installEventFilter(self)

    # --- choosing -----------------------------------------------------------------------------
    def open_dialog(self) -> QFileDialog:
        """A run (pick its folder's run.json or any file in it) or a snapshot file."""
        start = self.settings.last_folder() or str(self._runs_dir() or Path.cwd())
        dialog = QFileDialog(self._target, "Open a run or a memory snapshot", start)
        dialog.setObjectName("open_dialog")
        dialog.setOption(QFileDialog.DontUseNativeDialog)
        dialog.setFileMode(QFileDialog.ExistingFile)
        dialog.setNameFilters(list(FILTERS))
        dialog.setAttribute(Qt.WA_DeleteOnClose)
        dialog.fileSelected.connect(self.open_path)
        dialog.open()
        return dialog

    def open_path(self, path: str | Path) -> bool:
        """Open a run folder or snapshot file as File > Open does; a clear message if not."""
        try:
            kind, target = resolve(path)
        except OpenError as exc:
            self._refuse(str(exc))
            return False
        ok = self._open_run(target) if kind == "run" else self.open_snapshot(target)
        tabs = self._tabs
        if ok and kind == "run" and self.snapshot_view is not None and \
                tabs.currentWidget() is self.snapshot_view:
            tabs.setCurrentIndex(0)  # the run just opened, not the snapshot from before
        if ok:
            self.remember(target)
        return ok

    def remember(self, path: Path) -> None:
        """On the Recent runs menu (newest first), and the folder Open starts in."""
        self.settings.add_recent(path)
        self.settings.set_last_folder(Path(path).parent)
        self.settings.sync()
        self._fill_recent()

    def open_snapshot(self, path: Path) -> bool:
        QApplication.setOverrideCursor(Qt.WaitCursor)
        try:
            timeline = read_snapshot(path)
            view = self.view()
            view.show_timeline(timeline)
        except Exception as exc:  # a damaged file is a message, whatever broke in it
            text = str(exc) if isinstance(exc, SnapshotFileError) else (
                f"{path}: cannot be shown as a snapshot ({type(exc).__name__})")
            self._refuse(text, "Cannot open this snapshot")
            return False
        finally:
            QApplication.restoreOverrideCursor()
        self._show_view(view, f"Snapshot: {path.name}", str(path))
        self._set_title(f"memlens: {path.name} (snapshot, read-only)")
        self._shown.say(f"Opened snapshot {path}: {timeline.actions:,} trace events", 8000)
        return True

    def show_run_allocations(self) -> bool:
        """View > Allocations of this run: a precise run's allocation events in the Snapshot
        tab, as its exported snapshot.pickle would show (hover, click any moment), without
        a file. A run without them gets the reason in the status bar."""
        from memlens.app.series.pins import run_name
        from memlens.core.exports.snapshot import build_snapshot, unavailable_reason
        from memlens.core.snapshot_file import timeline_of

        history = self._shown.history
        reason = ("no run is on screen" if history is None
                  else unavailable_reason(history, " to show"))
        if reason is not None:
            self._shown.say(f"No allocations to show: {reason}", 10_000)
            return False
        name = run_name(history.meta or {}, len(history.steps))
        QApplication.setOverrideCursor(Qt.WaitCursor)
        try:  # the snapshot export's window of the run: its last allocation events
            timeline = timeline_of(build_snapshot(history), Path(f"{name} allocations"))
            view = self.view()
            view.show_timeline(timeline)
        finally:
            QApplication.restoreOverrideCursor()
        self._show_view(view, "Snapshot: this run's allocations",
                        f"the allocation events of {name}, as its snapshot.pickle holds them")
        self._shown.say(f"{name}: {timeline.actions:,} allocation events", 8000)
        return True

    def _show_view(self, view, title: str, tip: str) -> None:
        tabs = self._tabs
        tabs.setCurrentWidget(view)
        # the tab names what it shows: not (always) the run the other tabs show
        tabs.setTabText(tabs.indexOf(view), title)
        tabs.setTabToolTip(tabs.indexOf(view), tip)

    def view(self):
        """The Snapshot tab, added on first use."""
        if self.snapshot_view is None:
            from memlens.app.snapshot_view import SnapshotView
            from memlens.app.theme import current_theme

            self.snapshot_view = SnapshotView()
            self.snapshot_view.set_theme(current_theme())
            self._tabs.addTab(self.snapshot_view, "Snapshot")
        return self.snapshot_view

    def _refuse(self, text: str, title: str = "Cannot open this") -> QMessageBox:
        return self._shown.message(title, text, QMessageBox.Warning, "open_error")

    # --- recent ------------------------------------------------------------------------------
    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        items = self.settings.recent()
        for i, path in enumerate(items):
            action = self.recent_menu.addAction(f"&{i + 1} {path}")
            action.setObjectName(f"recent_{i}")
            action.setData(path)
            action.triggered.connect(lambda _=False, p=path: self._open_recent(p))
        if not items:
            self.recent_menu.addAction("(none yet)").setEnabled(False)
        self.recent_menu.addSeparator()
        clear = self.recent_menu.addAction("Clear the list", self._clear_recent)
        clear.setObjectName("recent_clear")
        clear.setEnabled(bool(items))

    def _open_recent(self, path: str) -> None:
        if not Path(path).exists():
            self.settings.remove_recent(path)
            self._fill_recent()
            self._refuse(f"{path!r} no longer exists; it was taken off the Recent list")
            return
        self.open_path(path)

    def _clear_recent(self) -> None:
        for path in self.settings.recent():
            self.settings.remove_recent(path)
        self._fill_recent()

    # --- drag and drop -----------------------------------------------------------------------
    def eventFilter(self, obj, event) -> bool:
        window = getattr(self, "_target", None)  # None while Python tears it down
        if (obj is window and event.type() in (QEvent.DragEnter, QEvent.DragMove)
                and self._dropped_path(event) is not None):
            event.acceptProposedAction()
            return True
        if obj is window and event.type() == QEvent.Drop:
            path = self._dropped_path(event)
            if path is not None:
                event.acceptProposedAction()
                self.open_path(path)
                return True
        return super().eventFilter(obj, event)

    @staticmethod
    def _dropped_path(event) -> Path | None:
        mime = event.mimeData()
        if mime is None or not mime.hasUrls():
            return None
        locals_ = [u.toLocalFile() for u in mime.urls() if u.isLocalFile()]
        return Path(locals_[0]) if locals_ else None

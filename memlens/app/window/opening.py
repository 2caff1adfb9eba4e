"""Showing a saved run or one another process writes: File > Open run folder, File > Follow
run, and a torchrun job's ranks chosen in the status bar (rank_chooser)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QApplication, QMessageBox, QTabWidget, QWidget

from memlens.app.panels.folder_dialog import choose_folder
from memlens.app.panels.window_state import WindowState
from memlens.app.window.rank_chooser import RankChooser
from memlens.app.window.shown_run import RunOnScreen
from memlens.core.runfolder.format import RunFolderError
from memlens.core.runfolder.reader import load_run, rank_folders


class ShowsRuns(RunOnScreen, Protocol):
    """The window, as opening and following need it."""

    def show_run(self, history, folder: Path, name: str | None, adopt_settings: bool
                 ) -> None:
        """Show a run no session here is making (read-only; `folder` its own). `name`
        says what it is where the settings panel does not describe it; `adopt_settings`:
        the panels take its settings."""

    def set_state(self, state: WindowState, message: str = "") -> None: ...


class RunOpening(QObject):
    """File > Open run folder and File > Follow run, a job's ranks (the chooser and the
    Ranks tab, made on first use in `tabs`). `last_folder()`/`runs_dir()`: where the
    dialogs start; `board`: a run opened while one goes becomes a pin."""

    def __init__(self, shows: ShowsRuns, board, rank_chooser: RankChooser, tabs: QTabWidget,
                 last_folder: Callable[[], str | None], runs_dir: Callable[[], Path | None],
                 parent: QWidget) -> None:
        super().__init__(parent)
        self._shows, self._board, self._chooser, self._tabs = shows, board, rank_chooser, tabs
        self._last_folder, self._runs_dir = last_folder, runs_dir
        self.ranks_tab = None  # made when a torchrun job's folder is first opened
        self.followed = None  # app.window.follow_run.FollowedRun while following a folder
        self.awaited = None  # app.window.follow_run.AwaitedFolder: to follow once it appears
        self._rank_mode = ""  # "open" or "follow": what choosing a rank does
        rank_chooser.rank_chosen.connect(self._on_rank_chosen)

    # --- opening a saved run ---------------------------------------------------------------------
    def open_dialog(self):
        start = self._last_folder() or str(self._runs_dir() or Path.cwd())
        return choose_folder(self.parent(), "Open a run folder", start, "open_folder_dialog",
                             self.open_run)

    def open_run(self, folder: Path) -> bool:
        """Load a saved run folder: into the plots, or as a pin while a run is going. A
        distributed watch's parent folder opens its first rank, the others a choice away."""
        shows = self._shows
        folder = self._rank_of(folder, "open")
        QApplication.setOverrideCursor(Qt.WaitCursor)
        try:
            history = load_run(folder)
        except Exception as exc:  # a damaged folder is a message, whatever broke in it
            text = str(exc) if isinstance(exc, RunFolderError | OSError) else (
                f"{folder}: cannot be read as a run ({type(exc).__name__})")
            shows.message("Cannot open this run", text, QMessageBox.Warning, "open_error")
            return False
        finally:
            QApplication.restoreOverrideCursor()
        if shows.running:
            self._board.add_history(history)
            shows.say(f"Opened {folder} as a pinned run", 6000)
            return True
        self.stop_following()
        shows.show_run(history, Path(folder), shown_run_name(history.meta), adopt_settings=True)
        shows.set_state(WindowState.FINISHED, f"Opened {folder} (read-only; pin it to compare)")
        return True

    def _rank_of(self, folder: Path, mode: str) -> Path:
        """The folder to show: a rank folder the chooser offers as it is, a parent of rank
        folders its first rank (offered in the chooser), any other folder as it is (and the
        chooser goes)."""
        chooser = self._chooser
        folder = Path(folder)
        if folder in chooser.folders:
            return folder
        ranks = rank_folders(folder)
        if ranks:
            chooser.set_ranks(folder, ranks)
            self._rank_mode = mode
            self._show_ranks(folder, mode)
            return ranks[0]
        if not self._shows.running:
            chooser.clear()
            self._show_ranks(None, mode)
        return folder

    def _show_ranks(self, folder: Path | None, mode: str) -> None:
        """The Ranks tab shows every rank of a job's folder (and comes to the front), or goes
        when another run is shown."""
        tabs = self._tabs
        if folder is None:
            if self.ranks_tab is not None:
                self.ranks_tab.clear()
                tabs.setTabVisible(tabs.indexOf(self.ranks_tab), False)
            return
        if self.ranks_tab is None:  # only a window that shows a job pays for its plots
            from memlens.app.ranks.tab import RanksTab

            self.ranks_tab = RanksTab()
            tabs.addTab(self.ranks_tab, "Ranks")
        index = tabs.indexOf(self.ranks_tab)
        self.ranks_tab.show_job(folder, follow=mode == "follow")
        tabs.setTabVisible(index, True)
        tabs.setCurrentIndex(index)

    def _on_rank_chosen(self, folder: Path) -> None:
        if self._rank_mode == "follow":
            self.follow_run(folder)
        else:
            self.open_run(folder)

    # --- following a run another process writes (window.follow_run) ----------------------------
    @property
    def following(self) -> bool:
        return self.followed is not None and self.followed.active

    def stop_following(self) -> None:
        if self.awaited is not None:
            self.awaited.stop()
            self.awaited = None
        if self.followed is not None:
            self.followed.stop()
            self.followed = None

    def follow_dialog(self):
        """A folder to follow: one that exists, or the name of one a run will make (typed
        in the dialog's name field), waited for until it appears."""
        start = str(self._runs_dir() or Path.cwd())
        return choose_folder(self.parent(), "Follow a run folder (or one still to come)",
                             start, "follow_dialog", self.follow_run, may_not_exist=True)

    def follow_run(self, folder: Path) -> bool:
        """Show a run folder that another process is writing, growing as it grows (a
        distributed watch's parent folder: one rank at a time, chosen in the status bar).
        A folder that does not exist yet is waited for, and followed once it appears."""
        from memlens.app.window.follow_run import FollowedRun, state_text

        shows = self._shows
        if shows.running:
            shows.say("Stop the run first to follow another", 6000)
            return False
        if not os.path.lexists(folder):
            return self._await(Path(folder))
        folder = self._rank_of(folder, "follow")
        try:
            followed = FollowedRun(folder, self)
        except RunFolderError as exc:
            shows.message("Cannot follow this folder", str(exc), QMessageBox.Warning,
                          "follow_error")
            return False
        self.stop_following()
        self.followed = followed
        # a followed run is another program's: the panel's settings are not its
        shows.show_run(followed.history, Path(folder),
                       shown_run_name(followed.history.meta) or folder.name,
                       adopt_settings=False)
        followed.state_changed.connect(
            lambda state: shows.set_state(WindowState.FINISHED,
                                          state_text(state, Path(folder))))
        followed.failed.connect(lambda text: shows.message(
            "Cannot follow this folder", text, QMessageBox.Warning, "follow_error"))
        followed.start()
        return True

    def _await(self, folder: Path) -> bool:
        from memlens.app.window.follow_run import AwaitedFolder, waiting_text

        self.stop_following()
        self.awaited = AwaitedFolder(folder, self)
        self.awaited.appeared.connect(self.follow_run)
        self._shows.set_state(WindowState.IDLE, waiting_text(folder))
        self.awaited.start()
        return True


def shown_run_name(meta) -> str | None:
    """How the run panel names a run its settings did not make: a watched script's file
    name (with its source), else None (a lab run: its settings are shown)."""
    meta = meta if isinstance(meta, dict) else {}
    if isinstance(meta.get("config"), dict):
        return None
    script = meta.get("script")
    name = Path(str(script)).name if isinstance(script, str) and script else "a recorded run"
    return f"{name}, watched" if meta.get("source") == "watch" else name

"""Showing a saved run or one another process writes: File > Open run folder, File > Follow
run, and a torchrun job's ranks chosen in the status bar (rank_chooser)."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox

from memlens.app.panels.window_state import WindowState
from memlens.core.config import RunConfig
from memlens.core.options import ConfigError
from memlens.core.runfolder.format import RunFolderError
from memlens.core.runfolder.reader import load_run, rank_folders


class RunOpening:
    def __init__(self, window) -> None:
        self.window = window
        self.followed = None  # app.window.follow_run.FollowedRun while following a folder
        self.awaited = None  # app.window.follow_run.AwaitedFolder: to follow once it appears
        self._rank_mode = ""  # "open" or "follow": what choosing a rank does
        window.rank_chooser.rank_chosen.connect(self._on_rank_chosen)

    # --- opening a saved run ---------------------------------------------------------------------
    def open_dialog(self) -> None:
        w = self.window
        start = w.app_settings.last_folder() or str(w.runs_dir or Path.cwd())
        folder = QFileDialog.getExistingDirectory(w, "Open a run folder", start)
        if folder:
            self.open_run(Path(folder))

    def open_run(self, folder: Path) -> bool:
        """Load a saved run folder: into the plots, or as a pin while a run is going. A
        distributed watch's parent folder opens its first rank, the others a choice away."""
        w = self.window
        folder = self._rank_of(folder, "open")
        QApplication.setOverrideCursor(Qt.WaitCursor)
        try:
            history = load_run(folder)
        except Exception as exc:  # a damaged folder is a message, whatever broke in it
            text = str(exc) if isinstance(exc, RunFolderError | OSError) else (
                f"{folder}: cannot be read as a run ({type(exc).__name__})")
            w.message("Cannot open this run", text, QMessageBox.Warning, "open_error")
            return False
        finally:
            QApplication.restoreOverrideCursor()
        if w.running:
            w.board.add_history(history)
            w.statusBar().showMessage(f"Opened {folder} as a pinned run", 6000)
            return True
        self.stop_following()
        w.session = None
        w.loaded_from = Path(folder)
        w.show_history(history)
        config = (history.meta or {}).get("config")
        if isinstance(config, dict):
            try:
                cfg = RunConfig.from_dict(config)
                w.run_panel.set_config(cfg)
                w.techniques_panel.set_toggles(cfg.techniques)
            except (ConfigError, TypeError, ValueError):
                pass  # an odd config does not stop the run from being shown
        w.run_panel.note_shown_run(shown_run_name(history.meta))
        w.set_state(WindowState.FINISHED, f"Opened {folder} (read-only; pin it to compare)")
        return True

    def _rank_of(self, folder: Path, mode: str) -> Path:
        """The folder to show: a rank folder the chooser offers as it is, a parent of rank
        folders its first rank (offered in the chooser), any other folder as it is (and the
        chooser goes)."""
        chooser = self.window.rank_chooser
        folder = Path(folder)
        if folder in chooser.folders:
            return folder
        ranks = rank_folders(folder)
        if ranks:
            chooser.set_ranks(folder, ranks)
            self._rank_mode = mode
            self._show_ranks(folder, mode)
            return ranks[0]
        if not self.window.running:
            chooser.clear()
            self._show_ranks(None, mode)
        return folder

    def _show_ranks(self, folder: Path | None, mode: str) -> None:
        """The Ranks tab shows every rank of a job's folder (and comes to the front), or goes
        when another run is shown."""
        w = self.window
        if folder is None:
            if w.ranks_tab is not None:
                w.ranks_tab.clear()
                w.tabs.setTabVisible(w.tabs.indexOf(w.ranks_tab), False)
            return
        if w.ranks_tab is None:  # only a window that shows a job pays for its plots
            from memlens.app.ranks.tab import RanksTab

            w.ranks_tab = RanksTab()
            w.tabs.addTab(w.ranks_tab, "Ranks")
        index = w.tabs.indexOf(w.ranks_tab)
        w.ranks_tab.show_job(folder, follow=mode == "follow")
        w.tabs.setTabVisible(index, True)
        w.tabs.setCurrentIndex(index)

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

    def follow_dialog(self) -> None:
        w = self.window
        start = str(w.runs_dir or Path.cwd())
        folder = QFileDialog.getExistingDirectory(w, "Follow a run folder", start)
        if folder:
            self.follow_run(Path(folder))

    def follow_run(self, folder: Path) -> bool:
        """Show a run folder that another process is writing, growing as it grows (a
        distributed watch's parent folder: one rank at a time, chosen in the status bar).
        A folder that does not exist yet is waited for, and followed once it appears."""
        from memlens.app.window.follow_run import FollowedRun, state_text

        w = self.window
        if w.running:
            w.statusBar().showMessage("Stop the run first to follow another", 6000)
            return False
        if not os.path.lexists(folder):
            return self._await(Path(folder))
        folder = self._rank_of(folder, "follow")
        try:
            followed = FollowedRun(folder, w)
        except RunFolderError as exc:
            w.message("Cannot follow this folder", str(exc), QMessageBox.Warning,
                      "follow_error")
            return False
        self.stop_following()
        self.followed, w.session, w.loaded_from = followed, None, Path(folder)
        w.show_history(followed.history)
        # a followed run is another program's: the panel's settings are not its
        w.run_panel.note_shown_run(shown_run_name(followed.history.meta) or folder.name)
        followed.state_changed.connect(
            lambda state: w.set_state(WindowState.FINISHED, state_text(state, Path(folder))))
        followed.failed.connect(lambda text: w.message(
            "Cannot follow this folder", text, QMessageBox.Warning, "follow_error"))
        followed.start()
        return True


    def _await(self, folder: Path) -> bool:
        from memlens.app.window.follow_run import AwaitedFolder, waiting_text

        self.stop_following()
        self.awaited = AwaitedFolder(folder, self.window)
        self.awaited.appeared.connect(self.follow_run)
        self.window.set_state(WindowState.IDLE, waiting_text(folder))
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

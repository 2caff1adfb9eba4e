"""What the parts of the window may ask of it: the run on screen and two ways to speak. The
main window is the one implementation; each part takes it typed as this, not the window."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from PySide6.QtWidgets import QMessageBox

from memlens.app.series.run_series import RunSeries
from memlens.core.history import RunHistory


class RunOnScreen(Protocol):
    @property
    def history(self) -> RunHistory | None:
        """The run the plots show (live, opened or followed), or None."""

    @property
    def series(self) -> RunSeries | None:
        """What the plots draw of it."""

    @property
    def running(self) -> bool:
        """A run started here has not ended."""

    @property
    def shown_folder(self) -> Path | None:
        """The run's own folder: where its session writes it, or where it was opened."""

    def say(self, text: str, ms: int) -> None:
        """A message in the status bar for `ms` milliseconds."""

    def message(self, title: str, text: str, icon: QMessageBox.Icon,
                name: str) -> QMessageBox:
        """A window-modal message box, opened (not exec'd)."""

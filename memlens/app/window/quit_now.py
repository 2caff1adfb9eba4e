"""Closing the window while a step runs: the offer to quit at once (the run's files are
kept, complete up to the last finished step) or to keep waiting for the step."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMessageBox


def offer_quit_now(message, quit_now) -> QMessageBox:
    """Ask, in a box `message(...)` opens, whether to quit now (`quit_now()`) or wait."""
    box = message("The run is still stopping",
                  "The current step has not ended yet. Quit now? The run's files are kept, "
                  "complete up to the last finished step.", QMessageBox.Question, "quit_now")
    box.setStandardButtons(QMessageBox.NoButton)
    quit_button = box.addButton("Quit now", QMessageBox.AcceptRole)
    box.addButton("Keep waiting", QMessageBox.RejectRole)

    def on_finished(_result: int) -> None:
        if box.clickedButton() is quit_button:  # after the box has gone: then the window
            QTimer.singleShot(0, quit_now)

    box.finished.connect(on_finished)
    return box

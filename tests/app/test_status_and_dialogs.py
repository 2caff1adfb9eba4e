"""The window's small promises (#49 item 7), each driven as a user would: status-bar
messages shown whole, the Runs dock's open state remembered, the dark theme on check boxes
and dialogs, File > Follow run… for a folder still to come, and what Help says of AMP."""

from __future__ import annotations

import os

import numpy as np
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QStyle,
    QStyleOptionButton,
    QTextBrowser,
)

from memlens.app.app_settings import AppSettings
from memlens.app.theme import LIGHT, apply_theme
from memlens.app.window.main_window import MainWindow
from memlens.core.runfolder.writer import RunWriter
from tests.app.drive import pixels, wait_frames
from tests.app.test_view_help_theme import run_to_end
from tests.core.test_run_follow import sample, step_record


def action(window, name: str) -> QAction:
    found = window.findChild(QAction, name)
    assert found is not None, name
    return found


def test_a_status_message_shows_whole_in_a_narrow_window(qtbot, window, tmp_path):
    window.resize(1024, 768)
    run_to_end(qtbot, window, steps=3)
    folder = tmp_path / "exports of the run" / "a folder whose name is long enough to cut"
    written = window.export_to(folder, {"run files"})
    assert written
    bar = window.statusBar()
    text = bar.currentMessage()
    assert text == f"Wrote {len(written)} files to {folder}"
    wait_frames(qtbot, window, 2)
    fields = [w for w in bar.findChildren(QLabel) if w.objectName().startswith("status_")]
    shown = [w for w in fields if w.isVisible()]
    left_edge = min((w.geometry().x() for w in shown), default=bar.width())
    assert bar.fontMetrics().horizontalAdvance(text) <= left_edge  # the message's room
    bar.clearMessage()  # the fields come back when it goes
    assert all(w.isVisible() for w in fields if w.objectName() != "status_progress"
               or w.text())


def test_the_runs_dock_open_state_is_remembered(qtbot, window, tmp_path, settings_file):
    window.runs_dock.action.trigger()
    qtbot.waitUntil(window.runs_dock.dock.isVisible, timeout=5000)
    window.close()
    again = MainWindow(runs_dir=tmp_path / "runs", settings=AppSettings.at(settings_file))
    qtbot.addWidget(again)
    again.show()
    qtbot.waitExposed(again)
    assert again.runs_dock.dock.isVisible() and again.runs_dock.action.isChecked()


def test_dark_check_boxes_and_dialogs_are_dark(qtbot, window):
    try:
        action(window, "theme_dark_action").trigger()
        box = window.techniques_panel.fields["retain_graph"].widget
        assert not box.isChecked()
        wait_frames(qtbot, window, 2)
        option = QStyleOptionButton()
        box.initStyleOption(option)
        rect = box.style().subElementRect(QStyle.SE_CheckBoxIndicator, option, box)
        image = pixels(box.grab().toImage())[rect.top():rect.bottom() + 1,
                                             rect.left():rect.right() + 1, :3]
        window_colour = np.array(window.palette().window().color().getRgb()[:3])[::-1]
        # the unchecked box's frame stands out from the window around it
        assert np.abs(image.astype(int) - window_colour).sum(axis=2).max() >= 150
        window.opening.open_dialog()  # File > Open run folder…: Qt's own, themed
        dialog = window.findChild(QFileDialog, "open_folder_dialog")
        assert dialog is not None and dialog.testOption(QFileDialog.DontUseNativeDialog)
        assert dialog.palette().window().color().lightness() < 80
        dialog.reject()
        rows = window.view_actions.show_rows()
        assert rows.views["steps"].palette().base().color().lightness() < 80
        rows.close()
    finally:
        apply_theme(LIGHT, window.plots.plots)


def test_follow_run_can_name_a_folder_still_to_come(qtbot, window, tmp_path):
    action(window, "follow_run_action").trigger()
    dialog = window.findChild(QFileDialog, "follow_dialog")
    assert dialog is not None and dialog.isVisible()
    folder = tmp_path / "a run not started yet"
    dialog.setDirectory(str(tmp_path))
    dialog.selectFile(folder.name)  # typed in the dialog's name field
    dialog.accept()
    assert window.run_panel.state_label.text() == f"Waiting for {folder} to appear…"
    writer = RunWriter(folder)  # the run starts: its folder appears, and is followed
    writer.on_start({"source": "watch", "pid": os.getpid()})
    writer.on_samples([sample(0, "forward")])
    writer.on_steps([(step_record(0), ())])
    writer.flush()
    qtbot.waitUntil(lambda: window.following, timeout=5000)
    writer.on_finish({"steps_done": 1})


def test_help_says_of_amp_what_the_run_panel_accepts(qtbot, window):
    """Help said fp16 was CUDA's while the app ran fp16 on CPU: they agree now."""
    action(window, "help_techniques_action").trigger()
    page = window.findChild(QTextBrowser, "help_techniques")
    text = " ".join(page.toPlainText().split())
    amp = text.split("amp (off / bf16 / fp16)", 1)[1].split("leak_loss_sum", 1)[0]
    combo = window.techniques_panel.fields["amp"].widget
    fp16 = combo.model().item(combo.findText("fp16"))
    assert fp16.isEnabled()  # this CPU machine may choose it ...
    assert "fp16" in amp and "on CPU" in amp  # ... and Help says it runs on CPU
    assert "fp16 with a GradScaler on CUDA" not in amp

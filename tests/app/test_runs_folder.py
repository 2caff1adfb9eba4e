"""File > Runs folder…: where new runs go, remembered, whatever folder the app started in;
and the Start note while a run goes."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QPushButton

from memlens.app.app_settings import AppSettings
from memlens.app.window.main_window import MainWindow
from tests.app.drive import choose, click, wait_steps
from tests.app.test_view_help_theme import action


def test_runs_go_to_the_chosen_runs_folder_and_into_recent_runs(qtbot, window, tmp_path,
                                                                settings_file):
    chosen = tmp_path / "my runs"
    chosen.mkdir()
    action(window, "runs_folder_action").trigger()
    dialog = window.findChild(QFileDialog, "runs_folder_dialog")
    assert dialog is not None and dialog.isVisible()
    with qtbot.waitSignal(dialog.fileSelected, timeout=5000):
        dialog.selectFile(str(chosen))
        dialog.accept()
    assert str(chosen) in action(window, "runs_folder_action").text()  # shown in the menu

    choose(window, steps=3)
    action(window, "start_action").trigger()
    qtbot.waitUntil(lambda: window.state == "finished", timeout=120_000)
    folder = window.session.folder
    assert folder.parent == chosen.resolve() and (folder / "run.json").is_file()
    recent = window.opener.recent_menu
    recent.aboutToShow.emit()
    listed = [a.data() for a in recent.actions() if a.data()]
    assert listed[0] == str(folder.resolve())

    window.close()
    again = MainWindow(settings=AppSettings.at(settings_file))
    qtbot.addWidget(again)
    assert again.runs_dir == chosen.resolve()  # remembered across launches


def test_the_runs_folder_does_not_depend_on_where_the_app_was_started(qtbot, tmp_path,
                                                                      monkeypatch):
    from memlens.app.app_settings import default_runs_folder

    monkeypatch.chdir(tmp_path)  # a desktop launcher starts the app in the home folder
    window = MainWindow(settings=AppSettings.at(tmp_path / "fresh.ini"))
    qtbot.addWidget(window)
    assert window.runs_dir.is_absolute()
    assert window.runs_dir == default_runs_folder()
    assert tmp_path not in window.runs_dir.parents


def test_start_while_a_run_goes_says_so_in_full(qtbot, window, monkeypatch):
    from memlens.app.panels import run_panel

    monkeypatch.setattr(run_panel, "NOTE_MS", 300, raising=False)
    window.resize(1280, 800)
    choose(window, steps=100_000)
    click(qtbot, window.findChild(QPushButton, "run_button"))
    wait_steps(qtbot, window, 2)
    label = window.run_panel.state_label
    qtbot.waitUntil(lambda: window.state == "running", timeout=30_000)
    state = label.text()
    action(window, "start_action").trigger()  # Ctrl+R
    assert "already going" in label.text()

    def whole() -> bool:
        box = label.contentsRect()
        need = label.fontMetrics().boundingRect(box, Qt.TextWordWrap, label.text())
        return need.width() <= box.width() and need.height() <= box.height()

    qtbot.waitUntil(whole, timeout=5000)
    assert label.isVisible()
    qtbot.waitUntil(lambda: label.text() == state, timeout=5000)  # then the state again
    window.stop_run()
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)

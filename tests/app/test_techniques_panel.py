"""The techniques panel says what its edits act on and which techniques differ from the
defaults (#49 item 5): a setting left from an earlier run is shown, Reset sets them back,
a followed watched script is not called "live", and nothing under the run panel's state
line moves when that line gets longer."""

from __future__ import annotations

import os

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QLabel, QPushButton

from memlens.app.app_settings import AppSettings
from memlens.app.window.main_window import MainWindow
from memlens.core.config import TechniqueToggles
from memlens.core.runfolder.writer import RunWriter
from tests.app.drive import choose, click, wait_frames
from tests.app.test_view_help_theme import run_to_end
from tests.core.test_run_follow import sample, step_record


def test_techniques_left_from_the_last_run_are_shown_and_reset(qtbot, window, tmp_path,
                                                              settings_file):
    panel = window.techniques_panel
    changed = window.findChild(QLabel, "techniques_changed")
    assert changed is not None and "defaults" in changed.text().lower()
    panel.fields["zero_grad"].widget.setCurrentText("off")
    run_to_end(qtbot, window, steps=3)
    window.close()  # the next launch remembers the settings, techniques included
    again = MainWindow(runs_dir=tmp_path / "runs", settings=AppSettings.at(settings_file))
    qtbot.addWidget(again)
    again.show()
    qtbot.waitExposed(again)
    choose(again, "lstm", steps=3)  # another preset: the technique is still off, and said
    changed = again.findChild(QLabel, "techniques_changed")
    assert changed.text() == "Not the defaults: zero grad off"
    assert again.techniques_panel.fields["zero_grad"].label.property("changed")
    click(qtbot, again.run_panel.reset_button)  # Reset sets them back, and says so
    assert again.techniques_panel.toggles() == TechniqueToggles()
    assert "default" in again.techniques_panel.note.text()
    assert not again.techniques_panel.fields["zero_grad"].label.property("changed")
    click(qtbot, again.run_panel.run_button)
    qtbot.waitUntil(lambda: again.state == "finished", timeout=120_000)
    assert again.session.config.techniques == TechniqueToggles()
    # the panel's own Defaults button, for a choice made by hand
    again.techniques_panel.fields["eval_mode"].widget.setChecked(False)
    button = again.findChild(QPushButton, "techniques_defaults_button")
    click(qtbot, button)
    assert again.techniques_panel.toggles() == TechniqueToggles()
    assert not button.isEnabled()


def test_following_a_watched_script_does_not_call_the_panel_live(qtbot, window, tmp_path):
    panel = window.techniques_panel
    assert "live:" not in panel.title()  # nothing runs: the next run's
    choose(window, steps=100_000)
    click(qtbot, window.run_panel.run_button)
    qtbot.waitUntil(lambda: window.state == "running", timeout=60_000)
    assert "live:" in panel.title()
    window.stop_run()
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    assert "live:" not in panel.title()

    folder = tmp_path / "watched"
    writer = RunWriter(folder)
    writer.on_start({"source": "watch", "pid": os.getpid()})
    writer.on_samples([sample(0, "forward")])
    writer.on_steps([(step_record(0), ())])
    writer.flush()
    assert window.follow_run(folder) and window.following
    assert "live:" not in panel.title() and "watched script" in panel.title()
    writer.on_finish({"steps_done": 1})


def test_a_longer_state_line_moves_nothing_under_it(qtbot, tmp_path):
    runs = tmp_path / ("a folder with a long name for its runs " * 3).strip()
    window = MainWindow(runs_dir=runs, settings=AppSettings.at(tmp_path / "s.ini"))
    qtbot.addWidget(window)
    window.resize(1024, 768)
    window.show()
    qtbot.waitExposed(window)
    panel = window.techniques_panel
    label = window.run_panel.state_label

    def top() -> int:
        return panel.mapTo(window, QPoint(0, 0)).y()

    before = top()
    run_to_end(qtbot, window, steps=2)
    wait_frames(qtbot, window, 2)
    assert str(runs.name) in label.text() or "saved in" in label.text()
    assert top() == before
    assert label.toolTip() == label.text()  # cut on screen, whole in its tooltip

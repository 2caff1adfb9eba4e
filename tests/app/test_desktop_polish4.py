"""Issue #31, items 7 and 10: exact bytes everywhere, a whole "already going" note, the runs
folder, the leak_loss_sum tooltip, the graph tab after Reset, --follow of a folder still to
come and View > Theme; each driven as a user would."""

from __future__ import annotations

import os
import re

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage, QPainter, QPalette
from PySide6.QtWidgets import QApplication, QFileDialog, QGraphicsTextItem, QPushButton

from memlens.app.app_settings import AppSettings
from memlens.app.graph.boxes import graph_font
from memlens.app.theme import DARK, LIGHT, apply_theme, current_theme
from memlens.app.window.main_window import MainWindow
from memlens.core.runfolder.writer import RunWriter
from tests.app.drive import choose, click, wait_steps
from tests.app.test_view_help_theme import action, run_to_end
from tests.core.test_run_follow import sample, step_record

BYTE_FIGURE = re.compile(r"[+-]?[\d,.]+ (?:B|KiB|MiB|GiB)\b")


# --- 7: exact bytes --------------------------------------------------------------------------


def test_exact_bytes_re_renders_the_effects_of_toggles_made_before_the_switch(qtbot, window):
    choose(window, steps=100_000)
    click(qtbot, window.findChild(QPushButton, "run_button"))
    wait_steps(qtbot, window, 12)
    window.techniques_panel.fields["retain_graph"].widget.setChecked(True)  # flipped live
    toggles = lambda: [e for e in window.events_panel.events if e.kind == "toggle"]  # noqa: E731
    qtbot.waitUntil(lambda: bool(toggles()), timeout=30_000)
    wait_steps(qtbot, window, toggles()[0].step + 12)  # steps after it to measure
    window.stop_run()
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    window.refresh_now()
    rows = [i for i, e in enumerate(window.events_panel.events) if e.kind == "toggle"]
    assert len(rows) == 1
    item = window.events_panel.list.item(rows[0])
    binary = item.toolTip()
    figures = BYTE_FIGURE.findall(binary)
    assert figures and any(f.endswith("iB") for f in figures), binary

    action(window, "exact_bytes_action").trigger()
    exact = BYTE_FIGURE.findall(item.toolTip())
    assert len(exact) == len(figures)
    assert all(re.fullmatch(r"[+-]?\d{1,3}(,\d{3})* B", f) for f in exact), exact
    assert window.events_panel.detail.text() == item.toolTip()  # the pane shows it too

    action(window, "exact_bytes_action").trigger()
    assert BYTE_FIGURE.findall(item.toolTip()) == figures  # and back


def _as_bytes(figure: str) -> float:
    number, unit = figure.lstrip("+").replace(",", "").split()
    return float(number) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(unit)


def test_exact_bytes_re_renders_a_leak_found_before_the_switch(qtbot, window):
    """A leak's explanation ("grows 1.2 MiB per step") written in MiB before View > Exact
    bytes is written again in bytes after it, each the same figure to its three digits, and
    back again: also in the run folder's events read back."""
    # growth every step (eval off), over the leak check's threshold: the default sizes
    choose(window, steps=100_000, eval_every=0, batch_size=0, width=0)
    click(qtbot, window.findChild(QPushButton, "run_button"))
    wait_steps(qtbot, window, 4)
    window.techniques_panel.fields["leak_cache"].widget.setChecked(True)  # flipped live
    leaks = lambda: [i for i, e in enumerate(window.events_panel.events)  # noqa: E731
                     if e.kind == "leak"]
    qtbot.waitUntil(lambda: bool(leaks()), timeout=60_000)
    window.stop_run()
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    item = window.events_panel.list.item(leaks()[0])
    window.events_panel.list.setCurrentItem(item)
    binary = BYTE_FIGURE.findall(item.toolTip())
    assert binary and all(f.endswith("iB") for f in binary), item.toolTip()

    action(window, "exact_bytes_action").trigger()
    exact = BYTE_FIGURE.findall(item.toolTip())
    assert len(exact) == len(binary)
    assert all(re.fullmatch(r"[+-]?\d{1,3}(,\d{3})* B", f) for f in exact), exact
    for b, e in zip(binary, exact, strict=True):  # the same figure, more exactly
        assert abs(_as_bytes(b) - _as_bytes(e)) <= 0.01 * _as_bytes(e), (b, e)
    assert window.events_panel.detail.text() == item.toolTip()  # the pane shows it too
    action(window, "exact_bytes_action").trigger()
    assert BYTE_FIGURE.findall(item.toolTip()) == binary  # and back


def test_log_scale_with_exact_bytes_labels_every_tick_over_the_whole_range(qtbot, window):
    window.resize(1280, 800)
    run_to_end(qtbot, window, steps=4)
    action(window, "exact_bytes_action").trigger()
    action(window, "log_memory_plot_action").trigger()
    memory = window.plots.memory_plot
    axis = memory.getPlotItem().getAxis("left")
    floor = axis.log_floor * axis.unit  # bytes at the bottom edge
    memory.getPlotItem().vb.setYRange(0, np.log10(2**36 / floor), padding=0)  # 1 KiB..64 GiB
    qtbot.waitUntil(lambda: axis.range[1] >= np.log10(2**35 / floor))
    image = QImage(10, 10, QImage.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    assert specs is not None
    drawn = [text for _rect, _flags, text in specs[2]]
    values = axis.tickValues(axis.range[0], axis.range[1], axis.height())[0][1]
    assert len(values) >= 4
    assert drawn == axis.tickStrings(values, 1, 1)  # every tick has its label
    units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    labelled = []
    for text, v in zip(drawn, values, strict=True):
        number, unit = text.split()
        labelled.append(float(number.replace(",", "")) * units[unit])
        assert labelled[-1] == round(floor * 10**v)  # each label the tick's exact bytes
    assert max(labelled) > 2**30


# --- 10a: Ctrl+R while a run goes ------------------------------------------------------------


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


# --- 10b: the runs folder --------------------------------------------------------------------


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


# --- 10c: the leak_loss_sum tooltip ----------------------------------------------------------


def test_leak_loss_sum_tooltip_says_what_a_training_run_shows(qtbot, window):
    field = window.techniques_panel.fields["leak_loss_sum"]
    tip = field.widget.toolTip()
    field.widget.setChecked(True)
    run_to_end(qtbot, window, steps=14, eval_every=0)
    leaks = [e for e in window.history.events() if e.kind == "leak"]
    kept = [e for e in leaks if "autograd nodes" in e.message]
    assert len(kept) == 1 and len(leaks) == 1  # nodes kept, no tensor memory growth
    assert kept[0].message.split(":")[0] in tip  # the tooltip names the event the run shows
    allocated = window.history.steps.column("allocated_bytes")
    growth = (allocated[-1] - allocated[2]) / (len(allocated) - 3)
    assert growth == 0 and "0 B a step" in tip
    assert "grows step after step" not in tip


# --- 10d: the graph tab after Reset ----------------------------------------------------------


def test_graph_tab_texts_stay_readable_after_reset(qtbot, window):
    window.resize(1280, 800)
    window.tabs.setCurrentWidget(window.graph_tab)
    panel = window.graph_tab.ensure_panel()
    qtbot.waitUntil(panel.isVisible)
    view = panel.graph_view
    zoom_before = view.zoom
    trend = panel.trend

    def trend_fits() -> bool:
        fm = trend.fontMetrics()
        return all(fm.horizontalAdvance(text) <= trend.width() - 8
                   for _kind, text in trend.lines(fm))

    assert "no captures yet" in " ".join(t for _k, t in trend.lines(trend.fontMetrics()))
    assert trend_fits()

    run_to_end(qtbot, window, steps=4, preset="lstm", lstm_cell=True, capture_every=2)
    qtbot.waitUntil(lambda: panel.graph_layout is not None, timeout=60_000)
    qtbot.waitUntil(lambda: view.zoom < zoom_before, timeout=10_000)  # fitted to the view

    click(qtbot, window.run_panel.reset_button)
    messages = [i for i in panel.scene.items() if isinstance(i, QGraphicsTextItem)]
    assert len(messages) == 1
    shown = messages[0].font().pointSizeF() * view.zoom
    assert shown == graph_font().pointSizeF() * zoom_before
    assert trend_fits()


# --- 10e: --follow a folder still to come ----------------------------------------------------


def test_following_a_folder_that_does_not_exist_yet_waits_for_it(qtbot, window, tmp_path):
    folder = tmp_path / "not yet"
    assert window.follow_run(folder)
    assert window.run_panel.state_label.text() == f"Waiting for {folder} to appear…"
    assert not window.following
    writer = RunWriter(folder)  # the run starts: its folder appears
    writer.on_start({"source": "watch", "pid": os.getpid()})
    for i in range(3):
        writer.on_sample(sample(i, "forward"))
        writer.on_step(step_record(i))
    writer.flush()
    qtbot.waitUntil(lambda: window.following, timeout=5000)
    loss = window.plots.loss_plot.curves["loss"]
    qtbot.waitUntil(lambda: loss.getData()[1] is not None and len(loss.getData()[1]) == 3,
                    timeout=5000)
    assert window.loaded_from == folder
    writer.on_finish({"steps_done": 3})


# --- 10f: View > Theme -----------------------------------------------------------------------


def test_view_theme_applies_at_once_and_is_remembered(qtbot, window, settings_file):
    run_to_end(qtbot, window, steps=3)
    app = QApplication.instance()
    hints = QApplication.styleHints()
    again = None
    try:
        action(window, "theme_dark_action").trigger()
        assert current_theme() is DARK
        assert app.palette().color(QPalette.Window).lightness() < 80
        for plot in window.plots.plots:
            assert plot.backgroundBrush().color().name() == DARK.plot_background.lower()
        assert AppSettings.at(settings_file).theme() == "dark"  # QSettings holds the choice
        hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)  # a chosen theme stays
        assert current_theme() is DARK

        window.close()
        apply_theme(LIGHT)
        again = MainWindow(runs_dir=None, settings=AppSettings.at(settings_file))
        qtbot.addWidget(again)
        assert action(again, "theme_dark_action").isChecked()
        assert current_theme() is DARK  # the next launch starts dark
        action(again, "theme_light_action").trigger()
        assert current_theme() is LIGHT
        assert app.palette().color(QPalette.Window).lightness() > 180
        action(again, "theme_system_action").trigger()
        hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)  # now the system decides
        assert current_theme() is DARK
    finally:
        apply_theme(LIGHT, again.plots.plots if again is not None else ())

"""Box zoom, Zoom to steps, the rows tables, exact bytes, Help, progress with an ETA, the
theme and the icon: each driven as a user would, checked against the run's own files."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QAction, QMouseEvent, QPalette
from PySide6.QtWidgets import QApplication, QDialog, QPushButton, QWidget

from memlens.app.panels.status_bar import RunStatusBar
from memlens.app.resources import resource_text
from memlens.app.theme import DARK, LIGHT, MIN_LINE_CONTRAST, contrast, current_theme
from memlens.core.options import OPTIONS
from tests.app.drive import choose, click

ROOT = Path(__file__).resolve().parents[2]


def action(window, name: str) -> QAction:
    found = window.findChild(QAction, name)
    assert found is not None, name
    return found


def run_to_end(qtbot, window, steps: int, **values) -> None:
    choose(window, steps=steps, **values)
    click(qtbot, window.findChild(QPushButton, "run_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=120_000)


def csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


# --- zoom --------------------------------------------------------------------------------------


def _drag(plot, first: float, last: float, modifiers) -> None:
    """Press at step `first`, move in a few steps, release at `last`: as a mouse does."""
    vb = plot.getPlotItem().vb
    (_, _), (y0, y1) = vb.viewRange()

    def at(step: float) -> QPointF:
        return QPointF(plot.mapFromScene(vb.mapViewToScene(QPointF(step, (y0 + y1) / 2))))

    viewport = plot.viewport()
    start = at(first)
    QApplication.sendEvent(viewport, QMouseEvent(QEvent.MouseButtonPress, start, start,
                                                 Qt.LeftButton, Qt.LeftButton, modifiers))
    for k in range(1, 6):
        pos = at(first + (last - first) * k / 5)
        QApplication.sendEvent(viewport, QMouseEvent(QEvent.MouseMove, pos, pos, Qt.NoButton,
                                                     Qt.LeftButton, modifiers))
    end = at(last)
    QApplication.sendEvent(viewport, QMouseEvent(QEvent.MouseButtonRelease, end, end,
                                                 Qt.LeftButton, Qt.NoButton, modifiers))


def test_shift_drag_zooms_to_the_box_and_a_plain_drag_still_pans(qtbot, window):
    run_to_end(qtbot, window, steps=40)
    stack = window.plots
    _drag(stack.time_plot, 10, 20, Qt.ShiftModifier)
    x0, x1 = stack.x_range()
    assert x0 == pytest.approx(10, abs=0.5) and x1 == pytest.approx(20, abs=0.5)
    assert not stack.follow
    for plot in stack.plots:  # linked: every plot shows the same steps
        (a, b), _ = plot.getPlotItem().vb.viewRange()
        assert (a, b) == pytest.approx((x0, x1))
    _drag(stack.memory_plot, 15, 12, Qt.NoModifier)  # pans: the span stays
    y0, y1 = stack.x_range()
    assert y1 - y0 == pytest.approx(x1 - x0, rel=1e-6) and y0 > x0


def test_zoom_to_steps_shows_exactly_those_steps(qtbot, window):
    run_to_end(qtbot, window, steps=30)
    action(window, "zoom_action").trigger()
    dialog = window.findChild(QDialog, "zoom_dialog")
    assert dialog is not None and dialog.isVisible()
    dialog.first.setValue(4)
    dialog.last.setValue(9)
    dialog.accept()
    assert window.plots.x_range() == pytest.approx((4, 10))
    assert not window.plots.follow
    action(window, "follow_action").trigger()
    assert window.plots.follow


# --- rows and bytes ----------------------------------------------------------------------------


def test_rows_table_matches_the_csv_sorts_and_copies_exact_values(qtbot, window):
    run_to_end(qtbot, window, steps=15)
    folder = window.session.folder
    header, rows = csv_rows(folder / "steps.csv")
    mem_header, mem_rows = csv_rows(folder / "memory.csv")
    action(window, "rows_action").trigger()
    dialog = window.view_actions.rows_dialog
    assert dialog.isVisible()
    steps_view = dialog.views["steps"]
    model = steps_view.model()
    assert model.rowCount() == len(rows)
    assert [model.headerData(c, Qt.Horizontal) for c in range(model.columnCount())] == header
    assert dialog.views["memory"].model().rowCount() == len(mem_rows)
    assert dialog.models["memory"].header == tuple(mem_header)

    loss = header.index("loss")
    head = steps_view.horizontalHeader()
    steps_view.scrollTo(model.index(0, loss))
    spot = QPoint(head.sectionViewportPosition(loss) + head.sectionSize(loss) // 2,
                  head.height() // 2)
    qtbot.mouseClick(head.viewport(), Qt.LeftButton, pos=spot)  # click the loss header
    shown = [float(model.index(r, loss).data()) for r in range(model.rowCount())]
    assert shown == sorted(float(r[loss]) for r in rows)

    # Select the step and peak cells of the first two rows shown, Ctrl+C.
    peak = header.index("peak_bytes")
    sel = steps_view.selectionModel()
    for r in (0, 1):
        for c in (0, peak):
            sel.select(model.index(r, c), sel.SelectionFlag.Select)
    steps_view.setFocus()
    qtbot.keyClick(steps_view, Qt.Key_C, Qt.ControlModifier)
    by_loss = sorted(rows, key=lambda r: float(r[loss]))
    expected = "step\tpeak_bytes\n" + "".join(f"{r[0]}\t{r[peak]}\n" for r in by_loss[:2])
    assert QApplication.clipboard().text() == expected
    # Shown in binary units by default; exact bytes when switched.
    cell = model.index(0, peak)
    assert cell.data().endswith(("KiB", "MiB"))
    action(window, "exact_bytes_action").trigger()
    assert cell.data() == f"{int(by_loss[0][peak]):,} B"


def test_exact_bytes_switch_changes_every_figure_and_is_remembered(qtbot, window,
                                                                   settings_file):
    run_to_end(qtbot, window, steps=6)
    _header, rows = csv_rows(window.session.folder / "steps.csv")
    peak = max(int(r[_header.index("peak_bytes")]) for r in rows)
    label = window.status.labels["peak"]
    assert re.fullmatch(r"peak: [\d.]+ (KiB|MiB)", label.text())
    action(window, "exact_bytes_action").trigger()
    assert label.text() == f"peak: {peak:,} B"

    from memlens.app.app_settings import AppSettings
    from memlens.app.window.main_window import MainWindow

    window.close()
    again = MainWindow(runs_dir=None, settings=AppSettings.at(settings_file))
    qtbot.addWidget(again)
    assert action(again, "exact_bytes_action").isChecked()
    action(again, "exact_bytes_action").trigger()
    assert not action(again, "exact_bytes_action").isChecked()


# --- help --------------------------------------------------------------------------------------

SHORTCUT_ACTIONS = ("start_action", "pause_action", "stop_action", "capture_action",
                    "pin_action", "export_action")


def test_help_explains_every_technique_and_lists_the_shortcuts(qtbot, window):
    action(window, "help_techniques_action").trigger()
    dialog = window.help_menu.help_dialog
    assert dialog.isVisible()
    text = dialog.findChild(QWidget, "help_techniques").toPlainText()
    for key, option in OPTIONS.items():
        if option.live:
            assert key in text, key
    action(window, "help_categories_action").trigger()
    categories = dialog.tabs.currentWidget().toPlainText()
    from memlens.core.records import MEMORY_CATEGORIES

    for name in MEMORY_CATEGORIES:  # every category the plots draw, each described
        assert f"{name}\n" in categories or f"{name} " in categories, name
    assert "temporaries" in categories and "precise mode and CUDA only" in categories
    action(window, "help_shortcuts_action").trigger()
    table = dialog.shortcuts
    assert dialog.tabs.currentWidget() is table
    listed = {table.item(r, 1).text() for r in range(table.rowCount())}
    for name in SHORTCUT_ACTIONS:
        keys = action(window, name).shortcut().toString()
        assert keys and keys in listed, name
    assert "README.md" in dialog.findChild(QWidget, "help_docs_link").text()


def test_readme_lists_the_same_shortcuts_as_the_window(qtbot, window):
    from memlens.app.panels.help_dialog import shortcut_rows

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Keyboard shortcuts", 1)[1].split("\n#", 1)[0]
    listed = dict(re.findall(r"^\| (.+?) \| `(.+?)` \|$", section, flags=re.M))
    assert listed == dict(shortcut_rows(window))


# --- progress ----------------------------------------------------------------------------------


def test_progress_counts_steps_of_the_total_with_an_eta(qtbot):
    now = [100.0]
    bar = RunStatusBar(clock=lambda: now[0])
    qtbot.addWidget(bar)
    bar.set_planned(200)
    bar.set_progress(9, 10, None, None, live=True)
    assert bar.labels["progress"].text() == "10 of 200 steps (5%), ETA –"  # no rate yet
    now[0] += 2.0
    bar.set_progress(29, 30, None, None, live=True)
    # 20 steps in 2 s: 170 left take 17 s.
    assert bar.labels["progress"].text() == "30 of 200 steps (15%), ETA 0:17"
    bar.set_progress(29, 30, None, None, live=False)
    assert bar.labels["progress"].text() == "30 of 200 steps (15%)"


def test_status_texts_set_while_a_run_goes_lay_out_nothing(qtbot, window):
    # A status text that changes width would lay the whole main window out again (and
    # start an animation per dock) at every text refresh: the labels only ever grow.
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication

    class Layouts(QObject):
        count = 0

        def eventFilter(self, obj, event) -> bool:
            if event.type() == QEvent.LayoutRequest:
                self.count += 1
            return False

    status = window.status
    status.set_planned(1_000_000)

    def texts() -> None:  # narrower and wider ones in turn
        for n in (1, 12_345, 7, 999_998):
            status.set_progress(n, n + 1, float(n), float(n), live=True)
            QApplication.processEvents()

    texts()
    for _ in range(3):  # a label grown lays out the bar, which then lays out the window
        QApplication.processEvents()
    layouts = Layouts()
    for w in (window, status):
        w.installEventFilter(layouts)
    texts()  # each as wide as one before, or narrower
    assert status.labels["step"].text() == "step: 999998"
    assert layouts.count == 0
    status.set_progress(12_345_678, 2_000_000, None, None, live=True)  # wider: grows once
    QApplication.processEvents()
    assert layouts.count >= 1
    label = status.labels["step"]
    assert label.width() >= label.sizeHint().width()  # the whole text shows


def test_the_status_bar_shows_the_runs_progress(qtbot, window):
    run_to_end(qtbot, window, steps=12)
    assert window.status.labels["progress"].text() == "12 of 12 steps (100%)"


# --- theme and resources -----------------------------------------------------------------------


def _line_colours(window) -> list[tuple[str, str]]:
    out = []
    for plot in window.plots.plots:
        for key, curve in plot.curves.items():
            pen = getattr(curve, "pen", None)
            if pen is None or callable(pen):
                pen = curve.opts.get("pen") if hasattr(curve, "opts") else None
            if pen is not None and pen.style() != Qt.NoPen:
                out.append((f"{plot.objectName()}.{key}", pen.color().name()))
    return out


def test_the_theme_follows_the_system_scheme_and_lines_stay_readable(qtbot, window):
    run_to_end(qtbot, window, steps=4)
    hints = QApplication.styleHints()
    app = QApplication.instance()
    try:
        hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)  # the system turned dark
        assert current_theme() is DARK
        assert app.styleSheet() == resource_text("dark.qss")
        assert app.palette().color(QPalette.Window).lightness() < 80
        for plot in window.plots.plots:
            assert plot.backgroundBrush().color().name() == DARK.plot_background.lower()
        lines = _line_colours(window)
        assert len(lines) >= 5
        for name, colour in lines:
            assert contrast(colour, DARK.plot_background) >= MIN_LINE_CONTRAST, name
    finally:
        hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert current_theme() is LIGHT
    assert app.styleSheet() == resource_text("light.qss")
    for name, colour in _line_colours(window):
        assert contrast(colour, LIGHT.plot_background) >= MIN_LINE_CONTRAST, name


def test_icon_and_stylesheet_come_from_the_resources_package(qtbot, window):
    assert not window.windowIcon().isNull()
    assert not QApplication.windowIcon().isNull()
    assert window.windowIcon().availableSizes()  # the SVG rendered
    # No widget sets its own stylesheet: the roles are styled in resources/*.qss.
    for path in (ROOT / "memlens" / "app").glob("*.py"):
        if path.name != "theme.py":
            assert "setStyleSheet(" not in path.read_text(encoding="utf-8"), path.name
    qss = resource_text("light.qss")
    for name in ("error_banner", "effect_label", "plot_hint", "event_detail",
                 "techniques_note"):
        assert f"#{name}" in qss and window.findChild(QWidget, name) is not None, name


# --- log scale ---------------------------------------------------------------------------------


def test_log_scale_per_plot_draws_log_values_and_labels_them_in_bytes(qtbot, window):
    run_to_end(qtbot, window, steps=10)
    memory = window.plots.memory_plot
    x_lin, y_lin = (np.array(a) for a in memory.curves["total"].getData())
    _header, rows = csv_rows(window.session.folder / "memory.csv")
    total = np.array([float(r[_header.index("total_bytes")]) for r in rows])
    np.testing.assert_allclose(y_lin * 2**20, total)  # the linear curve: the file's totals
    loss_before = np.array(window.plots.loss_plot.curves["loss"].getData()[1])

    action(window, "log_memory_plot_action").trigger()
    x_log, y_log = (np.array(a) for a in memory.curves["total"].getData())
    np.testing.assert_array_equal(x_log, x_lin)
    floor = 1024  # bytes at the bottom edge
    np.testing.assert_allclose(y_log, np.log10(np.maximum(total, floor) / floor))
    # The other plots stay linear.
    np.testing.assert_array_equal(window.plots.loss_plot.curves["loss"].getData()[1],
                                  loss_before)
    axis = memory.getPlotItem().getAxis("left")
    assert axis.tickStrings([np.log10(2**20 / floor)], 1, 1) == ["1.00 MiB"]
    (_, _), (lo, hi) = memory.getPlotItem().vb.viewRange()
    assert lo <= y_log.min() and y_log.max() <= hi  # the view fits the log values

    action(window, "log_memory_plot_action").trigger()
    np.testing.assert_allclose(np.array(memory.curves["total"].getData()[1]), y_lin)

"""The Lessons tab: run, progress, the table and chart, pins from a row, stop, export; and the
pinned-run compare table."""

from __future__ import annotations

import json

import numpy as np

from memlens.app.lessons.tab import COLUMNS
from tests.app.drive import click, wait_frames

TINY = {"batch_size": 32, "width": 64}


def _run_lessons(qtbot, window, steps=4):
    tab = window.lessons_tab
    tab.settings = TINY
    tab.steps = steps
    window.tabs.setCurrentWidget(tab)
    tab.preset_box.setCurrentText("mlp")
    assert tab.quick_box.isChecked()
    click(qtbot, tab.run_button)
    assert tab.running and not tab.run_button.isEnabled() and tab.stop_button.isEnabled()
    with qtbot.waitSignal(tab.session.finished, timeout=240_000):
        pass
    return tab


def test_lessons_tab_runs_shows_verdicts_pins_a_row_and_exports(qtbot, window, tmp_path):
    tab = _run_lessons(qtbot, window)
    report = tab.report
    assert report is not None and not report.stopped
    lessons = {(r.preset, r.lesson) for r in report.rows}  # a heading row each
    assert tab.table.rowCount() == len(report.rows) + len(lessons) > 0
    assert tab.progress_bar.value() == 100
    row = next(i for i, r in enumerate(report.rows) if r.metric == "grads at zero_grad")
    verdict = COLUMNS.index("verdict")
    assert tab.table.item(tab.table_row(row), verdict).text() == report.rows[row].verdict \
        == "confirmed"
    # the row's runs are on disk, under the window's runs folder
    for arm, folder in report.rows[row].runs.items():
        assert str(tmp_path) in folder and arm in folder
    # a user picks the row: the chart shows its lesson, both runs are pinned
    tab.table.selectRow(tab.table_row(row))
    assert tab.chart_key == ("zero_grad", "mlp")
    assert [p.name for p in window.pins] == ["mlp zero_grad: zeros", "mlp zero_grad: set_to_none"]
    pinned = {p.name: p.series.history for p in window.pins}
    hist = report.histories[("zero_grad", "mlp")]
    assert pinned["mlp zero_grad: zeros"] is hist["off"]
    # the timeline's pin curves hold the pinned runs' samples
    window.tabs.setCurrentIndex(0)
    assert window.pins_panel.list.count() == 2
    # another row replaces the pick's pins rather than piling them up
    other = next(i for i, r in enumerate(report.rows) if r.lesson == "amp_bf16")
    tab.table.selectRow(tab.table_row(other))
    assert [p.name for p in window.pins] == ["mlp amp_bf16: float32", "mlp amp_bf16: bf16"]
    # export
    out = tmp_path / "export"
    written = tab.export_to(out)
    doc = json.loads((out / "lessons.json").read_text())
    assert len(doc["rows"]) == len(report.rows)
    assert any(p.suffix == ".png" for p in written) and any(p.suffix == ".svg" for p in written)
    assert tab.export_to(out) == [] and "already holds" in tab.status.text()


def test_stop_in_the_tab_keeps_what_was_measured(qtbot, window):
    tab = window.lessons_tab
    tab.settings = TINY
    tab.steps = 40
    click(qtbot, tab.run_button)
    qtbot.waitUntil(lambda: tab.session.progress is not None
                    and tab.session.progress.steps_done >= 3, timeout=120_000)
    click(qtbot, tab.stop_button)
    with qtbot.waitSignal(tab.session.finished, timeout=120_000):
        pass
    assert tab.report.stopped
    assert len(tab.report.histories) >= 1
    assert tab.run_button.isEnabled() and "stopped" in tab.status.text()


def test_pin_compare_table_shows_the_pin_against_the_current_run(qtbot, window):
    from tests.app.drive import choose

    choose(window, "mlp", steps=4, **TINY, eval_every=0)
    window.techniques_panel.fields["zero_grad"].widget.setCurrentText("zeros")
    click(qtbot, window.run_panel.run_button)
    with qtbot.waitSignal(window.session.finished, timeout=60_000):
        pass
    click(qtbot, window.pins_panel.pin_button)
    base = window.history
    choose(window, "mlp", steps=4, **TINY, eval_every=0)
    window.techniques_panel.fields["zero_grad"].widget.setCurrentText("set_to_none")
    click(qtbot, window.run_panel.run_button)
    qtbot.waitUntil(lambda: not window.running and window.state == "finished",
                    timeout=60_000)
    table = window.pin_compare.table
    rows = {(table.item(i, 0).text(), table.item(i, 1).text()): i for i in range(table.rowCount())}
    i = rows[("zero_grad", "grads")]
    peak = base.samples.rows()
    idx = base.samples.index
    grads = peak[peak[:, idx["phase"]] == 1, idx["grads"]]
    from memlens.core.units import format_bytes

    assert table.item(i, 6).text() == format_bytes(float(np.max(grads)))  # pin peak
    assert table.item(i, 7).text() == format_bytes(0.0)  # run peak
    assert table.item(i, 3).text() == format_bytes(-float(np.max(grads)), signed=True)
    assert window.pin_compare.pin_box.count() == 1


def test_the_tab_runs_the_model_file_chosen_in_the_run_panel(qtbot, monkeypatch, window,
                                                             tmp_path):
    import importlib.util
    import os

    from tests.app.test_model_file_app import CNN, pick

    tab = window.lessons_tab
    assert tab.preset_box.findData(str(CNN.resolve())) < 0
    pick(qtbot, monkeypatch, window, CNN)
    window.tabs.setCurrentWidget(tab)
    index = tab.preset_box.findData(str(CNN.resolve()))
    assert index >= 0 and tab.preset_box.itemText(index) == "cnn_classifier.py"
    tab.preset_box.setCurrentIndex(index)
    click(qtbot, tab.run_button)
    with qtbot.waitSignal(tab.session.finished, timeout=240_000):
        pass
    report = tab.report
    assert report is not None and not report.stopped
    assert report.presets == [str(CNN.resolve())]
    lessons = {r.lesson for r in report.rows}
    assert {"zero_grad", "accumulate", "no_grad_eval"} <= lessons
    assert "detach_state" not in lessons  # the file carries no state
    row = next(i for i, r in enumerate(report.rows) if r.metric == "grads at zero_grad")
    # independent: the file's parameters, counted in plain torch
    spec = importlib.util.spec_from_file_location("plain_cnn", CNN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    params = sum(p.numel() * p.element_size() for p in mod.build_model().parameters())
    assert report.rows[row].off == params and report.rows[row].on == 0
    heading = tab.table_row(row) - 1
    while tab.table.item(heading, 1) is not None:  # up to the lesson's heading
        heading -= 1
    assert tab.table.item(heading, 0).text().startswith("cnn_classifier · zero_grad: zeros")
    for arm, folder in report.rows[row].runs.items():
        assert os.path.basename(folder) == f"cnn_classifier-zero_grad-{arm}"
        assert str(tmp_path) in folder
    tab.table.selectRow(tab.table_row(row))
    window.tabs.setCurrentWidget(tab)
    assert [p.name for p in window.pins] == ["cnn_classifier zero_grad: zeros",
                                            "cnn_classifier zero_grad: set_to_none"]
    shot = os.environ.get("MEMLENS_LESSONS_SHOT")
    if shot:  # for looking at the tab: MEMLENS_LESSONS_SHOT=/tmp/x.png pytest -k model_file
        window.resize(1280, 800)
        window.tabs.setCurrentWidget(tab)
        wait_frames(qtbot, window, 3)
        window.grab().save(shot)


def test_lessons_that_cannot_fit_are_refused_in_the_tab_before_anything_runs(
        qtbot, window, tmp_path, monkeypatch):
    """As `lessons` on the command line: the arms' estimate against free memory first; the
    tab says what is needed and how to override it, and no run folder is written."""
    import memlens.core.preflight

    monkeypatch.setattr(memlens.core.preflight, "available_memory",
                        lambda device: (4096, "the test"))
    tab = window.lessons_tab
    tab.settings = TINY
    tab.steps = 4
    tab.preset_box.setCurrentText("mlp")
    click(qtbot, tab.run_button)
    with qtbot.waitSignal(tab.session.finished, timeout=120_000):
        pass
    assert tab.report is None and tab.table.rowCount() == 0
    text = tab.status.text()
    assert "needs about" in text and "4.00 KiB" in text and "force=true" in text
    assert "Traceback" not in text and "\n" not in text
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("run.json"))
    assert tab.run_button.isEnabled()


def test_at_1280_px_every_column_shows_and_a_row_pins_its_own_runs_zoomed(qtbot, window):
    """A 1280×800 screen: the window fits, the table needs no sideways scroll (verdict and
    claim on screen, the claim at least a word wide), the chart shrinks to fit; picking a
    row replaces a pin the user had with that row's two runs and shows their steps."""
    import pyqtgraph as pg

    window.resize(1280, 800)
    window.pin_current_run()  # nothing to pin yet: no run
    tab = _run_lessons(qtbot, window)
    window.tabs.setCurrentWidget(tab)
    qtbot.waitUntil(lambda: tab.table.isVisible())
    assert window.width() <= 1280 and window.minimumSizeHint().width() <= 1280
    table = tab.table
    assert table.horizontalScrollBar().maximum() == 0
    header = table.horizontalHeader()
    right = header.sectionViewportPosition(COLUMNS.index("claim")) + header.sectionSize(
        COLUMNS.index("claim"))
    assert right <= table.viewport().width()
    assert header.sectionSize(COLUMNS.index("claim")) >= table.fontMetrics().horizontalAdvance(
        "set_to_none")
    verdict = COLUMNS.index("verdict")
    longest = max((table.item(t, verdict).text() for t in range(table.rowCount())
                   if table.item(t, verdict) is not None), key=len)
    assert header.sectionSize(verdict) >= table.fontMetrics().horizontalAdvance(longest)
    assert tab.chart.width() <= tab.width()
    # a heading row picks its lesson's first metric
    i = next(i for i, r in enumerate(tab.report.rows) if r.lesson == "zero_grad")
    table.selectRow(tab.table_row(i) - 1)
    assert tab.chart_key == ("zero_grad", "mlp")
    assert [p.name for p in window.pins] == ["mlp zero_grad: zeros", "mlp zero_grad: set_to_none"]
    window.tabs.setCurrentIndex(0)
    steps = max(len(p.series.history.steps) for p in window.pins)
    view = window.findChild(pg.PlotWidget, "memory_plot").getViewBox()
    low, high = view.viewRange()[0]
    assert low <= 0 and steps - 1 <= high <= steps + 1


def test_a_lessons_chart_png_leaves_the_process_able_to_make_widgets(tmp_path):
    """The lessons CLI renders its charts' PNGs with Qt in the calling process; a window (or
    a test session's next widget test) made afterwards must still work: Qt aborts the process
    when a widget is made under a plain QGuiApplication."""
    import subprocess
    import sys

    png = tmp_path / "chart.png"
    code = (
        "import sys\n"
        "from memlens.app.lessons.svg_png import svg_to_png\n"
        "svg_to_png('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"40\" height=\"20\">"
        "<rect width=\"40\" height=\"20\" fill=\"red\"/></svg>', sys.argv[1])\n"
        "from PySide6.QtWidgets import QApplication, QLabel\n"
        "app = QApplication.instance() or QApplication([])\n"
        "label = QLabel('made after the chart')\n"
        "print(type(app).__name__, label.text())\n")
    done = subprocess.run([sys.executable, "-c", code, str(png)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.split() == ["QApplication", "made", "after", "the", "chart"]
    from PySide6.QtGui import QImage

    image = QImage(str(png))
    assert (image.width(), image.height()) == (40, 20)
    assert image.pixelColor(20, 10).name() == "#ff0000"


def test_verdicts_say_more_or_less_than_claimed(qtbot, window):
    """#49 item 7: "larger" read as "memory got larger"; it means the change measured is
    larger than the claim's."""
    from memlens.core.lessons.runner import LessonRow, LessonsReport

    def row(metric: str, verdict: str) -> LessonRow:
        return LessonRow("zero_grad", "set_to_none frees grads", "mlp", "cpu", metric,
                         "memory", "zeros", "set_to_none", 100.0, 10.0, 0.1, None, None,
                         True, True, "-50%", verdict, {}, {})

    report = LessonsReport(["mlp"], 4, 2, True, rows=[row("grads at zero_grad", "larger"),
                                                    row("peak", "smaller"),
                                                    row("total", "confirmed")])
    tab = window.lessons_tab
    tab.show_report(report)
    verdict = COLUMNS.index("verdict")
    shown = [tab.table.item(tab.table_row(i), verdict).text() for i in range(3)]
    assert shown == ["more than claimed", "less than claimed", "confirmed"]

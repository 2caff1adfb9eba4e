"""View > Runs: the run folders under a folder, read through the run-folder reader; ticked
runs become pins; a run that appears later is listed without a restart."""

from __future__ import annotations

import json
import os
import time

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QListWidget, QProgressBar, QPushButton, QTreeWidget

from memlens.__main__ import main as memlens_main
from memlens.app.panels.runs_panel import COLUMNS, NAME_MIN_CHARS
from memlens.app.timeline.memory_plot import Y_UNIT
from memlens.core.runfolder.reader import load_run
from memlens.core.units import format_bytes
from tests.app.drive import click, wait_frames
from tests.app.test_main_window import plot

TINY = ("--set", "batch_size=8", "--set", "width=16", "--set", "eval_every=0", "--quiet")


def cli_run(out, preset: str, steps: int) -> None:
    assert memlens_main(["run", "--preset", preset, "--steps", str(steps), *TINY,
                         "--out", str(out)]) == 0


def rows(tree: QTreeWidget) -> list[list[str]]:
    return [[tree.topLevelItem(i).text(c) for c in range(len(COLUMNS))]
            for i in range(tree.topLevelItemCount())]


def test_runs_dock_lists_runs_pins_ticked_ones_and_sees_a_new_run(qtbot, window, tmp_path):
    parent = tmp_path / "many"
    cli_run(parent / "a-mlp", "mlp", 3)
    cli_run(parent / "b-cnn", "cnn", 4)
    action = window.findChild(type(window.open_action), "runs_action")
    assert action is not None and action in window.view_menu.actions()
    assert not window.runs_dock.dock.isVisible() and not action.isChecked()
    action.trigger()
    qtbot.waitUntil(window.runs_dock.dock.isVisible, timeout=5000)
    # File > Runs folder…'s choice (its dialog's fileSelected) is the folder listed
    window.runs_folder.set_folder(parent)
    tree = window.findChild(QTreeWidget, "runs_tree")

    expected = []
    for name in ("a-mlp", "b-cnn"):
        doc = json.loads((parent / name / "run.json").read_text())
        expected.append([name, doc["config"]["preset"], str(doc["summary"]["steps_done"]),
                         format_bytes(doc["summary"]["peak_bytes"])])
    assert [r[:4] for r in rows(tree)] == expected
    for name, row in zip(("a-mlp", "b-cnn"), rows(tree), strict=True):  # run.json's mtime
        written = time.localtime(os.path.getmtime(parent / name / "run.json"))
        assert row[4] == time.strftime("%m-%d %H:%M", written)
    # at 1280x800 every column is on screen in the dock, no sideways scrolling
    window.resize(1280, 800)
    wait_frames(qtbot, window, 2)
    header = tree.header()
    shown = [c for c in range(len(COLUMNS)) if not tree.isColumnHidden(c)]
    last = shown[-1]
    assert (header.sectionViewportPosition(last) + header.sectionSize(last)
            <= tree.viewport().width())
    assert tree.horizontalScrollBar().maximum() == 0
    for c in shown[1:]:  # each figure shown whole
        width = max(tree.fontMetrics().horizontalAdvance(r[c]) for r in rows(tree))
        assert header.sectionSize(c) >= width, COLUMNS[c]
    # the name keeps its room: a narrow dock hides the date, then what, not the name
    assert header.sectionSize(0) >= tree.fontMetrics().averageCharWidth() * NAME_MIN_CHARS
    assert {COLUMNS[c] for c in range(len(COLUMNS)) if tree.isColumnHidden(c)} <= {
        "date", "what"}

    for i in range(2):  # each read off the GUI thread, then pinned
        tree.topLevelItem(i).setCheckState(0, Qt.Checked)
        qtbot.waitUntil(lambda n=i + 1: len(window.pins) == n, timeout=10_000)
    assert [p.name for p in window.pins] == ["a-mlp", "b-cnn"]  # named by their folders
    wait_frames(qtbot, window, 2)
    for pin, name in zip(window.pins, ("a-mlp", "b-cnn"), strict=True):
        saved = load_run(parent / name)
        np.testing.assert_array_equal(pin.series.history.steps.rows(), saved.steps.rows())
        _, total = plot(window, "memory_plot").ghosts[pin.pin_id].getData()
        np.testing.assert_allclose(total * Y_UNIT, saved.samples.column("total"), rtol=1e-6)
    tree.topLevelItem(0).setCheckState(0, Qt.Unchecked)  # unticked: its pin goes
    assert [p.series.history.meta["config"]["preset"] for p in window.pins] == ["cnn"]
    pins_list = window.findChild(QListWidget, "pins_list")
    pins_list.setCurrentRow(0)
    click(qtbot, window.findChild(QPushButton, "remove_pin_button"))  # removed there:
    assert window.pins == [] and tree.topLevelItem(1).checkState(0) == Qt.Unchecked  # unticked
    tree.topLevelItem(1).setCheckState(0, Qt.Checked)
    qtbot.waitUntil(lambda: len(window.pins) == 1, timeout=10_000)
    assert [p.series.history.meta["config"]["preset"] for p in window.pins] == ["cnn"]

    cli_run(parent / "c-mlp", "mlp", 2)  # a run made while the app watches
    qtbot.waitUntil(lambda: [r[0] for r in rows(tree)] == ["a-mlp", "b-cnn", "c-mlp"],
                    timeout=10_000)
    assert rows(tree)[2][2] == "2"
    assert tree.topLevelItem(1).checkState(0) == Qt.Checked  # kept ticked across the rescan


def test_a_run_that_cannot_be_read_is_unticked_with_a_message(qtbot, window, tmp_path,
                                                                monkeypatch):
    parent = tmp_path / "runs"
    cli_run(parent / "good", "mlp", 2)
    cli_run(parent / "damaged", "mlp", 2)
    window.runs_dock.action.trigger()
    window.runs_folder.set_folder(parent)
    tree = window.findChild(QTreeWidget, "runs_tree")
    names = [r[0] for r in rows(tree)]
    # damaged after it was listed (a disk that failed, a copy cut short)
    (parent / "damaged" / "steps.csv").write_bytes(b"\xff\xfe\x00not text\n")
    damaged = tree.topLevelItem(names.index("damaged"))
    damaged.setCheckState(0, Qt.Checked)
    qtbot.waitUntil(lambda: damaged.checkState(0) == Qt.Unchecked, timeout=10_000)
    assert window.pins == []
    assert "steps.csv" in window.statusBar().currentMessage()
    # a file the user may not read: the reader's own OSError (its open, in the one
    # size-checked reader), said as a RunFolderError
    real_open = os.open

    def refused(path, *args, **kwargs):
        if str(path) == str(parent / "good" / "run.json"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    good = tree.topLevelItem(names.index("good"))
    good.setCheckState(0, Qt.Checked)
    qtbot.waitUntil(lambda: good.checkState(0) == Qt.Unchecked, timeout=10_000)
    assert window.pins == []
    assert "Permission denied" in window.statusBar().currentMessage()


def test_runs_dock_marks_a_run_whose_writer_was_killed_as_ended(qtbot, tmp_path):
    """A run folder whose process ended without its summary (SIGKILL) is listed as ended,
    not as a live run; a finished one carries no mark."""
    import socket
    import subprocess
    import sys

    from memlens.app.panels.runs_panel import RunsPanel
    from memlens.core.runfolder.writer import RunWriter
    from tests.core.export_histories import step_record

    parent = tmp_path / "runs"
    cli_run(parent / "a-done", "mlp", 2)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    w = RunWriter(parent / "b-killed")
    w.on_start({"source": "lab", "pid": gone.pid, "host": socket.gethostname(),
                "config": {"preset": "mlp"}})
    w.on_steps([(step_record(0, 0.1, 1000), ())])
    w.flush()  # no on_finish: the process died before it
    panel = RunsPanel(parent)
    qtbot.addWidget(panel)
    steps = {r[0]: r[2] for r in rows(panel.tree)}
    assert steps == {"a-done": "2", "b-killed": "1 (ended)"}
    w.close()


def test_a_damaged_run_is_listed_as_damaged_and_the_window_goes_on(qtbot, window, tmp_path):
    """A run.json with a 5,000-digit number (Python's own limit is 4,300 digits) or a lone
    surrogate in its host: the list is read, the damaged run shown with its reason, never
    ticked; the other runs are listed as usual."""
    parent = tmp_path / "runs"
    for name in ("a-good", "b-huge-number", "c-surrogate"):
        cli_run(parent / name, "mlp", 2)
    path = parent / "b-huge-number" / "run.json"
    path.write_text(path.read_text().replace('"format"', '"pid": ' + "9" * 5000 + ', "format"', 1))
    path = parent / "c-surrogate" / "run.json"
    path.write_text(path.read_text().replace('"format"', '"host": "\\ud800", "format"', 1))
    window.runs_dock.action.trigger()
    window.runs_folder.set_folder(parent)
    tree = window.findChild(QTreeWidget, "runs_tree")
    listed = rows(tree)
    assert [r[:3] for r in listed] == [["a-good", "mlp", "2"], ["b-huge-number", "damaged", ""],
                                        ["c-surrogate", "mlp", "2"]]
    damaged = tree.topLevelItem(1)
    assert "5,000 digits" in damaged.toolTip(1)
    assert not damaged.flags() & Qt.ItemIsUserCheckable
    good = tree.topLevelItem(2)
    good.setCheckState(0, Qt.Checked)
    qtbot.waitUntil(lambda: len(window.pins) == 1, timeout=5000)


def test_ticking_a_run_reads_it_off_the_gui_thread_and_says_so(qtbot, window, tmp_path,
                                                                monkeypatch):
    """#49 item 3: a tick froze the window for seconds while the run was read; now the
    window paints on while a ticked run is read, the box stays ticked and the panel says
    which run it reads; an untick while it reads drops it."""
    import threading

    from memlens.core.runfolder import reader

    parent = tmp_path / "runs"
    cli_run(parent / "slow", "mlp", 3)
    window.runs_dock.action.trigger()
    window.runs_folder.set_folder(parent)
    tree = window.findChild(QTreeWidget, "runs_tree")
    item = tree.topLevelItem(0)
    release, returned = threading.Event(), threading.Event()
    real_load = reader.load_run

    def slow_load(folder):  # a long run's read: it waits here until the test lets it go
        try:
            release.wait(10)
            return real_load(folder)
        finally:
            returned.set()

    monkeypatch.setattr(reader, "load_run", slow_load)
    item.setCheckState(0, Qt.Checked)
    wait_frames(qtbot, window, 3)  # the window paints while the read waits
    assert not returned.is_set()
    assert item.checkState(0) == Qt.Checked and window.pins == []
    bar = window.findChild(QProgressBar, "runs_reading")
    label = window.findChild(QLabel, "runs_reading_label")
    assert bar.isVisible() and label.text() == "Reading slow…"
    release.set()
    qtbot.waitUntil(lambda: len(window.pins) == 1, timeout=10_000)
    assert window.pins[0].name == "slow" and not bar.isVisible()
    saved = load_run(parent / "slow")
    np.testing.assert_array_equal(window.pins[0].series.history.steps.rows(),
                                  saved.steps.rows())

    # unticked while it is read: no pin comes of it
    release.clear()
    returned.clear()
    item.setCheckState(0, Qt.Unchecked)
    assert window.pins == []
    item.setCheckState(0, Qt.Checked)
    item.setCheckState(0, Qt.Unchecked)
    with qtbot.waitSignal(window.runs_dock.read_done, timeout=10_000):
        release.set()
    assert window.pins == [] and not bar.isVisible()


def test_an_export_beside_the_runs_is_not_listed_as_a_run(qtbot, window, tmp_path):
    parent = tmp_path / "runs"
    cli_run(parent / "a-mlp", "mlp", 3)
    assert window.open_run(parent / "a-mlp")
    window.export_to(parent / "a-mlp-export", {"run files", "png", "svg"})
    assert (parent / "a-mlp-export" / "run.json").is_file()  # a copy of the run's files
    window.runs_dock.action.trigger()
    window.runs_folder.set_folder(parent)
    tree = window.findChild(QTreeWidget, "runs_tree")
    assert [r[0] for r in rows(tree)] == ["a-mlp"]

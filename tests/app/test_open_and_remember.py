"""File > Open of runs and snapshots, Recent runs, drag and drop, `--open`, and what the app
remembers between launches: driven as a user would, checked against the files."""

from __future__ import annotations

import csv
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QAction, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QMessageBox,
    QPushButton,
    QSplitter,
)

from memlens.app.app_settings import AppSettings
from memlens.app.snapshot_view import Y_UNIT
from memlens.core.exports.snapshot import write_snapshot
from memlens.core.runfolder.history_files import write_history
from tests.app.drive import choose, click
from tests.core.helpers import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def precise(tmp_path_factory):
    """A tiny precise run, saved as a run folder and as memlens's snapshot.pickle."""
    history, summary = run("mlp", steps=4, precise=True)
    base = tmp_path_factory.mktemp("opened")
    folder = base / "mlp-run"
    write_history(history, folder)
    snapshot = write_snapshot(history, base / "snapshot.pickle", max_entries=None)
    return folder, snapshot, summary


@pytest.fixture
def malicious(tmp_path):
    """A snapshot.pickle that, unpickled normally, creates `target`."""
    target = tmp_path / "created-by-the-file.txt"

    class Payload:
        def __reduce__(self):
            return (open, (str(target), "w"))

    path = tmp_path / "evil" / "snapshot.pickle"
    path.parent.mkdir()
    path.write_bytes(pickle.dumps({"device_traces": [[]], "segments": [], "p": Payload()}))
    return path, target


def action(window, name: str) -> QAction:
    found = window.findChild(QAction, name)
    assert found is not None, name
    return found


def choose_in_open_dialog(qtbot, window, path: Path) -> None:
    """File > Open, pick the file, press Open."""
    action(window, "open_action").trigger()
    dialog = window.findChild(QFileDialog, "open_dialog")
    assert dialog is not None and dialog.isVisible()
    dialog.selectFile(str(path))
    dialog.accept()


def drop(window, path: Path) -> bool:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    pos = QPointF(window.width() / 2, window.height() / 2)
    enter = QDragEnterEvent(pos.toPoint(), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(window, enter)
    if not enter.isAccepted():
        return False
    event = QDropEvent(pos, Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(window, event)
    return event.isAccepted()


def replay_peak(trace: list[dict]) -> tuple[int, list[int]]:
    """Allocated bytes at the peak and the sizes alive there, replaying the raw trace."""
    live: dict[int, int] = {}
    best, best_live = -1, []
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
        total = sum(live.values())
        if total > best:
            best, best_live = total, sorted(live.values(), reverse=True)
    return best, best_live


# --- snapshots ---------------------------------------------------------------------------------


def test_open_a_snapshot_from_the_menu_shows_memory_and_the_peaks_allocations(qtbot, window,
                                                                            precise):
    _folder, snapshot, summary = precise
    choose_in_open_dialog(qtbot, window, snapshot)
    view = window.opener.snapshot_view
    assert view is not None and window.tabs.currentWidget() is view
    raw = pickle.loads(snapshot.read_bytes())
    trace = max(raw["device_traces"], key=len)
    peak, alive = replay_peak(trace)
    x, y = view.curves["allocated"].getData()
    assert len(x) == len(trace) + 1
    assert round(float(np.max(y)) * Y_UNIT) == peak == summary.peak_bytes
    shown = [view.top.topLevelItem(i).data(0, Qt.UserRole)
             for i in range(view.top.topLevelItemCount())]
    assert shown == alive[: len(shown)] and shown
    assert "snapshot" in window.windowTitle() and snapshot.name in view.summary.text()


def test_a_malicious_snapshot_is_refused_unread_and_the_app_goes_on(qtbot, window, malicious):
    path, target = malicious
    choose_in_open_dialog(qtbot, window, path)
    box = window.findChild(QMessageBox, "open_error")
    assert box is not None and box.isVisible()
    assert "nothing in it ran" in box.text() and "io.open" in box.text()
    assert not target.exists()
    assert window.opener.snapshot_view is None  # nothing shown from it
    box.close()
    assert window.isVisible() and window.state == "idle"


# --- run folders, recent, drop ---------------------------------------------------------------


def test_recent_runs_reopen_and_a_vanished_one_is_taken_off(qtbot, window, precise, tmp_path):
    folder, snapshot, _ = precise
    choose_in_open_dialog(qtbot, window, folder / "run.json")  # a file in a run folder
    assert window.loaded_from == folder
    assert drop(window, snapshot)
    recent = window.opener.recent_menu
    recent.aboutToShow.emit()
    entries = [a.data() for a in recent.actions() if a.objectName().startswith("recent_")
               and a.data()]
    assert entries == [str(snapshot.resolve()), str(folder.resolve())]
    click(qtbot, window.findChild(QPushButton, "reset_button"))
    assert window.series is None
    action(window, "recent_1").trigger()
    assert window.loaded_from == folder.resolve()

    gone = tmp_path / "gone-run"
    write_history(window.history, gone)
    assert window.opener.open_path(gone)
    for f in gone.iterdir():
        f.unlink()
    gone.rmdir()
    action(window, "recent_0").trigger()
    box = window.findChild(QMessageBox, "open_error")
    assert box is not None and "no longer exists" in box.text()
    box.close()
    assert str(gone.resolve()) not in window.app_settings.recent()


def test_dropping_a_run_folder_opens_it_and_other_files_are_refused(qtbot, window, precise,
                                                                    tmp_path):
    folder, _snapshot, _ = precise
    assert drop(window, folder)
    assert window.loaded_from == folder
    with open(folder / "steps.csv", newline="") as fh:
        steps = len(list(csv.reader(fh))) - 1
    assert window.series.step_count == steps
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    assert drop(window, other)
    box = window.findChild(QMessageBox, "open_error")
    assert box is not None and "neither a run folder nor a snapshot" in box.text()
    assert window.loaded_from == folder  # what was shown stays


# --- remembered between launches -----------------------------------------------------------


def test_settings_layout_and_last_folder_are_remembered(qtbot, tmp_path, settings_file,
                                                        precise):
    from memlens.app.window.main_window import MainWindow

    folder, _snapshot, _ = precise
    first = MainWindow(runs_dir=tmp_path / "runs", settings=AppSettings.at(settings_file))
    qtbot.addWidget(first)
    first.show()
    qtbot.waitExposed(first)
    assert first.opener.open_path(folder)  # sets the panel to that run's
    choose(first, "cnn", steps=77, batch_size=5)
    # The offscreen screen (800x800) is smaller than the window's minimum size, where
    # restoreGeometry clamps any size: maximized is what a test can see come back.
    first.showMaximized()
    events = first.findChild(QDockWidget, "events_dock")
    first.addDockWidget(Qt.LeftDockWidgetArea, events)  # the user moved the Events dock
    splitter = first.findChild(QSplitter, "plots_splitter")
    splitter.setSizes([500, 100, 200])
    sizes = splitter.sizes()
    first.close()

    second = MainWindow(runs_dir=tmp_path / "runs", settings=AppSettings.at(settings_file))
    qtbot.addWidget(second)
    second.show()
    qtbot.waitExposed(second)
    fields = second.run_panel.fields
    assert fields["preset"].value() == "cnn"
    assert fields["steps"].value() == 77 and fields["batch_size"].value() == 5
    assert second.isMaximized()
    assert second.dockWidgetArea(second.findChild(QDockWidget, "events_dock")) == \
        Qt.LeftDockWidgetArea
    # The plots' shares come back (pixels follow the space the splitter gets).
    again = second.findChild(QSplitter, "plots_splitter").sizes()
    np.testing.assert_allclose(np.array(again) / sum(again), np.array(sizes) / sum(sizes),
                               atol=0.02)
    action(second, "open_action").trigger()
    dialog = second.findChild(QFileDialog, "open_dialog")
    assert Path(dialog.directory().absolutePath()) == folder.parent.resolve()
    dialog.reject()
    second.close()


def test_nothing_is_written_to_the_users_settings_without_a_store(qtbot, tmp_path):
    from memlens.app.window.main_window import MainWindow

    w = MainWindow(runs_dir=None)
    qtbot.addWidget(w)
    assert not w.app_settings.persistent
    w.close()
    assert not list(tmp_path.iterdir())


# --- the command line -------------------------------------------------------------------------


def _main(*args: str) -> subprocess.CompletedProcess:
    env = {"QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
           "HOME": str(Path.home())}
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_shot_open_saves_the_window_showing_a_snapshot_and_bad_files_exit_2(tmp_path, precise,
                                                                           malicious):
    _folder, snapshot, _ = precise
    out = tmp_path / "snap.png"
    done = _main("shot", "--open", str(snapshot), "--out", str(out), "--size", "1280x800")
    assert done.returncode == 0, done.stderr
    from PySide6.QtGui import QImage

    image = QImage(str(out))
    assert (image.width(), image.height()) == (1280, 800)

    bad, target = malicious
    for path, reason in ((bad, "nothing in it ran"), (tmp_path / "none", "does not exist")):
        refused = _main("shot", "--open", str(path), "--out", str(tmp_path / "x.png"))
        assert refused.returncode == 2 and reason in refused.stderr
        assert not (tmp_path / "x.png").exists()
    assert not target.exists()
    refused = _main("app", "--open", str(bad))
    assert refused.returncode == 2 and "nothing in it ran" in refused.stderr
    assert not target.exists()


def test_app_open_opens_the_path_in_the_window(qtbot, precise, monkeypatch):
    """`main.py app --open PATH` hands the path to the window's Open (checked in process:
    app.exec is replaced so the test does not wait on an event loop)."""
    import main
    from memlens.app.window import launch as main_window

    folder, _snapshot, _ = precise
    made, ran = [], []
    # No event loop, and none of finish_start_up's process-wide GC and GIL settings.
    monkeypatch.setattr(QApplication.instance(), "exec", lambda: ran.append(True) or 0)
    monkeypatch.setattr(main_window, "finish_start_up", lambda w: made.append(w) or w.show())
    assert main.main(["app", "--open", str(folder)]) == 0
    assert ran and len(made) == 1
    qtbot.addWidget(made[0])
    assert made[0].loaded_from == folder


def test_opening_a_run_while_the_snapshot_tab_shows_shows_the_run(qtbot, window, precise):
    """File > Open a snapshot, then a run folder: the run is what the user sees (the
    timeline, with the run's steps), and the Snapshot tab names the file it holds."""
    folder, snapshot, summary = precise
    choose_in_open_dialog(qtbot, window, snapshot)
    tabs = window.tabs
    assert tabs.currentWidget() is window.opener.snapshot_view
    assert tabs.tabText(tabs.currentIndex()) == f"Snapshot: {snapshot.name}"
    qtbot.waitUntil(lambda: window.findChild(QFileDialog, "open_dialog") is None)  # closed
    choose_in_open_dialog(qtbot, window, folder / "run.json")
    assert tabs.currentIndex() == 0
    assert len(window.history.steps) == summary.steps_done

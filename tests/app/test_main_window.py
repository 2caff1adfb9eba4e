"""The window driven as a user drives it, on the real training loop with tiny presets."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QCheckBox, QComboBox, QListWidget, QMessageBox, QPushButton

from memlens.app.timeline.memory_plot import Y_UNIT
from memlens.app.window.export_dialog import ExportDialog
from memlens.core.history import STEP_COLUMNS
from memlens.core.runfolder.reader import load_run
from tests.app.drive import choose, click, wait_frames, wait_steps

PLOTS = ("memory_plot", "time_plot", "loss_plot")


def button(window, name: str) -> QPushButton:
    b = window.findChild(QPushButton, name)
    assert b is not None, name
    return b


def plot(window, name: str) -> pg.PlotWidget:
    p = window.findChild(pg.PlotWidget, name)
    assert p is not None, name
    return p


def run_to_end(qtbot, window, steps: int, **values) -> None:
    choose(window, steps=steps, **values)
    click(qtbot, button(window, "run_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=120_000)


def test_curves_hold_the_history_values(qtbot, window):
    run_to_end(qtbot, window, steps=12)
    h = window.history
    samples, steps = h.samples.rows(), h.steps.rows()
    assert len(steps) == 12
    s, t = h.samples.index, h.steps.index

    x, total = plot(window, "memory_plot").curves["total"].getData()
    np.testing.assert_array_equal(x, samples[:, s["x"]])
    np.testing.assert_allclose(total * Y_UNIT, samples[:, s["total"]], rtol=1e-6)  # MiB
    _, grads_layer = plot(window, "memory_plot").curves["grads"].getData()
    np.testing.assert_allclose(grads_layer * Y_UNIT,
                               samples[:, s["params"]] + samples[:, s["grads"]], rtol=1e-6)
    _, whole_step = plot(window, "time_plot").curves["eval"].getData()
    np.testing.assert_allclose(whole_step, steps[:, t["step_ms"]], rtol=1e-5)
    x_loss, loss = plot(window, "loss_plot").curves["loss"].getData()
    np.testing.assert_allclose(loss, steps[:, t["loss"]], rtol=1e-6)
    np.testing.assert_array_equal(x_loss, steps[:, t["step"]] + 0.5)

    env = h.meta["environment"]
    assert window.status.labels["memory_source"].text() == env["memory_label"]
    assert window.status.labels["device"].text() == f"device: {env['device']}"
    assert window.status.labels["step"].text() == "step: 11"
    # The run folder streamed by the worker reads back the same steps.
    saved = load_run(window.session.folder)
    np.testing.assert_allclose(saved.steps.column("loss"), steps[:, t["loss"]], rtol=1e-5)


def test_zero_grad_flip_marks_every_plot_and_applies_at_a_step_boundary(qtbot, window):
    choose(window, steps=100_000)
    click(qtbot, button(window, "run_button"))
    wait_steps(qtbot, window, 12)  # ten steady steps before the flip (step 0 has no Adam state)
    combo = window.findChild(QComboBox, "zero_grad_combo")
    combo.setCurrentText("zeros")  # what choosing the item in the drop-down emits
    qtbot.waitUntil(lambda: any(e.kind == "toggle" for e in window.history.events()))
    event = next(e for e in window.history.events() if e.kind == "toggle")
    assert (event.key, event.old, event.new) == ("zero_grad", "set_to_none", "zeros")
    wait_steps(qtbot, window, event.step + 11)
    click(qtbot, button(window, "stop_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)

    for name in PLOTS:
        markers = plot(window, name).markers
        assert [m.value() for m in markers] == [event.step]
        assert markers[0].label.toPlainText() == "zero_grad \u2192 zeros"  # the list: whole
    # At the zero_grad sample, set_to_none leaves no gradient bytes; zeros keeps them all.
    rows = window.history.samples.rows()
    s = window.history.samples.index
    at_zero_grad = rows[rows[:, s["phase"]] == 1]
    before = at_zero_grad[(at_zero_grad[:, s["step"]] >= 1)
                          & (at_zero_grad[:, s["step"]] < event.step)]
    after = at_zero_grad[at_zero_grad[:, s["step"]] >= event.step]
    assert len(before) and len(after) >= 11
    assert (before[:, s["grads"]] == 0).all()
    assert (after[:, s["grads"]] == after[:, s["params"]]).all()
    params = after[0, s["params"]]
    # What just happened: the 10 steps after against the 10 before.
    text = window.effect_label.text()
    assert "zero_grad: set_to_none -> zeros" in text and "at zero_grad" in text
    from memlens.core.units import format_bytes

    assert format_bytes(params, signed=True) in text
    events = window.findChild(QListWidget, "events_list")
    assert events.count() == 1 and "set_to_none -> zeros" in events.item(0).text()
    assert combo.currentText() == "zeros"


def test_pause_holds_the_loop_and_resume_goes_on(qtbot, window):
    choose(window, steps=100_000)
    click(qtbot, button(window, "run_button"))
    wait_steps(qtbot, window, 3)
    rate = window.status.labels["rate"]  # steps/s over the last second or so
    qtbot.waitUntil(lambda: rate.text() != "steps/s: –")
    assert float(rate.text().split(": ")[1]) > 0
    pause = button(window, "pause_button")
    click(qtbot, pause)
    assert pause.text() == "Resume"
    assert window.session.controls.paused
    wait_frames(qtbot, window, 4)  # the step that was running ends
    held = len(window.history.steps)
    wait_frames(qtbot, window, 10)
    assert len(window.history.steps) == held
    assert window.state == "paused"
    click(qtbot, pause)
    assert pause.text() == "Pause"
    wait_steps(qtbot, window, held + 3)
    click(qtbot, button(window, "stop_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    assert window.session.summary["stopped_by"] == "stopped"
    assert "Stopped after" in window.run_panel.state_label.text()
    assert button(window, "run_button").isEnabled()


def test_text_frames_set_the_state_only_when_it_changes(qtbot, window, monkeypatch):
    """The periodic text refresh (every TEXT_EVERY frames) re-laid out the run panel, title
    and pin controls with the same state each time; it now does so only on a change."""
    from memlens.app.window.frame_clock import TEXT_EVERY

    choose(window, steps=100_000)
    click(qtbot, button(window, "run_button"))
    wait_steps(qtbot, window, 3)
    qtbot.waitUntil(lambda: window.state == "running")
    calls: list[str] = []
    real = window.set_state

    def spy(state, message=""):
        calls.append(state)
        real(state, message)

    monkeypatch.setattr(window, "set_state", spy)
    wait_frames(qtbot, window, 2 * TEXT_EVERY + 1)  # two text refreshes at least
    assert calls == [] and window.state == "running"
    assert "Running" in window.run_panel.state_label.text()
    click(qtbot, button(window, "pause_button"))  # a change is still shown at once
    assert calls == ["paused"] and "Paused" in window.run_panel.state_label.text()
    wait_frames(qtbot, window, 2 * TEXT_EVERY + 1)
    assert calls == ["paused"]
    click(qtbot, button(window, "stop_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)


def test_export_writes_run_files_and_plot_images(qtbot, window, tmp_path):
    run_to_end(qtbot, window, steps=8)
    window.export_action.trigger()
    dialog = window.findChild(ExportDialog)
    assert dialog is not None and dialog.isVisible()
    out = tmp_path / "exported"
    dialog.folder_edit.setText(str(out))
    for fmt in ("trace", "timeline"):
        dialog.checks[fmt].setChecked(True)
    snapshot = dialog.checks["snapshot"]
    assert not snapshot.isEnabled() and "precise" in snapshot.toolTip()  # needs precise mode
    dialog.accept()
    steps_csv = (out / "steps.csv").read_text().splitlines()
    assert steps_csv[0].split(",") == list(STEP_COLUMNS)
    assert len(steps_csv) == 1 + 8
    assert len((out / "memory.csv").read_text().splitlines()) == 1 + len(window.history.samples)
    doc = json.loads((out / "run.json").read_text())
    assert doc["config"]["preset"] == "mlp" and doc["summary"]["steps_done"] == 8
    back = load_run(out)
    np.testing.assert_allclose(back.steps.column("loss"), window.history.steps.column("loss"),
                               rtol=1e-5)
    for name in ("memory", "time", "loss"):
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        root = ET.parse(out / f"{name}.svg").getroot()
        assert root.tag.endswith("svg")
    assert "Wrote" in window.statusBar().currentMessage()
    trace = json.loads((out / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert len([e for e in spans if e.get("name", "").startswith("step")]) >= 8
    times, sizes = json.loads((out / "memory_timeline.json").read_text())
    assert len(times) == len(sizes) > 0


def test_pin_two_runs_compare_hide_and_remove(qtbot, window):
    run_to_end(qtbot, window, steps=10)
    click(qtbot, button(window, "pin_button"))
    assert not button(window, "pin_button").isEnabled()  # pinned already
    window.findChild(QComboBox, "zero_grad_combo").setCurrentText("off")
    run_to_end(qtbot, window, steps=14)
    click(qtbot, button(window, "pin_button"))
    assert [p.name for p in window.pins] == ["mlp zero_grad=set_to_none (10 steps)",
                                             "mlp zero_grad=off (14 steps)"]
    pins_list = window.findChild(QListWidget, "pins_list")
    assert pins_list.item(1).text() == "pin 2: mlp zero_grad=off (14 steps)"
    wait_frames(qtbot, window, 2)
    for name in PLOTS:
        ghosts = plot(window, name).ghosts
        assert len(ghosts) == 2
        assert all(len(c.getData()[0]) > 0 for c in ghosts.values())
    first, _second = window.pins
    _, ghost_total = plot(window, "memory_plot").ghosts[first.pin_id].getData()
    np.testing.assert_allclose(ghost_total * Y_UNIT,
                               first.series.history.samples.column("total"), rtol=1e-6)

    item = pins_list.item(0)
    from PySide6.QtCore import Qt

    item.setCheckState(Qt.Unchecked)
    assert not first.visible
    assert not plot(window, "memory_plot").ghosts[first.pin_id].isVisible()
    pins_list.setCurrentRow(1)
    click(qtbot, button(window, "remove_pin_button"))
    assert [p.pin_id for p in window.pins] == [first.pin_id]
    assert list(plot(window, "loss_plot").ghosts) == [first.pin_id]


def test_open_bad_folder_says_why_and_good_folder_loads(qtbot, window, tmp_path):
    bad = tmp_path / "not-a-run"
    bad.mkdir()
    (bad / "notes.txt").write_text("hello")
    assert not window.open_run(bad)
    box = window.findChild(QMessageBox, "open_error")
    assert box is not None and box.isVisible()
    assert "steps.csv" in box.text() and "missing" in box.text()
    box.close()
    assert window.isVisible()

    run_to_end(qtbot, window, steps=6)
    folder = window.session.folder
    expected = window.history.steps.column("loss")
    click(qtbot, button(window, "reset_button"))
    assert window.series is None
    assert window.open_run(folder)
    _, loss = plot(window, "loss_plot").curves["loss"].getData()
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    assert "read-only" in window.run_panel.state_label.text()
    click(qtbot, button(window, "pin_button"))
    assert len(window.pins) == 1


def test_close_during_a_run_stops_the_worker_cleanly(qtbot, tmp_path, qtlog):
    from memlens.app.window.main_window import MainWindow

    w = MainWindow(runs_dir=tmp_path / "runs")
    w.show()
    choose(w, steps=100_000)
    click(qtbot, button(w, "run_button"))
    wait_steps(qtbot, w, 3)
    thread = w.session._thread
    assert thread.isRunning()
    w.close()  # stops the run; the window closes when the worker has ended (no freeze)
    assert w.session.controls.stop_requested
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=60_000)
    assert not thread.isRunning()
    assert not [r for r in qtlog.records if "QThread" in r.message]
    w.deleteLater()


def test_training_error_pauses_explains_and_resumes_after_a_fix(qtbot, window):
    choose(window, "lstm", steps=6)
    detach = window.findChild(QCheckBox, "detach_check")
    detach.setChecked(False)
    click(qtbot, button(window, "run_button"))
    qtbot.waitUntil(lambda: window.state == "error", timeout=120_000)
    banner = window.error_banner
    assert banner.isVisible() and "backward" in banner.text() and "detach" in banner.text()
    error = next(e for e in window.history.events() if e.kind == "error")
    events = window.findChild(QListWidget, "events_list")
    assert events.currentItem() is not None and "error" in events.currentItem().text()
    assert error.explanation in window.events_panel.detail.text()
    for name in PLOTS:
        assert error.step in [m.value() for m in plot(window, name).markers]
    assert button(window, "pause_button").text() == "Resume"

    detach.setChecked(True)  # the fix, applied at the next step
    click(qtbot, button(window, "pause_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=120_000)
    assert not banner.isVisible()
    toggles = [e for e in window.history.events() if e.kind == "toggle"]
    assert [(e.key, e.new) for e in toggles] == [("detach_state", True)]
    assert toggles[0].step == error.step + 1
    assert window.history.steps.column("step")[-1] == 5


def test_clicking_an_event_moves_the_plots_to_its_step(qtbot, window):
    choose(window, steps=100_000)
    click(qtbot, button(window, "run_button"))
    wait_steps(qtbot, window, 20)
    window.findChild(QCheckBox, "no_grad_check").setChecked(False)
    qtbot.waitUntil(lambda: window.history.event_count == 1)
    event = window.history.events()[0]
    wait_steps(qtbot, window, event.step + 20)
    click(qtbot, button(window, "stop_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    events = window.findChild(QListWidget, "events_list")
    item = events.item(0)
    rect = events.visualItemRect(item)
    from PySide6.QtCore import Qt

    qtbot.mouseClick(events.viewport(), Qt.LeftButton, pos=rect.center())
    x0, x1 = window.plots.x_range()
    assert not window.plots.follow
    assert abs((x0 + x1) / 2 - event.step) < 1e-6 and x1 - x0 == 30  # the steps around it
    assert window.plots.memory_plot.hover_line.value() == event.step + 0.5
    assert f"step {event.step} after" in plot(window, "memory_plot").getPlotItem().titleLabel.text
    assert f"step {event.step}" in plot(window, "loss_plot").getPlotItem().titleLabel.text


def test_precise_run_streams_allocations_and_exports_a_snapshot(qtbot, window, tmp_path):
    run_to_end(qtbot, window, steps=4, precise=True)
    assert len(window.history.allocs) > 0
    assert (window.session.folder / "allocations.npy").is_file()
    written = window.export_to(tmp_path / "out", {"snapshot"})
    assert [p.name for p in written] == ["snapshot.pickle"]
    # The status bar names the precise tracker the run used; the tooltip says why when it
    # is the slower Python one.
    env = window.history.meta["environment"]
    source = window.status.labels["memory_source"]
    assert source.text() == env["memory_label"] and "every" in source.text()
    assert ("allocation" in source.text()) == env["precise_backend"].startswith("allocator")
    window.status.set_environment({**env, "precise_backend": "dispatch mode (Python)",
                                   "precise_note": "no C++ compiler found"})
    assert "because no C++ compiler found" in source.toolTip()


def test_a_first_precise_run_that_builds_the_recorder_says_so_in_the_events(qtbot, window,
                                                                            monkeypatch):
    import memlens.core.native

    monkeypatch.setattr(memlens.core.native, "needs_build", lambda: True)
    run_to_end(qtbot, window, steps=3, precise=True)
    events = window.events_panel.list
    texts = [events.item(i).text() for i in range(events.count())]
    assert any("building precise mode's allocation recorder" in t for t in texts)
    # It is about the set-up, not the run's data: no marker on the plots.
    assert all(len(p.markers) == 0 for p in window.plots.plots)

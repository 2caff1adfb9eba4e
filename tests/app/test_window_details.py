"""Hover, follow and zoom, restart hints, the graph tab, and failures the window must survive."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QLabel, QMessageBox, QPushButton, QSpinBox

from memlens.app.window.main_window import MainWindow
from memlens.core.synthetic import synthetic_training
from tests.app.drive import choose, click, wait_frames, wait_steps


def button(window, name: str) -> QPushButton:
    return window.findChild(QPushButton, name)


def stop(qtbot, window) -> None:
    click(qtbot, button(window, "stop_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)


def test_hovering_a_plot_reads_out_that_step_on_every_plot(qtbot, window):
    choose(window, steps=40)
    click(qtbot, button(window, "run_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=120_000)
    memory = window.findChild(pg.PlotWidget, "memory_plot")
    vb = memory.getPlotItem().vb
    target = memory.mapFromScene(vb.mapViewToScene(QPointF(12.4, 0)))
    target.setY(memory.height() // 2)
    qtbot.mouseMove(memory.viewport(), target)
    qtbot.waitUntil(lambda: window.plots.hover_x is not None)
    assert int(window.plots.hover_x) == 12
    qtbot.waitUntil(lambda: "step 12 after" in memory.getPlotItem().titleLabel.text)
    loss_title = window.findChild(pg.PlotWidget, "loss_plot").getPlotItem().titleLabel.text
    loss_12 = window.history.steps.rows(12, 13)[0][window.history.steps.index["loss"]]
    assert "step 12" in loss_title and f"{loss_12:.4g}" in loss_title
    for plot in window.plots.plots:
        assert plot.hover_line.isVisible() and abs(plot.hover_line.value() - 12.4) < 0.2


def _wheel(widget, pos: QPoint, steps: int) -> None:
    event = QWheelEvent(QPointF(pos), QPointF(widget.mapToGlobal(pos)), QPoint(0, 0),
                        QPoint(0, 120 * steps), Qt.NoButton, Qt.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def test_zooming_back_stops_following_and_follow_newest_brings_it_back(qtbot, window):
    choose(window, steps=100_000)
    click(qtbot, button(window, "run_button"))
    wait_steps(qtbot, window, 60)
    memory = window.findChild(pg.PlotWidget, "memory_plot")
    centre = QPoint(memory.viewport().width() // 2, memory.viewport().height() // 2)
    _wheel(memory.viewport(), centre, 3)  # zoom in around the middle of the run
    assert not window.plots.follow
    follow = window.findChild(QPushButton, "follow_button")
    assert not follow.isChecked()
    held = window.plots.x_range()
    wait_steps(qtbot, window, window.series.step_count + 10)
    wait_frames(qtbot, window, 3)  # drawn since the new steps came
    assert window.plots.x_range() == held  # new steps do not move a view the user chose
    click(qtbot, follow)
    assert window.plots.follow
    qtbot.waitUntil(lambda: window.plots.x_range()[1] >= window.series.x_end - 1)
    stop(qtbot, window)


def test_changing_a_run_setting_while_running_says_it_needs_a_restart(qtbot, window):
    choose(window, steps=100_000)
    click(qtbot, button(window, "run_button"))
    wait_steps(qtbot, window, 2)
    hint = window.run_panel.hints["batch_size"]
    assert not hint.isVisible()
    window.findChild(QSpinBox, "batch_size_spin").setValue(16)
    assert hint.isVisible() and hint.text() == "needs restart"
    assert window.session.config.batch_size == 8  # the running loop keeps its settings
    stop(qtbot, window)
    assert not hint.isVisible()


def test_graph_tab_captures_the_next_step_on_request(qtbot, window):
    choose(window, steps=100_000)
    click(qtbot, button(window, "run_button"))
    wait_steps(qtbot, window, 2)
    window.tabs.setCurrentIndex(1)
    panel = window.graph_tab.panel
    assert panel is not None and window.graph_tab.currentWidget() is panel
    click(qtbot, panel.findChild(QPushButton, "capture_button"))
    qtbot.waitUntil(lambda: len(window.history.graphs) >= 1, timeout=60_000)
    qtbot.waitUntil(lambda: len(panel.captures) >= 1)
    assert panel.captures[0] is window.history.graphs[0]
    stop(qtbot, window)


def test_an_exception_from_the_loop_is_reported_and_the_app_goes_on(qtbot, tmp_path):
    def broken(config, controls, sink, on_error="pause"):
        synthetic_training(config.with_values({"steps": 3}), controls, sink)
        raise RuntimeError("the data loader fell over")

    w = MainWindow(runs_dir=tmp_path / "runs", train_fn=broken)
    qtbot.addWidget(w)
    w.show()
    click(qtbot, button(w, "run_button"))
    qtbot.waitUntil(lambda: w.state == "finished", timeout=30_000)
    qtbot.waitUntil(lambda: any(e.key == "run failed" for e in w.history.events()))
    event = next(e for e in w.history.events() if e.key == "run failed")
    assert "RuntimeError: the data loader fell over" in event.message
    assert "Traceback" in event.explanation
    w.refresh_now()
    assert "run failed" in w.events_panel.list.item(w.events_panel.list.count() - 1).text()
    assert button(w, "run_button").isEnabled()


def test_export_to_a_folder_that_cannot_be_written_says_so(qtbot, window, tmp_path):
    choose(window, steps=3)
    click(qtbot, button(window, "run_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert window.export_to(blocker / "inside", {"run files", "png"}) == []
    box = window.findChild(QMessageBox, "export_message")
    assert box is not None and box.isVisible() and "inside" in box.text()
    box.close()
    written = window.export_to(tmp_path / "ok", {"run files"})
    assert sorted(p.name for p in written) == ["memory.csv", "run.json", "steps.csv"]


def test_status_bar_and_toggle_sync_with_a_scheduled_change(qtbot):
    from memlens.core.config import RunConfig, ScheduledChange

    w = MainWindow(runs_dir=None, train_fn=synthetic_training)
    qtbot.addWidget(w)
    w.show()
    config = RunConfig(steps=30, eval_every=0).with_schedule([ScheduledChange(12, "amp", "bf16")])
    w.start_config(config)
    qtbot.waitUntil(lambda: w.state == "finished", timeout=30_000)
    assert w.findChild(QLabel, "status_step").text() == "step: 29"
    assert w.techniques_panel.fields["amp"].value() == "bf16"  # the panel shows the engine
    total = w.history.samples.rows()[-1][w.history.samples.index["total"]]
    from memlens.core.units import format_bytes

    assert w.findChild(QLabel, "status_total").text() == f"total: {format_bytes(total)}"
    peak = np.max(w.history.steps.column("peak_bytes"))
    assert w.findChild(QLabel, "status_peak").text() == f"peak: {format_bytes(peak)}"


def test_reset_while_paused_on_an_error_clears_the_run_and_keeps_pins(qtbot):
    from memlens.core.config import RunConfig

    w = MainWindow(runs_dir=None, train_fn=synthetic_training)
    qtbot.addWidget(w)
    w.show()
    w.start_config(RunConfig(steps=20))
    qtbot.waitUntil(lambda: w.state == "finished", timeout=30_000)
    w.pin_current_run()
    w.start_config(RunConfig(preset="lstm", steps=50).with_sets(["detach_state=false"]))
    qtbot.waitUntil(lambda: w.state == "error", timeout=30_000)
    assert w.error_banner.isVisible()
    click(qtbot, button(w, "reset_button"))
    qtbot.waitUntil(lambda: w.state == "idle", timeout=30_000)
    assert w.series is None and w.events_panel.list.count() == 0
    assert not w.error_banner.isVisible()
    assert len(w.pins) == 1 and len(w.plots.memory_plot.ghosts) == 1
    assert button(w, "run_button").isEnabled() and not button(w, "stop_button").isEnabled()


def test_cuda_runs_show_reserved_and_allocated_lines(qtbot):
    from memlens.core.history import RunHistory
    from memlens.core.records import MemorySample

    h = RunHistory()
    h.on_start({"environment": {"device": "cuda:0", "memory_label": "CUDA allocator"}})
    for step in range(5):
        for i, phase in enumerate(("zero_grad", "forward", "backward", "optimizer")):
            h.add_sample(MemorySample(step, phase, step + i / 10, 1000, 1000, 2000, 500 * i, 0,
                                     allocated=5000 + 500 * i, reserved=2**20))
    w = MainWindow(runs_dir=None)
    qtbot.addWidget(w)
    w.show_history(h)
    memory = w.plots.memory_plot
    x, reserved = memory.curves["reserved"].getData()  # the memory plot draws in MiB
    assert len(x) == 20 and (reserved == 1.0).all()
    _, allocated = memory.curves["allocated"].getData()
    assert allocated[1] * 2**20 == 5500
    assert w.status.labels["memory_source"].text() == "CUDA allocator"
    assert "reserved" in memory.getPlotItem().titleLabel.text


def test_an_events_right_click_menu_copies_its_text(qtbot, window):
    """The events list's actions (EventsPanel.add_action): Copy its text, for now; the
    menu a right click opens offers each action that applies to the event."""
    from PySide6.QtWidgets import QApplication, QMenu

    from memlens.core.records import RunEvent

    panel = window.events_panel
    panel.add_event(RunEvent(3, 0.1, "info", message="a note", explanation="why it matters"))
    offered = panel.actions_for(0)
    assert [a.objectName() for a in offered] == ["copy_event_action"]
    rect = panel.list.visualItemRect(panel.list.item(0))
    menu = panel._on_context_menu_requested(rect.center())
    assert isinstance(menu, QMenu) and menu.isVisible()
    copy = next(a for a in menu.actions() if a.objectName() == "copy_event_action")
    copy.trigger()
    assert QApplication.clipboard().text() == panel.list.item(0).toolTip()
    assert "why it matters" in QApplication.clipboard().text()
    menu.close()
    assert panel.actions_for(5) == []  # no event there: no menu

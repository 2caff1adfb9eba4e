"""The plots' axes and markers (#49 item 7): a start-up spike does not flatten the step-time
axis, the "0 MiB" tick is drawn whole at the least plot height, Reset leaves no stale y
range, marker labels stay short and in two rows, and a precise run's first start says it
builds the native recorder, with the time taken so far."""

from __future__ import annotations

import dataclasses
import threading

from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QSplitter

from memlens.app.app_settings import AppSettings
from memlens.app.timeline.live_plot import EDGE_PX
from memlens.app.timeline.marker_labels import MAX_LABEL_CHARS, MAX_ROWS
from memlens.app.window.main_window import MainWindow
from memlens.core.config import RunConfig, ScheduledChange
from memlens.core.records import NATIVE_BUILD_EVENT, PHASES, RunEvent
from memlens.core.synthetic import synthetic_training
from tests.app.drive import wait_frames
from tests.app.test_view_help_theme import run_to_end

SPIKE = 60.0


def slow_first_step(config, controls, sink, on_error="pause"):
    """synthetic_training whose step 0 takes SPIKE times as long (a warm-up)."""

    class Spiked:
        def __getattr__(self, name):
            return getattr(sink, name)

        def on_steps(self, rows):
            for r, items in rows:
                if r.step == 0:
                    r = dataclasses.replace(r, step_ms=r.step_ms * SPIKE, **{
                        f"{p}_ms": getattr(r, f"{p}_ms") * SPIKE for p in PHASES})
                sink.on_steps([(r, items)])

    return synthetic_training(config, controls, Spiked(), on_error=on_error)


def window_with(qtbot, tmp_path, train) -> MainWindow:
    window = MainWindow(runs_dir=None, train_fn=train,
                        settings=AppSettings.at(tmp_path / "s.ini"))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    return window


def test_a_start_up_spike_does_not_flatten_the_step_time_axis(qtbot, tmp_path):
    window = window_with(qtbot, tmp_path, slow_first_step)
    window.start_config(RunConfig(preset="mlp", steps=40))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    window.refresh_now()
    ms = window.history.steps.column("step_ms")
    typical = sorted(ms[1:])[len(ms) // 2]
    assert ms[0] > 20 * typical
    (_, _), (_lo, hi) = window.plots.time_plot.getPlotItem().vb.viewRange()
    assert hi < 5 * max(ms[1:])  # the other steps fill the plot
    assert hi >= max(ms[1:])  # and none of them is cut
    legend = window.plots.time_plot.getPlotItem().titleLabel.text
    assert "step&nbsp;0:" in legend and "off&nbsp;the&nbsp;top" in legend


def test_the_zero_tick_is_whole_at_the_least_plot_height(qtbot, window):
    run_to_end(qtbot, window, steps=4)
    splitter = window.findChild(QSplitter, "plots_splitter")
    splitter.setSizes([1, 2000, 2000])  # the memory plot at its least height
    window.refresh_now()
    wait_frames(qtbot, window, 2)
    vb = window.plots.memory_plot.getPlotItem().vb
    x0 = vb.viewRange()[0][0]
    zero = vb.mapViewToScene(QPointF(x0, 0.0)).y()
    assert vb.sceneBoundingRect().bottom() - zero >= EDGE_PX - 0.5


def test_reset_leaves_no_stale_y_range(qtbot, window):
    run_to_end(qtbot, window, steps=4)
    memory = window.plots.memory_plot.getPlotItem().vb
    assert memory.viewRange()[1] != [0.0, 1.0]  # the run's range
    window.reset_run()
    window.refresh_now()
    for plot in window.plots.plots:
        (_, _), (lo, hi) = plot.getPlotItem().vb.viewRange()
        assert (lo, hi) == (0.0, 1.0), plot.objectName()


def test_marker_labels_are_short_and_take_two_rows_at_most(qtbot, tmp_path):
    window = window_with(qtbot, tmp_path, synthetic_training)
    window.resize(1024, 768)
    values = ["off", "zeros", "set_to_none", "off"]
    config = RunConfig(preset="mlp", steps=30).with_schedule(
        [ScheduledChange(10 + i, "zero_grad", v) for i, v in enumerate(values)])
    window.start_config(config)
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    window.refresh_now()
    wait_frames(qtbot, window, 2)
    for plot in window.plots.plots:
        assert len(plot.markers) == 4
        shown = [m.label for m in plot.markers if m.label.isVisible()]
        assert shown
        rows = {round(label.orthoPos, 6) for label in shown}
        assert len(rows) <= MAX_ROWS
        for marker in plot.markers:
            assert len(marker.label.toPlainText()) <= MAX_LABEL_CHARS
            assert marker.label.toPlainText().startswith("zero_grad \u2192 ")


def test_a_precise_runs_native_build_is_said_while_it_goes(qtbot, tmp_path):
    built = threading.Event()

    def building(config, controls, sink, on_error="pause"):
        sink.on_event(RunEvent(0, 0.0, "setup", key=NATIVE_BUILD_EVENT,
                               message="building precise mode's allocation recorder"))
        built.wait(30)  # the compiler's minutes
        return synthetic_training(config, controls, sink, on_error=on_error)

    window = window_with(qtbot, tmp_path, building)
    try:
        window.start_config(RunConfig(preset="mlp", steps=3))
        label = window.run_panel.state_label
        qtbot.waitUntil(lambda: "building precise mode" in label.text(), timeout=10_000)
        assert window.state == "starting" and "so far" in label.text()
    finally:
        built.set()
    qtbot.waitUntil(lambda: window.state == "finished", timeout=60_000)
    assert "building" not in label.text()

"""Texts that must stay right: the leak_loss_sum tooltip, the graph tab after Reset, and
--follow of a folder still to come."""

from __future__ import annotations

import os

from PySide6.QtWidgets import QGraphicsTextItem

from memlens.app.graph.boxes import graph_font
from memlens.core.runfolder.writer import RunWriter
from tests.app.drive import click
from tests.app.test_view_help_theme import run_to_end
from tests.core.test_run_follow import sample, step_record


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


def test_following_a_folder_that_does_not_exist_yet_waits_for_it(qtbot, window, tmp_path):
    folder = tmp_path / "not yet"
    assert window.follow_run(folder)
    assert window.run_panel.state_label.text() == f"Waiting for {folder} to appear…"
    assert not window.following
    writer = RunWriter(folder)  # the run starts: its folder appears
    writer.on_start({"source": "watch", "pid": os.getpid()})
    for i in range(3):
        writer.on_samples([sample(i, "forward")])
        writer.on_steps([(step_record(i), ())])
    writer.flush()
    qtbot.waitUntil(lambda: window.following, timeout=5000)
    loss = window.plots.loss_plot.curves["loss"]
    qtbot.waitUntil(lambda: loss.getData()[1] is not None and len(loss.getData()[1]) == 3,
                    timeout=5000)
    assert window.loaded_from == folder
    writer.on_finish({"steps_done": 3})

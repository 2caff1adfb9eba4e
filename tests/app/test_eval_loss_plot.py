"""The loss plot shows the validation loss a run recorded (steps.csv's eval_loss: a
framework's validation runs under a watch, the lab's eval_every): a point at each step a
validation followed, read out on hover."""

from __future__ import annotations

import dataclasses
import os

import pyqtgraph as pg
from PySide6.QtCore import QPointF

from memlens.core.runfolder.writer import RunWriter
from tests.core.test_run_follow import sample, step_record

EVALS = {3: 0.75, 7: 0.5}  # step -> its validation loss


def test_a_runs_validation_loss_is_plotted_at_its_steps_and_read_out(qtbot, window,
                                                                     tmp_path):
    folder = tmp_path / "watched"
    w = RunWriter(folder)
    w.on_start({"source": "watch", "pid": os.getpid()})
    for i in range(10):
        w.on_samples([sample(i, phase) for phase in ("forward", "backward", "optimizer")])
        w.on_steps([(dataclasses.replace(step_record(i), eval_loss=EVALS.get(i, float("nan"))),
                     ())])
    w.on_finish({"steps_done": 10})
    assert window.open_run(folder)
    loss_plot = window.findChild(pg.PlotWidget, "loss_plot")
    points = loss_plot.curves["eval_loss"]
    qtbot.waitUntil(lambda: points.getData()[0] is not None and len(points.getData()[0]) == 2,
                    timeout=5000)
    x, y = points.getData()
    # on the loss curve's own x (a step's value drawn at its middle)
    loss_x, _ = loss_plot.curves["loss"].getData()
    assert [int(v) for v in x] == sorted(EVALS) and set(x) <= set(loss_x)
    assert y.tolist() == [EVALS[s] for s in sorted(EVALS)]
    assert points.isVisible()

    vb = loss_plot.getPlotItem().vb  # hovering step 7 reads its validation loss out
    target = loss_plot.mapFromScene(vb.mapViewToScene(QPointF(7.4, 0)))
    target.setY(loss_plot.height() // 2)
    qtbot.mouseMove(loss_plot.viewport(), target)
    qtbot.waitUntil(lambda: "step 7" in loss_plot.getPlotItem().titleLabel.text, timeout=5000)
    title = loss_plot.getPlotItem().titleLabel.text
    assert "validation&nbsp;loss" in title and "<b>0.5</b>" in title


def test_a_run_without_validation_has_no_points_and_no_legend_entry(qtbot, window, tmp_path):
    folder = tmp_path / "plain"
    w = RunWriter(folder)
    w.on_start({"source": "watch", "pid": os.getpid()})
    for i in range(4):
        w.on_samples([sample(i, "forward")])
        w.on_steps([(step_record(i), ())])
    w.on_finish({"steps_done": 4})
    assert window.open_run(folder)
    loss_plot = window.findChild(pg.PlotWidget, "loss_plot")
    qtbot.waitUntil(lambda: loss_plot.curves["loss"].getData()[0] is not None
                    and len(loss_plot.curves["loss"].getData()[0]) == 4, timeout=5000)
    x, _ = loss_plot.curves["eval_loss"].getData()
    assert x is None or len(x) == 0
    assert "validation&nbsp;loss" not in loss_plot.getPlotItem().titleLabel.text

"""The plots' axes (app.timeline.live_axis): pyqtgraph's ticks and labels, laid out and
painted cheaper."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest

from tests.app.drive import on_screen, pixels


@pytest.fixture
def loss_plot(qtbot):
    """The plot with the most axes on screen: steps below, loss left, grad norm right."""
    from memlens.app.timeline.loss_plot import LossPlot

    return on_screen(qtbot, LossPlot(), (700, 300))


def test_axes_lay_out_the_ticks_and_labels_pyqtgraph_does(loss_plot, qtbot):
    from PySide6.QtGui import QPainter, QPicture

    item = loss_plot.getPlotItem()
    axes = [item.getAxis(side) for side in ("bottom", "left", "right")]
    compared = 0
    for x1, y1 in ((10.0, 1.0), (1234.5, 0.0013), (1.05e6, 7e5), (250_000.0, 3.5)):
        item.setXRange(0.0, x1, padding=0)
        item.setYRange(-y1 / 3, y1, padding=0)
        loss_plot.grad_view.setYRange(0.0, 2 * y1, padding=0)
        qtbot.waitUntil(lambda: all(axis.picture is not None for axis in axes))
        for axis in axes:
            for _ in range(2):  # labels measured, then labels whose size was kept
                picture = QPicture()
                painter = QPainter(picture)
                ours = axis.generateDrawSpecs(painter)
                theirs = pg.AxisItem.generateDrawSpecs(axis, painter)
                painter.end()
                assert ours[0] == theirs[0]
                assert ours[1] == theirs[1]
                assert ([(r, int(f), t) for r, f, t in ours[2]]
                        == [(r, int(f), t) for r, f, t in theirs[2]])
                assert ours[2], "every axis labels some ticks"
                compared += 1
    assert compared == 24


def test_an_axis_paints_what_pyqtgraph_paints(loss_plot, qtbot):
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtWidgets import QStyleOptionGraphicsItem

    item = loss_plot.getPlotItem()
    item.setXRange(0.0, 123_456.0, padding=0)
    item.setYRange(0.0, 2.5, padding=0)
    for side in ("bottom", "left", "right"):
        axis = item.getAxis(side)
        rect = axis.boundingRect()
        images = []
        for paint in (axis.paint, lambda p, o, w, a=axis: pg.AxisItem.paint(a, p, o, w)):
            axis.picture = None  # both lay the ticks out afresh
            image = QImage(int(rect.width()) + 1, int(rect.height()) + 1, QImage.Format_RGB32)
            image.fill(0xFFFFFFFF)
            painter = QPainter(image)
            painter.translate(-rect.left(), -rect.top())
            option = QStyleOptionGraphicsItem()
            option.exposedRect = QRectF(rect)
            paint(painter, option, None)
            painter.end()
            images.append(pixels(image).copy())
        assert np.array_equal(images[0], images[1]), side
        assert (images[0] != 255).any()  # something was drawn


def test_a_following_step_axis_leaves_the_screen_as_a_full_paint_draws_it(loss_plot, qtbot):
    """Live: the curves grow at their right edge, the step axis moves on now and then and the
    legend changes; each frame repaints only what changed (the axes' labels only where
    exposed). What the screen holds must be what a full paint draws."""
    from PySide6.QtWidgets import QApplication

    item = loss_plot.getPlotItem()
    item.setYRange(0.0, 2.5, padding=0)
    loss_plot.grad_view.setYRange(0.0, 2.0, padding=0)
    x = np.arange(5000.0)
    loss = 2.3 * np.exp(-x / 800) + 0.05
    moves = 0
    for n in range(200, 5000, 97):
        loss_plot.curves["loss"].setData(x[:n], loss[:n])
        loss_plot.curves["grad_norm"].setData(x[:n], 1 + 0.1 * np.sin(x[:n]))
        if item.vb.viewRange()[0][1] < n:  # follow the newest step, with room to grow
            item.setXRange(0.0, n * 1.3, padding=0)
            moves += 1
        loss_plot.set_legend(f"step {n}")
        QApplication.processEvents()
    assert moves >= 5
    screen = loss_plot.screen().grabWindow(loss_plot.winId()).toImage()
    assert np.array_equal(pixels(screen), pixels(loss_plot.grab().toImage()))


def test_a_label_partly_exposed_is_painted_again(loss_plot, qtbot):
    """Something over part of a label (a tooltip, a dragged dock) goes: the axis repaints that
    part of its labels, and the screen is again what a full paint draws."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QPainter, QPicture
    from PySide6.QtWidgets import QApplication

    item = loss_plot.getPlotItem()
    item.setXRange(0.0, 250_000.0, padding=0)
    item.setYRange(0.0, 2.5, padding=0)
    QApplication.processEvents()
    for side in ("bottom", "left", "right"):
        axis = item.getAxis(side)
        picture = QPicture()
        painter = QPainter(picture)
        rect = axis.generateDrawSpecs(painter)[2][1][0]  # the second label's box
        painter.end()
        # its lower right quarter: the label's own region, not the ticks'
        axis.update(QRectF(rect.center(), rect.bottomRight()))
        QApplication.processEvents()
        screen = loss_plot.screen().grabWindow(loss_plot.winId()).toImage()
        assert np.array_equal(pixels(screen), pixels(loss_plot.grab().toImage())), side

"""Desktop polish (#31, items 3, 4, 5 and part of 10): exported plots with a step axis and
the pinned runs' names, legends that fit, marker labels inside the view and see-through,
whole steps only on the step axis. Each driven through the real window, checked on data."""

from __future__ import annotations

import re
from html import escape

import numpy as np
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QImage, QWheelEvent
from PySide6.QtWidgets import QApplication

from memlens.app.theme import DARK, LIGHT, MIN_LINE_CONTRAST, contrast
from memlens.app.timeline.plot_style import CATEGORY_COLORS, PHASE_COLORS, lighten
from memlens.app.window.frame_clock import TEXT_EVERY
from memlens.core.config import RunConfig, ScheduledChange
from tests.app.drive import wait_frames

SWATCH = re.compile(r'color:(#[0-9A-Fa-f]{6})">&#9632;</span>&nbsp;'
                    r'([^<]+?)(?=&nbsp;<b>|&nbsp; |<|$)')
# an entry: its swatch, name and value (bold), up to the next entry's separator
ENTRY = re.compile(r'&#9632;</span>&nbsp;(.+?)(?=&nbsp; <span|$)')
PIN_ENTRY = re.compile(r'color:(#[0-9A-Fa-f]{6})">&#9477;&nbsp;([^<]+)</span>')


def finish(qtbot, window, config: RunConfig) -> None:
    window.start_config(config)
    qtbot.waitUntil(lambda: window.state == "finished", timeout=120_000)


def tiny(steps: int, *sets: str) -> RunConfig:
    cfg = RunConfig().with_values({"preset": "mlp", "steps": steps, "batch_size": 8,
                                   "width": 16, "seq_len": 8, "eval_every": 5})
    return cfg.with_sets(list(sets)) if sets else cfg


def pinned_and_current(qtbot, window) -> None:
    """A pinned baseline, then a second run (bf16: every memory band holds bytes)."""
    finish(qtbot, window, tiny(12))
    window.pin_current_run()
    finish(qtbot, window, tiny(12, "amp=bf16"))
    wait_frames(qtbot, window, 2)


def _wheel(widget, pos: QPoint, steps: int) -> None:
    event = QWheelEvent(QPointF(pos), QPointF(widget.mapToGlobal(pos)), QPoint(0, 0),
                        QPoint(0, 120 * steps), Qt.NoButton, Qt.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


# --- 3. exported plots: a step axis, and the pinned runs by name --------------------------------


def _text_columns(path, view_left: int, view_right: int) -> int:
    """Separate runs of columns, under the plot's view and between its axes, that hold
    text-dark pixels (light theme): the tick labels and the axis title."""
    image = QImage(str(path)).convertToFormat(QImage.Format_RGB32)
    assert not image.isNull(), path
    rgb = np.frombuffer(image.constBits(), np.uint8).reshape(
        image.height(), image.bytesPerLine() // 4, 4)[:, :image.width(), :3].copy()
    dark = rgb.max(axis=2) < 110
    band = dark[int(image.height() * 0.86):, view_left:view_right]
    cols = band.any(axis=0)
    edges = np.flatnonzero(np.diff(cols.astype(np.int8)) == 1)
    return len(edges) + int(cols[0])


def test_exported_plots_have_a_step_axis_and_name_the_pinned_run(qtbot, window, tmp_path):
    pinned_and_current(qtbot, window)
    pin = window.pins[0]
    written = window.export_to(tmp_path / "out", {"png"})
    names = sorted(p.name for p in written)
    assert names == ["loss.png", "memory.png", "time.png"]
    for plot, name in ((window.plots.memory_plot, "memory"), (window.plots.time_plot, "time"),
                       (window.plots.loss_plot, "loss")):
        legend = plot.getPlotItem().titleLabel.text
        assert escape(pin.name) in legend.replace("&nbsp;", " "), (name, legend)
        (colour,) = [c for c, n in PIN_ENTRY.findall(legend)
                     if n.replace("&nbsp;", " ") == escape(pin.name)]
        assert colour.upper() == plot.ghosts[pin.pin_id].opts["pen"].color().name().upper()
        scale = QImage(str(tmp_path / "out" / f"{name}.png")).width() / plot.viewport().width()
        view = plot.getPlotItem().vb.sceneBoundingRect()
        # labels of ticks 0, 5, 10 and the axis title at the least: separate runs of text
        found = _text_columns(tmp_path / "out" / f"{name}.png", int(view.left() * scale) + 4,
                              int(view.right() * scale) - 4)
        assert found >= 4, (name, found)
    # the stack on screen still has one step axis, under the lowest plot
    shown = [p.getPlotItem().getAxis("bottom").isVisible() for p in window.plots.plots]
    assert shown == [False, False, True]
    assert window.plots.memory_plot.getPlotItem().getAxis("bottom").labelText == "step"


# --- 4. legends that fit, distinct colours, swatches visible in both themes ---------------------


def _hover(window, step: float) -> None:
    """What the mouse over a step does (the mouse path itself: test_window_details)."""
    window.plots.set_hover(step)
    assert f"step {int(step)}" in window.plots.loss_plot.getPlotItem().titleLabel.text


def _legend_fits(plot) -> None:
    item = plot.getPlotItem()
    label = item.titleLabel
    text = label.item
    left = text.mapToScene(QPointF(0, 0)).x()
    widest = text.document().idealWidth()
    right_edge = item.vb.sceneBoundingRect().right()
    assert left + widest <= right_edge + 1, (plot.objectName(), left + widest, right_edge)
    bottom = text.mapToScene(QPointF(0, text.document().size().height())).y()
    assert bottom <= item.vb.sceneBoundingRect().top() + 1, plot.objectName()


def _entries_unbroken(plot) -> None:
    """No legend entry is split over two lines ("optimizer 5.05" over "MiB"): an entry holds
    no breakable space, and no wrapped line of the laid-out text starts inside one."""
    label = plot.getPlotItem().titleLabel
    for entry in ENTRY.findall(label.text):
        assert " " not in re.sub(r"<[^>]+>", "", entry), (plot.objectName(), entry)
    doc = label.item.document()
    block = doc.begin()
    while block.isValid():
        text, layout = block.text(), block.layout()
        starts = {layout.lineAt(i).textStart() for i in range(1, layout.lineCount())}
        # regular spaces (and <br>'s line separators) only between entries
        for token in re.finditer("[^ \u2028]+", text):
            inside = [s for s in starts if token.start() < s < token.end()]
            assert not inside, (plot.objectName(), token.group())
        block = block.next()


def _swatches(plot) -> list[tuple[str, str]]:
    legend = plot.getPlotItem().titleLabel.text
    return ([(c.upper(), n.replace("&nbsp;", " ")) for c, n in SWATCH.findall(legend)]
            + [(c.upper(), n) for c, n in PIN_ENTRY.findall(legend)])


def test_legends_fit_at_1280_with_distinct_visible_colours_in_both_themes(qtbot, window):
    window.resize(1280, 800)
    pinned_and_current(qtbot, window)
    for theme in (LIGHT, DARK):
        window.theme_menu.apply(theme)
        for step in (None, 6):
            if step is None:
                # the legends as the window's own text refresh rewrites them (a text frame,
                # then one legend a frame)
                wait_frames(qtbot, window, TEXT_EVERY + len(window.plots.plots))
            else:
                _hover(window, step + 0.4)
                wait_frames(qtbot, window, 1)
            for plot in window.plots.plots:
                _legend_fits(plot)
                _entries_unbroken(plot)
                entries = _swatches(plot)
                names = [n.strip() for _c, n in entries]
                colours = [c for c, _n in entries]
                assert len(set(colours)) == len(colours), (plot.objectName(), entries)
                for colour, name in entries:
                    assert contrast(colour, theme.plot_background) >= MIN_LINE_CONTRAST, (
                        theme.name, plot.objectName(), name, colour)
                # each line's swatch is the colour its curve is drawn in
                for key, shown in (("total", "total"), ("peak", "peak"), ("loss", "loss"),
                                   ("grad_norm", "grad norm")):
                    curve = plot.curves.get(key)
                    if curve is None or shown not in names:
                        continue
                    pen = curve.pen if hasattr(curve, "pen") and not callable(curve.pen) \
                        else curve.opts["pen"]
                    drawn = pen.color().name().upper()
                    assert colours[names.index(shown)] == drawn, (plot.objectName(), key)
    memory = [n.strip() for _c, n in _swatches(window.plots.memory_plot)]
    for name in ("amp_casts", "activations", "peak", "total", "other"):
        assert name in memory, memory
    assert "eval" in [n.strip() for _c, n in _swatches(window.plots.time_plot)]
    window.theme_menu.apply(LIGHT)


# --- 5. marker labels: inside the view, theme-coloured, see-through -----------------------------


def _blend(top: str, alpha: float, under: str) -> str:
    a, b = QColor(top), QColor(under)
    mix = [round(alpha * x + (1 - alpha) * y) for x, y in
           zip((a.red(), a.green(), a.blue()), (b.red(), b.green(), b.blue()), strict=True)]
    return "#{:02X}{:02X}{:02X}".format(*mix)


# the area fills each plot draws (LivePlot.add_area lightens them by 0.3)
FILLS = {"memory_plot": tuple(CATEGORY_COLORS.values()), "time_plot": tuple(PHASE_COLORS.values())}


def test_marker_labels_stay_inside_the_view_and_let_the_curves_show(qtbot, window):
    window.resize(1280, 800)
    cfg = tiny(30).with_schedule([ScheduledChange.parse(s) for s in (
        "1:zero_grad=off", "15:retain_graph=true", "28:zero_grad=set_to_none")])
    finish(qtbot, window, cfg)
    wait_frames(qtbot, window, 2)

    def check(theme) -> None:
        for plot in window.plots.plots:
            view = plot.getPlotItem().vb.sceneBoundingRect()
            shown = [m for m in plot.markers if m.label.isVisible()]
            assert shown, plot.objectName()
            for line in shown:
                rect = line.label.sceneBoundingRect()
                assert view.left() - 0.5 <= rect.left() and rect.right() <= view.right() + 0.5, (
                    plot.objectName(), line.value(), rect, view)
                fill = line.label.fill.color()
                assert fill.name().upper() == theme.plot_background.upper()
                # text over a see-through box over light area fills: text contrast (WCAG
                # AA, 4.5) against the background, and readable over the box on the
                # lightest fill the plot draws
                text = line.label.textItem.defaultTextColor().name()
                assert contrast(text, theme.plot_background) >= 4.5
                for hue in FILLS.get(plot.objectName(), ()):
                    over = _blend(fill.name(), fill.alphaF(), lighten(hue, 0.3))
                    assert contrast(text, over) >= 2.5, (plot.objectName(), text, hue)
                # a curve passing under the label still stands out from the label's box
                for key in ("loss", "grad_norm", "peak"):
                    curve = plot.curves.get(key)
                    if curve is None:
                        continue
                    pen = curve.pen if hasattr(curve, "pen") and not callable(curve.pen) \
                        else curve.opts["pen"]
                    seen = _blend(fill.name(), fill.alphaF(), pen.color().name())
                    box = _blend(fill.name(), fill.alphaF(), theme.plot_background)
                    assert contrast(seen, box) >= 1.5, (plot.objectName(), key)

    for theme in (LIGHT, DARK):
        window.theme_menu.apply(theme)
        check(theme)
    window.theme_menu.apply(LIGHT)
    # Zoomed in so that the step-15 marker sits at the left edge, just out of view: its label
    # must not poke into the view (cut at its edge); the others stay inside.
    memory = window.plots.memory_plot
    window.plots.set_follow(False)
    memory.setXRange(15.05, 22, padding=0)
    wait_frames(qtbot, window, 1)
    for plot in window.plots.plots:
        view = plot.getPlotItem().vb.sceneBoundingRect()
        for line in plot.markers:
            if line.label.isVisible():
                rect = line.label.sceneBoundingRect()
                assert view.left() - 0.5 <= rect.left() and rect.right() <= view.right() + 0.5, (
                    plot.objectName(), line.value(), rect, view)
        (at_15,) = [m for m in plot.markers if m.value() == 15]
        assert not at_15.label.isVisible()


# --- 10 (part). the step axis labels whole steps only ---------------------------------------------


def test_a_zoomed_step_axis_labels_whole_steps_only(qtbot, window):
    window.resize(1280, 800)
    finish(qtbot, window, tiny(40))
    memory = window.plots.memory_plot
    centre = QPoint(memory.viewport().width() // 2, memory.viewport().height() // 2)
    for _ in range(30):  # the wheel, as a user zooms in on a few steps
        x0, x1 = window.plots.x_range()
        if x1 - x0 < 5:  # a tick per half step would fit here
            break
        _wheel(memory.viewport(), centre, 1)
    wait_frames(qtbot, window, 1)
    x0, x1 = window.plots.x_range()
    assert x1 - x0 < 5, (x0, x1)
    axis = window.plots.loss_plot.getPlotItem().getAxis("bottom")
    assert axis.isVisible()
    values = [v for _spacing, vs in axis.tickValues(x0, x1, axis.geometry().width())
              for v in vs]
    assert len(values) >= 3
    assert all(float(v).is_integer() for v in values), values
    strings = axis.tickStrings(values, axis.autoSIPrefixScale * axis.scale, 1)
    assert all(re.fullmatch(r"-?\d+", s) for s in strings), strings

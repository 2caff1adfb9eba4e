"""The numbers behind the plots: units, decimation, the pulled series, toggle effects."""

from __future__ import annotations

import numpy as np
import pytest

from memlens.app.series.bin_pyramid import BinPyramid
from memlens.app.series.decimate import PeakDecimator, bin_size, envelope, min_max, visible_slice
from memlens.app.series.run_series import RunSeries
from memlens.core.config import RunConfig, ScheduledChange
from memlens.core.controls import RunControls
from memlens.core.effects import toggle_effect
from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES
from memlens.core.synthetic import fill_history, synthetic_training
from memlens.core.units import byte_unit, format_bytes, format_ms, format_percent_change
from tests.app.drive import on_screen, pixels


@pytest.mark.parametrize(("value", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1536, "1.50 KiB"),
    (10 * 2**20, "10.0 MiB"), (300 * 2**20, "300 MiB"), (3 * 2**30, "3.00 GiB"),
    (-2.6 * 2**20, "-2.60 MiB"), (float("nan"), "n/a"),
])
def test_format_bytes(value, text):
    assert format_bytes(value) == text


def test_signed_and_other_formats():
    assert format_bytes(2**20, signed=True) == "+1.00 MiB"
    assert byte_unit(5 * 2**30) == (2**30, "GiB")
    assert format_ms(0.25) == "0.25 ms" and format_ms(1500) == "1.50 s"
    assert format_percent_change(100, 97) == "-3%" and format_percent_change(0, 1) == "n/a"


def test_visible_slice_keeps_a_neighbour_each_side():
    x = np.arange(100.0)
    sl = visible_slice(x, 10.5, 20.5)
    assert (sl.start, sl.stop) == (10, 22)
    assert visible_slice(x, -50, 500) == slice(0, 100)


def test_envelope_keeps_peaks_and_layer_order():
    rng = np.random.default_rng(0)
    n = 100_003
    layers = np.cumsum(rng.random((5, n)), axis=0).astype(np.float32)
    layers[2, 54_321] = 1e6  # one spike must survive
    layers[3:, 54_321] += 1e6
    x = np.arange(n, dtype=np.float64)
    xs, ys = envelope(x, layers, 2000)
    assert ys.shape[1] == len(xs) <= 2001
    assert ys[2].max() == layers[2].max()
    assert (np.diff(ys, axis=0) >= 0).all()  # stacked layers never cross
    assert xs[0] == 0 and xs[-1] <= x[-1]


def test_min_max_keeps_both_extremes_in_order():
    y = np.sin(np.linspace(0, 60, 50_000))
    y[123] = -5
    y[40_000] = 7
    xs, ys = min_max(np.arange(50_000.0), y, 1000)
    assert len(xs) == len(ys) <= 1002
    assert ys.min() == -5 and ys.max() == 7
    assert (np.diff(xs) >= 0).all()
    short = np.arange(10.0)
    assert min_max(short, short, 1000)[1] is short  # nothing to cut: the data itself


def test_run_series_pulls_only_new_rows_and_stacks_categories():
    h = RunHistory()
    series = RunSeries(h)
    assert series.pull() == (0, 0)
    synthetic_training(RunConfig(steps=20, eval_every=5), sink=h)
    n_samples, n_steps = series.pull()
    assert (n_samples, n_steps) == (len(h.samples), 20)
    assert series.pull() == (0, 0)
    cats = h.samples.rows()[:, [h.samples.index[c] for c in MEMORY_CATEGORIES]]
    np.testing.assert_allclose(series.memory_layers, np.cumsum(cats, axis=1).T, rtol=1e-6)
    np.testing.assert_allclose(series.total, h.samples.column("total"), rtol=1e-6)
    assert series.peak == h.steps.column("peak_bytes").max()
    assert series.step_row(7) == 7 and series.step_row(99) is None
    assert series.last_step == 19 and series.x_end == 20.0


def test_toggle_effect_compares_ten_steps_each_side():
    h = RunHistory()
    cfg = RunConfig(steps=40, eval_every=0)
    controls = RunControls(cfg.techniques, (ScheduledChange(20, "zero_grad", "zeros"),))
    synthetic_training(cfg, controls, h)
    event = h.events()[0]
    effect = toggle_effect(h, event)
    assert effect.complete and (effect.before_steps, effect.after_steps) == (10, 10)
    params = h.samples.column("params")[0]
    assert effect.memory_change["zero_grad"] == params
    assert effect.memory_change["backward"] == 0
    text = effect.text()
    assert text.startswith("zero_grad: set_to_none -> zeros: ")
    assert f"{format_bytes(params, signed=True)} at zero_grad" in text
    assert "step time" in text
    partial = toggle_effect(h, event, window=30)
    assert partial.complete and "measured over 20 steps; run ended at step 39" in partial.text()


def test_fill_history_makes_a_million_samples_fast():
    h = RunHistory()
    fill_history(h, 250_000)
    assert len(h.samples) == 1_000_001 and len(h.steps) == 250_000
    series = RunSeries(h)
    series.pull()
    assert series.sample_count == 1_000_001
    assert (np.diff(series.sample_x) > 0).all()
    # The window keeps bins, not a second copy: a few percent of the history's rows (most of
    # which the history itself keeps in its spill file, not in memory).
    rows_bytes = sum(len(t) * len(t.columns) * t.itemsize for t in (h.samples, h.steps))
    assert series.nbytes < 0.05 * rows_bytes
    whole = series.samples.visible(0, series.x_end)
    xs, stacks = series.samples.decimate("layers", whole, 2000)
    peak_total = stacks[len(MEMORY_CATEGORIES) - 1]  # the highest moments' stacks first
    assert len(xs) <= 1001 and peak_total.max() == series.memory_layers[-1].max()


def stacked_moments(x: np.ndarray, layers: np.ndarray, sl: slice, points: int):
    """What a stacked chart draws of rows `sl`, from the full rows: per bin (power-of-two
    long, aligned to row numbers, at most points // 2 of them), the stack of the row with
    the highest total, then that of the row with the lowest (the first of equals)."""
    i0, i1 = sl.start, sl.stop
    bins = max(points // 2, 1)
    if i1 - i0 <= bins:
        return x[i0:i1], np.concatenate([layers[:, i0:i1]] * 2)
    k = bin_size(i1 - i0, bins)
    xs, high, low = [], [], []
    for b in range(i0 // k, -(-i1 // k)):
        rows = np.arange(b * k, min((b + 1) * k, i1))
        total = layers[-1, rows]
        xs.append(x[rows[0]])
        high.append(layers[:, rows[np.argmax(total)]])
        low.append(layers[:, rows[np.argmin(total)]])
    return np.array(xs), np.concatenate([np.array(high).T, np.array(low).T])


def test_run_series_bins_match_decimating_the_full_rows():
    h = RunHistory()
    synthetic_training(RunConfig(steps=3000, eval_every=7), sink=h)
    series = RunSeries(h)
    half = len(h.samples) // 2
    h_rows = h.samples.rows()
    assert series.pull()[0] == len(h_rows)
    x, steps_x = h.samples.column("x"), h.steps.column("step")
    layers = series.memory_layers
    step_lines = series.steps.rows("lines", 0, series.step_count)[1]
    rng = np.random.default_rng(3)
    for _ in range(60):
        x0, x1 = sorted(rng.uniform(-5, 3100, 2))
        points = int(rng.choice([10, 50, 200, 2000]))
        sl = series.samples.visible(x0, x1)
        assert sl == visible_slice(x, x0, x1)
        got = series.samples.decimate("layers", sl, points)
        want = stacked_moments(x, layers, sl, points)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
        ssl = series.steps.visible(x0, x1)
        assert ssl == visible_slice(steps_x, x0, x1)
        got = series.steps.decimate("lines", ssl, points)
        want = PeakDecimator("minmax")(steps_x, step_lines, ssl, points)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    assert series.sample_row_at(x[half] + 1e-9) == half
    assert series.total_at(half) == pytest.approx(layers[-1, half], rel=1e-6)


def test_bin_pyramid_levels_made_on_read_match_levels_made_at_once():
    """Upper levels are made when read, from whatever level 0 holds by then: reading some
    levels between appends of any length gives the bins one pass over all the rows gives."""
    rng = np.random.default_rng(5)
    values = rng.normal(size=(3, 20_011)).astype(np.float32)
    values[1, rng.integers(0, 20_011, 40)] = np.nan  # a failed step's rows
    whole = BinPyramid(3, with_min=True)
    whole.append(values)
    whole.complete()
    piecewise = BinPyramid(3, with_min=True)
    at = 0
    while at < values.shape[1]:
        n = int(rng.choice([1, 7, 15, 16, 33, 500, 3000]))
        piecewise.append(values[:, at : at + n])
        at += n
        level = int(rng.integers(0, 11))
        b = piecewise.bins(level)
        hi, lo = piecewise.peaks(level, 0, b)
        np.testing.assert_array_equal(hi, whole.peaks(level, 0, b)[0])
        np.testing.assert_array_equal(lo, whole.peaks(level, 0, b)[1])
    top = whole.bins(0).bit_length() - 1
    assert whole.bins(top) == 1 and whole.bins(top + 1) == 0
    for level in range(top + 1):
        np.testing.assert_array_equal(piecewise.peaks(level, 0, piecewise.bins(level))[0],
                                      whole.peaks(level, 0, whole.bins(level))[0])
    # one bin of level 3 is the max of its 16 * 8 rows
    np.testing.assert_array_equal(whole.peaks(3, 2, 3)[0][:, 0],
                                  np.fmax.reduce(values[:, 256:384], axis=1))


def test_frame_pacer_slows_down_when_drawing_takes_too_much_cpu_and_recovers():
    from memlens.app.window.frame_pacer import FramePacer

    t = {"wall": 0.0, "cpu": 0.0}
    pacer = FramePacer(base_ms=33, max_ms=250, share=0.5, window_s=0.5,
                       clock=lambda: t["wall"], cpu=lambda: t["cpu"])
    t["wall"], t["cpu"] = 0.2, 0.2
    assert pacer.tick() is None  # not half a second yet
    t["wall"], t["cpu"] = 1.0, 0.9  # 90% of the thread's time went into frames
    assert pacer.tick() == 59
    for _ in range(10):
        t["wall"] += 1.0
        t["cpu"] += 1.0
        pacer.tick()
    assert pacer.interval_ms == 250  # capped
    for _ in range(30):
        t["wall"] += 1.0
        t["cpu"] += 0.1
        pacer.tick()
    assert pacer.interval_ms == 33  # back to 30 Hz once frames are cheap again
    t["wall"] += 1.0
    t["cpu"] += 0.8  # one slow second: slower...
    assert pacer.tick() == 52
    for _ in range(3):  # ...then frames that would use 40% of the thread at 30 Hz
        t["wall"] += 1.0
        t["cpu"] += 0.4 * 33 / pacer.interval_ms
        pacer.tick()
    assert pacer.interval_ms == 33  # the base rate fits: back to it, not held slower


def test_bytes_axis_labels_view_units_in_a_readable_binary_unit(qtbot):
    from memlens.app.timeline.bytes_axis import BytesAxis

    axis = BytesAxis("left", unit=2**20)  # the view counts MiB
    levels = axis.tickSpacing(0.0, 3.5, 300)
    major = levels[0][0]
    assert major in (0.5, 1.0)
    assert axis.tickStrings([0.0, 1.0, 2.0], 1.0, 1.0) == ["0 MiB", "1 MiB", "2 MiB"]
    axis.tickSpacing(0.0, 0.01, 300)  # 10 KiB in view units
    assert axis.tickStrings([0.0, 4 / 1024], 1.0, 2 / 1024) == ["0 KiB", "4 KiB"]
    axis.tickSpacing(0.0, 3 * 1024, 300)  # 3 GiB
    assert axis.tickStrings([1024.0], 1.0, 512.0) == ["1.0 GiB"]


def test_stacked_area_rebuilds_only_the_pieces_whose_points_changed(qtbot):
    from pyqtgraph.functions import ndarray_from_qpolygonf

    from memlens.app.timeline.stacked_area import CHUNK, StackedArea

    area, fresh = StackedArea(["#112233", "#445566"]), StackedArea(["#112233", "#445566"])
    x = np.arange(500.0)
    layers = np.cumsum(np.random.default_rng(0).random((2, 500)), axis=0)
    area.setData(x[:300], layers[:, :300])
    first = area._pieces[0][0]
    layers[1, 200] += 5.0  # a change inside the fifth piece (points 196-245)
    area.setData(x, layers)
    assert area._pieces[0][0] is first  # kept, not rebuilt
    assert area._pieces[1][3] is not None and area.top == layers[1].max()
    fresh.setData(x, layers)  # built whole, as a first setData
    for pieces, want in zip(area._pieces, fresh._pieces, strict=True):
        assert len(pieces) == len(want) == -(-(500 - 1) // (CHUNK - 1))
        for got, expected in zip(pieces, want, strict=True):
            np.testing.assert_array_equal(ndarray_from_qpolygonf(got),
                                          ndarray_from_qpolygonf(expected))


def test_plots_fit_y_to_what_they_draw_without_auto_range(qtbot):
    from memlens.app.timeline.loss_plot import LossPlot
    from memlens.app.timeline.memory_plot import Y_UNIT, MemoryPlot

    h = RunHistory()
    synthetic_training(RunConfig(steps=50, eval_every=0), sink=h)
    series = RunSeries(h)
    series.pull()
    memory, loss = MemoryPlot(), LossPlot()
    qtbot.addWidget(memory)
    qtbot.addWidget(loss)
    for plot in (memory, loss):
        plot.draw(series, 0, series.x_end, 400)
        plot.fit_y()
        assert not any(plot.getPlotItem().vb.state["autoRange"])
    top = float(np.nanmax(series.memory_layers[-1])) / Y_UNIT
    peak = series.peak / Y_UNIT
    y0, y1 = memory.getPlotItem().vb.viewRange()[1]
    high = max(top, peak)
    assert y0 <= 0 and high <= y1 <= high * 1.15  # from 0 to the highest line, padded
    lo, hi = np.nanmin(series.loss_rows[0]), np.nanmax(series.loss_rows[0])
    y0, y1 = loss.getPlotItem().vb.viewRange()[1]
    assert y0 <= lo and hi <= y1 and y1 - y0 <= 1.25 * (hi - lo)
    g0, g1 = loss.grad_view.viewRange()[1]
    assert g0 <= np.nanmin(series.loss_rows[1]) and np.nanmax(series.loss_rows[1]) <= g1


def test_a_changed_legend_renders_as_a_first_one_would(qtbot):
    from memlens.app.timeline.memory_plot import MemoryPlot

    updated, fresh = MemoryPlot(), MemoryPlot()
    qtbot.addWidget(updated)
    qtbot.addWidget(fresh)
    updated.set_legend("step <b>1</b>")
    updated.set_legend("step <i>2</i><br>second line")  # the quick path: HTML only
    fresh.set_legend("step <i>2</i><br>second line")
    a, b = updated.getPlotItem().titleLabel, fresh.getPlotItem().titleLabel
    assert a.text == b.text and "step <i>2</i>" in a.text
    assert a.item.toHtml() == b.item.toHtml()


def test_fit_y_keeps_the_range_while_the_data_fills_it_and_refits_when_it_does_not(qtbot):
    from memlens.app.timeline.loss_plot import LossPlot

    plot = LossPlot()
    qtbot.addWidget(plot)
    vb = plot.getPlotItem().vb
    curve = plot.curves["loss"]
    curve.setData([0.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    plot.fit_y()
    first = vb.viewRange()[1]
    assert first[0] < 1.0 and first[1] > 3.0
    curve.setData([0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 3.02])  # a new high inside the view
    plot.fit_y()
    assert vb.viewRange()[1] == first
    curve.setData([0.0, 1.0], [1.0, 5.0])  # out of view: refit
    plot.fit_y()
    assert vb.viewRange()[1][1] > 5.0
    curve.setData([0.0, 1.0], [1.0, 1.5])  # a small part of the view: refit to it
    plot.fit_y()
    y0, y1 = vb.viewRange()[1]
    assert y0 < 1.0 and 1.5 < y1 < 1.7


def test_setting_the_same_points_again_does_not_redraw(qtbot):
    from memlens.app.timeline.live_plot import LiveCurve
    from memlens.app.timeline.stacked_area import StackedArea

    curve, area = LiveCurve(), StackedArea(["#112233"])
    redraws = []
    curve.sigPlotChanged.connect(lambda *_: redraws.append("curve"))
    y = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    curve.setData(np.arange(3.0), y)
    curve.setData(np.arange(3.0), y.copy())  # same points, NaN included: nothing to do
    assert redraws == ["curve"]
    curve.setData(np.arange(3.0), np.array([1.0, np.nan, 4.0]))
    assert redraws == ["curve", "curve"] and curve.getData()[1][2] == 4.0
    area.setData(np.arange(3.0), np.ones((1, 3)))
    pieces = area._pieces[0]
    area.setData(np.arange(3.0), np.ones((1, 3)))
    assert area._pieces[0] is pieces
    area.setData(np.arange(4.0), np.ones((1, 4)))
    assert len(area.layer_data(0)[0]) == 4


def test_a_new_x_range_paints_each_plot_once(qtbot):
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication

    from memlens.app.timeline.plot_stack import PlotStack

    h = RunHistory()
    fill_history(h, 2_000)
    series = RunSeries(h)
    series.pull()
    stack = on_screen(qtbot, PlotStack(), (900, 700))
    stack.set_run(series)
    stack.refresh(True)
    QApplication.processEvents()

    paints: dict[str, int] = {}

    class CountPaints(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Paint:
                name = obj.parent().objectName()
                paints[name] = paints.get(name, 0) + 1
            return False

    counter = CountPaints()
    for plot in stack.plots:
        plot.viewport().installEventFilter(counter)
    stack.memory_plot.setXRange(100, 1_500, padding=0)
    assert stack.refresh(False)
    QApplication.processEvents()
    QApplication.processEvents()
    assert paints == {"memory_plot": 1, "time_plot": 1, "loss_plot": 1}



def test_a_growing_line_and_area_repaint_only_their_new_edge_and_leave_nothing_stale(qtbot):
    from PySide6.QtWidgets import QApplication

    from memlens.app.timeline.loss_plot import LossPlot
    from memlens.app.timeline.time_plot import TimePlot

    loss, times = LossPlot(), TimePlot()
    for plot in (loss, times):
        on_screen(qtbot, plot, (600, 300))
        plot.getPlotItem().setXRange(0, 2100, padding=0)
    loss.getPlotItem().setYRange(-60, 60)
    loss.grad_view.setYRange(0, 2)
    times.getPlotItem().setYRange(0, 15)
    rng = np.random.default_rng(0)
    x = np.arange(2000.0)
    y = np.cumsum(rng.standard_normal(2000))
    y[700:705] = np.nan  # a failed step breaks the line
    layers = np.cumsum(rng.random((5, 2000)), axis=0)
    painted = []
    for item in (loss.curves["loss"], times.area):
        draw = item._paint_pieces
        item._paint_pieces = lambda p, a, b, draw=draw, item=item: (
            painted.append((item, a, b, len(item._piece_x0))), draw(p, a, b))
    for n in range(100, 2000, 37):  # a live run: points added at the right, frame by frame
        painted.clear()
        loss.curves["loss"].setData(x[:n], y[:n])
        loss.curves["grad_norm"].setData(x[:n], 1 + 0.1 * np.sin(x[:n]))
        times.area.setData(x[:n], layers[:, :n])
        QApplication.processEvents()
    # The last frames painted a piece or two at the right end of each item, not all of it.
    assert {item for item, *_ in painted} == {loss.curves["loss"], times.area}
    assert all(b - a <= 2 and b == total and total > 30 for _item, a, b, total in painted)
    # What the screen holds, built up from those strips, is what a full paint draws.
    for plot in (loss, times):
        screen = plot.screen().grabWindow(plot.winId()).toImage()
        assert np.array_equal(pixels(screen), pixels(plot.grab().toImage()))
    got_x, got_y = loss.curves["loss"].getData()
    assert np.array_equal(got_x, x[:n]) and np.array_equal(got_y, y[:n], equal_nan=True)


def _synthetic_stack(qtbot, steps: int, live: bool = False):
    """A PlotStack showing a synthetic run of `steps` steps, drawn once: (history, series,
    stack)."""
    from memlens.app.timeline.plot_stack import PlotStack

    h = RunHistory()
    synthetic_training(RunConfig(steps=steps, eval_every=0), sink=h)
    stack = PlotStack()
    qtbot.addWidget(stack)
    series = RunSeries(h)
    series.pull()
    stack.set_live(live)
    stack.set_run(series)
    stack.refresh(True)
    return h, series, stack


def test_a_periodic_legend_refresh_sets_one_legend_a_frame_all_for_the_same_step(qtbot):
    h, series, stack = _synthetic_stack(qtbot, 40)
    stack.refresh_legends()  # all three at once (a new run, hover, export)
    texts = [p._legend_html for p in stack.plots]
    assert all("step 39" in t for t in texts)
    synthetic_training(RunConfig(steps=60, eval_every=0), sink=h)  # more steps arrive
    series.pull()
    stack.refresh(True)
    stack.refresh_legends(spread=True)  # the periodic text refresh of a frame
    assert ["step 59" in p._legend_html for p in stack.plots] == [True, False, False]
    stack.refresh_next_legend()  # the next frame
    assert ["step 59" in p._legend_html for p in stack.plots] == [True, True, False]
    stack.refresh_next_legend()
    stack.refresh_next_legend()  # nothing left: a no-op
    assert all("step 59" in p._legend_html for p in stack.plots)


def test_moving_the_step_axis_redraws_its_ticks_but_not_its_unchanged_label(qtbot):
    from memlens.app.timeline.loss_plot import LossPlot

    plot = on_screen(qtbot, LossPlot())
    item = plot.getPlotItem()
    axes = [item.getAxis(side) for side in ("bottom", "top", "left", "right")]
    label_sets = []
    for axis in axes:
        set_html = axis.label.setHtml
        axis.label.setHtml = lambda html, a=axis, f=set_html: (label_sets.append(a), f(html))
    height = item.getAxis("bottom").height()
    for x1 in (1000.0, 1050.0, 1103.5, 20_000.0):  # a live run's axis following its steps
        item.setXRange(0.0, x1, padding=0)
        item.vb.prepareForPaint()
        assert item.getAxis("bottom").range == [0.0, x1] and item.getAxis("bottom").picture is None
        qtbot.waitUntil(lambda: item.getAxis("bottom").picture is not None)  # ticks redrawn
    item.setYRange(0.0, 5.0)
    plot.grad_view.setYRange(0.0, 2.0)
    assert label_sets == [] and item.getAxis("bottom").height() == height
    item.setLabel("bottom", "steps")  # a new label is still set
    assert label_sets and set(label_sets) == {item.getAxis("bottom")}
    assert "steps" in item.getAxis("bottom").label.toHtml()


def test_new_data_is_drawn_a_plot_a_frame_when_drawing_all_costs_too_much(qtbot, monkeypatch):
    """Under a flood of steps (drawing costly, the data's edge creeping), new data alone
    draws one plot per refresh, in turn, until all show it; a change of the view draws all
    three at once, and so does new data that moves the edge visibly."""
    from PySide6.QtWidgets import QGraphicsView

    import memlens.app.timeline.plot_stack as plot_stack

    NO_UPDATE = QGraphicsView.ViewportUpdateMode.NoViewportUpdate
    # a live run: the axis runs ahead, new steps do not move it
    h, series, stack = _synthetic_stack(qtbot, 400, live=True)

    def last_steps() -> list[float]:
        return [float(stack.memory_plot.curves["total"].getData()[0][-1]),
                float(stack.time_plot.curves["eval"].getData()[0][-1]),
                float(stack.loss_plot.curves["loss"].getData()[0][-1])]

    def more(steps: int) -> list[float]:
        synthetic_training(RunConfig(steps=steps, eval_every=0), sink=h)
        series.pull()
        return last_steps()

    monkeypatch.setattr(plot_stack, "SPREAD_ABOVE_MS", 1e9)  # every draw cheap enough
    before = more(405)
    assert stack.refresh(True) and not stack.stale  # all three in one refresh
    assert all(a != b for a, b in zip(last_steps(), before, strict=True))

    monkeypatch.setattr(plot_stack, "SPREAD_ABOVE_MS", -1.0)  # every draw now too costly
    before = more(415)  # but the new steps move the edge visibly: all three at once
    assert stack.refresh(True) and not stack.stale
    assert all(a != b for a, b in zip(last_steps(), before, strict=True))
    monkeypatch.setattr(plot_stack, "SPREAD_BELOW_PX", 1e9)  # a flood: the edge creeps
    before = more(420)
    drawn = []
    for _ in range(3):
        assert stack.refresh(not drawn)
        drawn.append([a != b for a, b in zip(last_steps(), before, strict=True)])
    assert drawn == [[True, False, False], [True, True, False], [True, True, True]]
    assert not stack.stale and not stack.refresh(False)  # nothing left to draw

    x_end = stack.x_range()[1]
    before = more(600)  # past the axis' headroom: following moves the axis on
    assert stack.refresh(True) and stack.x_range()[1] > x_end >= before[0]
    assert stack.stale  # the move counts as new data: one plot now, the others next
    # ... and the others hold their paints until their turn, so no frame repaints all three
    assert len(stack.held) == 2
    assert [p.viewportUpdateMode() == NO_UPDATE for p in stack.plots].count(True) == 2
    while stack.stale:
        waiting = len(stack.held)
        assert stack.refresh(False)
        assert len(stack.held) == waiting - 1
    assert all(a != b for a, b in zip(last_steps(), before, strict=True))
    assert stack.held == () and not any(p.viewportUpdateMode() == NO_UPDATE
                                         for p in stack.plots)

    more(700)  # the axis moves on again, and the user zooms before the others' turn
    assert stack.refresh(True) and len(stack.held) == 2
    stack.memory_plot.setXRange(0, 650, padding=0)
    assert stack.refresh(False)
    assert stack.held == () and not any(p.viewportUpdateMode() == NO_UPDATE
                                         for p in stack.plots)

    before = more(615)
    stack.memory_plot.setXRange(0, 620, padding=0)  # the user zooms: a new view
    assert stack.refresh(True)
    assert all(a != b for a, b in zip(last_steps(), before, strict=True)) and not stack.stale


def test_memory_plot_draws_the_buffers_band_and_its_legend_says_what_each_band_holds(qtbot):
    from memlens.app.timeline.memory_plot import Y_UNIT, MemoryPlot
    from memlens.core.loop import run_training
    from memlens.core.records import CATEGORY_HELP
    from tests.core.helpers import tiny_config

    h = RunHistory()
    run_training(tiny_config("cnn", 3), sink=h)
    series = RunSeries(h)
    series.pull()
    plot = MemoryPlot()
    qtbot.addWidget(plot)
    plot.draw(series, 0, series.x_end + 1, 10_000)
    i = MEMORY_CATEGORIES.index("buffers")
    _, below = plot.area.layer_data(i - 1)
    _, top = plot.area.layer_data(i)
    # BatchNorm's running stats and counters, as the history recorded them, in the band
    buffers = h.samples.column("buffers")
    assert buffers.min() > 0
    np.testing.assert_allclose((top - below) * Y_UNIT, buffers, rtol=1e-9)
    legend = plot.legend_at(series, None, [])
    assert "buffers" in legend and "amp_casts" not in legend  # listed where it holds bytes
    tip = plot.getPlotItem().titleLabel.toolTip()
    assert all(c in tip and CATEGORY_HELP[c] in tip for c in MEMORY_CATEGORIES)


@pytest.mark.parametrize("params", [4096, 0])  # 0: the bottom layers have no bytes
def test_the_layers_bins_keep_only_the_categories_a_run_has_and_stay_exact(params):
    """A run has bytes in a few of the ten categories; the layers' bins keep those only (a
    category with none is the layer below it, or zero at the bottom), and a category that
    first shows late (AMP switched on at step 3000) gets bins for the rows before it from
    the layer below's, without reading them again (a long run's history is mostly on disk,
    and the window pulls on the GUI thread). What the chart draws stays the stack decimated
    from the full rows, before and after."""
    from memlens.core.records import MemorySample

    h = RunHistory()
    series = RunSeries(h)
    rng = np.random.default_rng(11)
    cats = list(MEMORY_CATEGORIES)

    def add(steps, amp: bool):
        for step in steps:
            for i, phase in enumerate(("zero_grad", "forward", "backward", "optimizer")):
                acts = int(rng.integers(1, 1 << 20)) if phase == "forward" else 0
                h.add_sample(MemorySample(step, phase, step + i / 4, params, 2048 * (i > 0),
                                          8192, acts, int(rng.integers(0, 512)),
                                          amp_casts=acts // 2 if amp else 0))

    def check():
        x, rows = h.samples.column("x"), h.samples.rows()
        full = np.cumsum(rows[:, [h.samples.index[c] for c in cats]], axis=1).T
        had = [c for c in cats if (h.samples.column(c) != 0).any()]  # counted here
        assert series.samples.pyramids["layers"].channels == len(had)
        for x0, x1, points in ((-1, 1e9, 400), (-1, 1e9, 60), (100, 2900, 200),
                               (2500, 3600, 2000), (1234.5, 1290, 20)):
            sl = series.samples.visible(x0, x1)
            got = series.samples.decimate("layers", sl, points)
            want = stacked_moments(x, full, sl, points)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_allclose(got[1], want[1], rtol=1e-6)

    add(range(3000), amp=False)
    series.pull()
    check()  # params, grads, optimizer, activations, other: 5 of 10
    add(range(3000, 4000), amp=True)
    pulled, starts, rows = series.sample_count, [], h.samples.rows
    h.samples.rows = lambda start=0, *a, **k: starts.append(start) or rows(start, *a, **k)
    series.pull()
    del h.samples.rows
    # the new layer's earlier bins come from the bins there were: no old row read again
    assert starts and min(starts) >= pulled
    check()  # amp_casts from step 3000

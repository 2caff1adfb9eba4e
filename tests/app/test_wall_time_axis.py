"""View > X axis > Wall time (#31): the step axis ticked where the run's clock reads round
times, checked against the run folder's steps.csv as read here with the csv module; the
choice applies to every plot and is remembered."""

from __future__ import annotations

import csv
import itertools
import math
import re

import pytest
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QPushButton

from memlens.app.app_settings import AppSettings
from memlens.app.series.run_series import RunSeries
from memlens.app.timeline.plot_stack import PlotStack
from memlens.app.window.main_window import MainWindow
from memlens.core.history import RunHistory
from memlens.core.records import StepRecord
from tests.app.drive import choose, click, on_screen, wait_frames

WALL_TITLE = "wall time (s since the run started; ticks at the steps where it is reached)"
SECONDS = re.compile(r"(\d+(?:\.\d+)?) s")
CLOCK = re.compile(r"(?:(\d+):)?(\d+):(\d\d(?:\.\d+)?)")


def action(window, name: str) -> QAction:
    found = window.findChild(QAction, name)
    assert found is not None, name
    return found


def seconds_of(label: str) -> float:
    """'0.25 s', '1:30' or '1:02:03' as seconds (read here, not through the app's code)."""
    if m := SECONDS.fullmatch(label):
        return float(m.group(1))
    m = CLOCK.fullmatch(label)
    assert m is not None, label
    hours, minutes, secs = m.groups()
    return int(hours or 0) * 3600 + int(minutes) * 60 + float(secs)


def step_times(folder) -> dict[int, tuple[float, float]]:
    """Each step's (start, end) in seconds since the run started, from steps.csv: it ends
    at its time_s, it starts where the step before ended (the first: step_ms before)."""
    with open(folder / "steps.csv", newline="") as f:
        rows = sorted((int(float(r["step"])), float(r["time_s"]), float(r["step_ms"]))
                      for r in csv.DictReader(f))
    out, before = {}, None
    for step, end, ms in rows:
        out[step] = (before if before is not None else end - ms / 1e3, end)
        before = end
    return out


def drawn_ticks(window):
    axis = window.plots.loss_plot.getPlotItem().getAxis("bottom")
    assert axis.isVisible()
    x0, x1 = window.plots.x_range()
    width = axis.geometry().width()
    values = [v for _spacing, vs in axis.tickValues(x0, x1, width) for v in vs]
    strings = axis.tickStrings(values, axis.autoSIPrefixScale * axis.scale, 1)
    return axis, values, strings, (x0, x1, width)


def test_wall_time_axis_ticks_where_the_run_reaches_round_times(qtbot, window, settings_file):
    window.resize(1280, 800)
    choose(window, steps=40)
    click(qtbot, window.findChild(QPushButton, "run_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=120_000)
    wait_frames(qtbot, window, 2)
    times = step_times(window.session.folder)
    assert len(times) == 40
    # the step axis's own title (step_axis), under the lowest plot only
    assert drawn_ticks(window)[0].labelText == "step"

    action(window, "x_axis_wall_time_action").trigger()
    wait_frames(qtbot, window, 2)
    axis, values, strings, (x0, x1, width) = drawn_ticks(window)
    assert axis.labelText == WALL_TITLE
    assert "Pinned runs keep their step positions" in axis.toolTip()
    assert len(values) >= 2, (values, strings)
    assert not all(float(v).is_integer() for v in values), values  # between steps' ends
    labelled = [seconds_of(s) for s in strings]
    assert labelled == sorted(labelled) and len(set(labelled)) == len(labelled), strings
    for x, t, text in zip(values, labelled, strings, strict=True):
        step = min(max(math.floor(x), min(times)), max(times))
        start, end = times[step]
        duration = end - start
        # the tick at x: step floor(x) is going on there, so the clock reads between that
        # step's start and end, give or take one step's duration
        assert start - duration <= t <= end + duration, (x, text, step, start, end)
    # round values, no two ticks crowded together
    spacing = min(b - a for a, b in itertools.pairwise(labelled)) \
        if len(labelled) > 1 else 1.0
    assert any(abs(spacing - m * 10.0 ** k) < 1e-9 for k in range(-3, 2) for m in (1, 2, 5)) \
        or spacing in (30, 60, 120, 300, 600), spacing
    pixels = [(v - x0) / (x1 - x0) * width for v in values]
    assert all(b - a >= 40 for a, b in itertools.pairwise(pixels)), pixels
    # every plot's axis (an exported image shows its own) is in wall time
    for plot in window.plots.plots:
        assert plot.getPlotItem().getAxis("bottom").labelText == WALL_TITLE
    # the hover read-out gives the step's wall time
    window.plots.set_hover(20.4)
    legend = window.plots.time_plot.getPlotItem().titleLabel.text.replace("&nbsp;", " ")
    found = re.search(r"step 20, ended at (\S+(?: s)?)</i>", legend)
    assert found is not None, legend
    assert abs(seconds_of(found.group(1)) - times[20][1]) <= 0.01, (found.group(1), times[20])

    action(window, "x_axis_steps_action").trigger()
    wait_frames(qtbot, window, 1)
    axis, values, strings, _ = drawn_ticks(window)
    assert axis.labelText == "step"
    assert len(values) >= 3 and all(float(v).is_integer() for v in values), values
    assert all(re.fullmatch(r"\d+", s) for s in strings), strings
    assert AppSettings.at(settings_file).x_axis() == "steps"

    action(window, "x_axis_wall_time_action").trigger()
    assert AppSettings.at(settings_file).x_axis() == "wall_time"  # QSettings holds it
    window.close()
    again = MainWindow(runs_dir=None, settings=AppSettings.at(settings_file))
    qtbot.addWidget(again)
    assert action(again, "x_axis_wall_time_action").isChecked()
    assert not action(again, "x_axis_steps_action").isChecked()
    for plot in again.plots.plots:
        assert plot.getPlotItem().getAxis("bottom").labelText == WALL_TITLE


def _steps(history: RunHistory, first: int, count: int, seconds: float) -> None:
    """Steps of `seconds` each, back to back from the run's start."""
    for i in range(first, first + count):
        history.add_step(StepRecord(
            step=i, time_s=(i + 1) * seconds, loss=1.0, grad_norm=0.5, step_ms=seconds * 1e3,
            zero_grad_ms=0, forward_ms=seconds * 1e3, backward_ms=0, optimizer_ms=0,
            eval_ms=0, allocated_bytes=1, peak_bytes=1, reserved_bytes=None, graph_nodes=1,
            saved_bytes=0, retained_bytes=0))
    history.steps.flush()  # stored now, not after the live reader's lag


def test_wall_time_ticks_follow_a_live_run_and_read_on_a_clock(qtbot):
    history = RunHistory()
    _steps(history, 0, 10, 0.5)  # half a second a step: t seconds is reached at x = 2 t
    series = RunSeries(history)
    series.pull()
    stack = on_screen(qtbot, PlotStack(), (1000, 700))
    stack.set_wall_time(True)
    stack.set_run(series)
    stack.set_live(True)
    stack.set_follow(False)
    stack.memory_plot.setXRange(0, 40, padding=0)
    stack.refresh(True)
    axis = stack.loss_plot.getPlotItem().getAxis("bottom")
    width = axis.geometry().width()

    def ticks():
        values = [v for _s, vs in axis.tickValues(0, 40, width) for v in vs]
        return values, [seconds_of(s) for s in axis.tickStrings(values, 1, 1)]

    values, times = ticks()
    assert times and times[-1] <= 5.0  # nothing past the newest step's end
    assert values == pytest.approx([2 * t for t in times])
    stack.grab()  # painted: the ticks laid out
    assert axis.picture is not None
    _steps(history, 10, 1, 0.5)  # to 5.5 s: no new round time at this spacing
    series.pull()
    stack.refresh(True)
    spacing = times[1] - times[0]
    assert times[-1] + spacing > 5.5, times
    assert axis.picture is not None  # the ticks as painted still hold
    _steps(history, 11, 9, 0.5)  # to 10 s
    series.pull()
    stack.refresh(True)
    assert axis.picture is None  # laid out again at the next paint
    values, times = ticks()
    assert times[-1] == pytest.approx(10.0) and values == pytest.approx([2 * t for t in times])

    long = RunHistory()
    _steps(long, 0, 100, 10.0)  # 1000 s: ticks read on a clock
    run = RunSeries(long)
    run.pull()
    stack.set_run(run)
    stack.memory_plot.setXRange(0, 100, padding=0)
    values = [v for _s, vs in axis.tickValues(0, 100, width) for v in vs]
    strings = axis.tickStrings(values, 1, 1)
    assert all(re.fullmatch(r"\d+:\d\d", s) for s in strings), strings
    assert values == pytest.approx([seconds_of(s) / 10 for s in strings])

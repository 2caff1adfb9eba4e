"""The Snapshot tab at any moment (#31): hovering the plot says the bytes allocated at that
event, a click lists what was alive there, Escape or the button goes back to the peak;
`shot --at-event N` saves that picture. Checked against a replay of the trace here."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from memlens.core.units import format_bytes
from tests.app.drive import wait_frames
from tests.app.test_open_and_remember import _main, choose_in_open_dialog
from tests.core.test_snapshot_alive import _program, _replay, _snapshot

KEPT = 150  # few events: each one is several pixels wide, so a mouse position is one event


@pytest.fixture(scope="module")
def snapshot_file(tmp_path_factory):
    """A torch-format snapshot whose trace is the last KEPT events of a longer program."""
    program = _program(5, 400)
    path = tmp_path_factory.mktemp("moment") / "snapshot.pickle"
    path.write_bytes(pickle.dumps(_snapshot(program, KEPT)))
    return path, program, len(program) - KEPT


def _alive_sizes(program, upto: int) -> list[int]:
    return sorted((e["size"] for e in _replay(program, upto).values()), reverse=True)


def _rows(view) -> list[int]:
    return [view.top.topLevelItem(i).data(0, Qt.UserRole)
            for i in range(view.top.topLevelItemCount())]


def _viewport_pos(view, event: int):
    """Where event `event` is on the plot's viewport, half-way up."""
    vb = view.plot.getPlotItem().getViewBox()
    (_x0, _x1), (y0, y1) = vb.viewRange()
    return view.plot.mapFromScene(vb.mapViewToScene(QPointF(event, (y0 + y1) / 2)))


def _a_moment_that_is_not_the_peak(view, program, cut) -> int:
    peak = view.timeline.peak_index
    for n in (KEPT // 3, KEPT // 2, 2 * KEPT // 3):
        if n != peak and _alive_sizes(program, cut + n) != _alive_sizes(program, cut + peak):
            return n
    raise AssertionError("the program has no moment unlike its peak")


def test_hover_says_the_bytes_and_a_click_lists_what_was_alive(qtbot, window, snapshot_file):
    path, program, cut = snapshot_file
    choose_in_open_dialog(qtbot, window, path)
    view = window.opener.snapshot_view
    assert view is not None and window.tabs.currentWidget() is view
    vb = view.plot.getPlotItem().getViewBox()
    qtbot.waitUntil(lambda: vb.viewRange()[0][1] >= KEPT)  # drawn: the x axis spans the trace
    wait_frames(qtbot, window, 2)  # and laid out: the axes' widths follow the new ranges
    n = _a_moment_that_is_not_the_peak(view, program, cut)
    alive = _replay(program, cut + n)

    qtbot.mouseMove(view.plot.viewport(), _viewport_pos(view, n))
    assert view.hover_text.isVisible()
    total = sum(e["size"] for e in alive.values())
    assert view.hover_text.toPlainText() == f"event {n:,}: {format_bytes(total)} allocated"

    qtbot.mouseClick(view.plot.viewport(), Qt.LeftButton, pos=_viewport_pos(view, n))
    title = view.alive_list.title.text()
    assert f"Alive at event {n:,}</b>: {len(alive):,} allocations" in title
    assert _rows(view) == _alive_sizes(program, cut + n)[:20]
    assert view.chosen_line.isVisible() and view.chosen_line.value() == n
    assert view.alive_list.peak_button.isEnabled()

    # Escape: the peak's list again.
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    view.top.setFocus()
    qtbot.keyClick(view.top, Qt.Key_Escape)
    peak = view.timeline.peak_index
    assert f"Alive at the peak (event {peak:,})" in view.alive_list.title.text()
    assert _rows(view) == _alive_sizes(program, cut + peak)[:20]
    assert not view.chosen_line.isVisible() and not view.alive_list.peak_button.isEnabled()

    # Another moment, then the button.
    qtbot.mouseClick(view.plot.viewport(), Qt.LeftButton, pos=_viewport_pos(view, n))
    assert _rows(view) == _alive_sizes(program, cut + n)[:20]
    qtbot.mouseClick(view.alive_list.peak_button, Qt.LeftButton)
    assert _rows(view) == _alive_sizes(program, cut + peak)[:20]


def test_shot_at_event_saves_the_list_there_and_a_bad_event_exits_2(tmp_path, snapshot_file):
    path, _program_events, _cut = snapshot_file
    out = tmp_path / "at.png"
    done = _main("shot", "--open", str(path), "--at-event", "40", "--out", str(out),
                 "--size", "1280x800")
    assert done.returncode == 0, done.stderr
    assert out.is_file() and "alive at event 40 listed" in done.stdout
    from PySide6.QtGui import QImage

    image = QImage(str(out))
    assert (image.width(), image.height()) == (1280, 800)

    bad = tmp_path / "bad.png"
    refused = _main("shot", "--open", str(path), "--at-event", str(KEPT + 1), "--out", str(bad))
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert lines == [f"memlens shot: --at-event {KEPT + 1}: this snapshot has events 0 to "
                     f"{KEPT} (0 is before the first)"]
    assert not bad.exists()


def test_the_legend_sits_over_headroom_and_covers_no_curve(qtbot, window, snapshot_file):
    """At 1280x800 the snapshot's legend lies inside the plot, above the highest value of
    every curve (the y range keeps room for it), so no part of a curve is hidden."""
    path = snapshot_file[0]
    window.resize(1280, 800)
    choose_in_open_dialog(qtbot, window, path)
    view = window.opener.snapshot_view
    vb = view.plot.getPlotItem().getViewBox()
    qtbot.waitUntil(lambda: vb.viewRange()[0][1] >= KEPT)
    wait_frames(qtbot, window, 2)
    top = max(float(np.nanmax(curve.yData)) for curve in view.curves.values())  # as drawn
    legend = vb.mapSceneToView(view.legend.sceneBoundingRect()).boundingRect()
    (x0, x1), (y0, y1) = vb.viewRange()
    assert legend.top() > top  # in view units y grows upwards: the legend's lower edge
    assert x0 <= legend.left() and legend.right() <= x1  # nothing cut at the right edge
    assert legend.bottom() <= y1 + (y1 - y0) * 0.05


def test_a_precise_runs_allocations_open_in_the_snapshot_tab_at_any_moment(qtbot, window,
                                                                           tmp_path):
    """View > Allocations of this run: the run on screen, recorded in precise mode, in the
    Snapshot tab as its exported snapshot.pickle shows (the same events, the same alive
    set at a clicked moment); a light run says why there is nothing to show."""
    from PySide6.QtWidgets import QPushButton

    from memlens.core.exports.snapshot import write_snapshot
    from memlens.core.snapshot_file import read_snapshot
    from tests.app.drive import choose

    def run(precise: bool) -> None:
        choose(window, steps=6, precise=precise, eval_every=0)
        window.findChild(QPushButton, "run_button").click()
        qtbot.waitUntil(lambda: window.state == "finished", timeout=120_000)

    show = window.findChild(type(window.open_action), "run_allocations_action")
    run(precise=False)
    show.trigger()
    assert "precise" in window.statusBar().currentMessage()
    assert window.opener.snapshot_view is None  # no tab for nothing

    run(precise=True)
    show.trigger()
    view = window.opener.snapshot_view
    assert window.tabs.currentWidget() is view
    exported = read_snapshot(write_snapshot(window.history, tmp_path / "snapshot.pickle"))
    np.testing.assert_array_equal(view.timeline.allocated, exported.allocated)
    vb = view.plot.getPlotItem().getViewBox()
    qtbot.waitUntil(lambda: vb.viewRange()[0][1] >= exported.last_event)
    wait_frames(qtbot, window, 2)
    n = exported.last_event // 2
    moment = view.event_at(view.plot.mapToScene(_viewport_pos(view, n)))
    qtbot.mouseClick(view.plot.viewport(), Qt.LeftButton, pos=_viewport_pos(view, n))
    alive = exported.alive_at(moment)
    assert f"Alive at event {moment:,}</b>: {alive.count:,} allocations" in \
        view.alive_list.title.text()
    assert _rows(view) == [a.size for a in alive.largest]

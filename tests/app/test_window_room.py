"""The plots get the room (#49 items 1 and 2): at 1024x768 and 1280x800 the side panels
yield, every plot keeps a readable height, the hint stays one line, an error's banner opens
only when asked, and the Autograd graph tab never widens the window."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QCheckBox, QDockWidget, QLabel, QToolButton

from memlens.app.timeline.live_plot import MIN_VIEW_PX
from tests.app.drive import choose, click, wait_frames
from tests.app.test_view_help_theme import run_to_end


def view_heights(window) -> list[float]:
    return [plot.getPlotItem().vb.height() for plot in window.plots.plots]


def test_at_1024x768_the_plots_get_the_room_and_the_hint_one_line(qtbot, window):
    window.resize(1024, 768)
    run_to_end(qtbot, window, steps=12, preset="lstm")
    window.refresh_now()
    wait_frames(qtbot, window, 3)
    assert window.width() == 1024
    centre = window.tabs.width()
    left = window.findChild(QDockWidget, "run_dock").width()
    assert centre >= 440 and centre > left, (centre, left)
    hint = window.findChild(QLabel, "plot_hint")
    assert hint.height() <= 1.5 * hint.fontMetrics().lineSpacing() + 4
    assert hint.toolTip().startswith("Drag to pan")  # cut, and whole in its tooltip
    assert min(view_heights(window)) >= MIN_VIEW_PX, view_heights(window)
    # the step-time axis labels its ticks without one on another
    axis = window.plots.time_plot.getPlotItem().getAxis("left")
    ticks = [v for level in axis.tickValues(*axis.range, axis.height()) for v in level[1]]
    spacing = axis.height() / max(axis.range[1] - axis.range[0], 1e-9)
    assert len(ticks) >= 2
    ticks = sorted(ticks)
    gaps = np.diff(ticks) * spacing
    assert gaps.min() >= 12, gaps
    # the side panels are all still there: the right column's docks as tabs
    events, pins = (window.findChild(QDockWidget, n) for n in ("events_dock", "pins_dock"))
    assert pins in window.tabifiedDockWidgets(events)


def test_at_1280x800_an_error_banner_leaves_the_memory_plot_its_room(qtbot, window):
    window.resize(1280, 800)
    choose(window, "lstm", steps=6)
    window.findChild(QCheckBox, "detach_check").setChecked(False)
    click(qtbot, window.run_panel.run_button)
    qtbot.waitUntil(lambda: window.state == "error", timeout=120_000)
    wait_frames(qtbot, window, 3)
    banner = window.error_banner
    assert banner.isVisible() and "backward" in banner.text()
    line = banner.fontMetrics().lineSpacing()
    assert banner.height() <= 3 * line, banner.height()  # its heading, on one line
    memory = window.plots.memory_plot.getPlotItem().vb
    shut = memory.height()
    assert shut >= 160, shut
    details = banner.findChild(QToolButton, "error_details_button")
    click(qtbot, details)  # the whole explanation, asked for
    wait_frames(qtbot, window, 2)
    assert banner.findChild(QLabel, "error_body").isVisible()
    assert "detach" in banner.findChild(QLabel, "error_body").text()
    assert memory.height() >= MIN_VIEW_PX
    assert banner.height() <= 0.4 * window.tabs.height()
    click(qtbot, details)
    wait_frames(qtbot, window, 2)
    assert memory.height() == shut  # closed again, the plot has its room back
    window.stop_run()
    qtbot.waitUntil(lambda: not window.running, timeout=60_000)


def test_the_graph_tab_never_widens_the_window(qtbot, window):
    for width, height in ((1024, 768), (1280, 800)):
        window.resize(width, height)
        window.tabs.setCurrentIndex(0)
        wait_frames(qtbot, window, 2)
        window.tabs.setCurrentWidget(window.graph_tab)
        qtbot.waitUntil(lambda: window.graph_tab.panel is not None
                        and window.graph_tab.panel.isVisible())
        wait_frames(qtbot, window, 3)
        assert window.width() == width
        assert window.minimumSizeHint().width() <= width
        window.tabs.setCurrentIndex(0)
        wait_frames(qtbot, window, 2)
        assert window.width() == width

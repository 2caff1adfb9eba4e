"""The status bar's steps/s and ETA, for steps slower than its rate window."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton


def button(window, name: str) -> QPushButton:
    return window.findChild(QPushButton, name)




def test_slow_steps_still_show_a_rate_and_a_whole_eta(qtbot):
    from memlens.app.panels.status_bar import RATE_WINDOW_S, RunStatusBar

    now = [100.0]
    bar = RunStatusBar(clock=lambda: now[0])
    qtbot.addWidget(bar)
    bar.set_planned(200)
    step_s = 2 * RATE_WINDOW_S + 0.5  # each step far longer than the rate window
    for done in range(1, 5):
        for _ in range(10):  # the GUI's frames between two steps see no new step
            now[0] += step_s / 10
            bar.set_progress(done - 1, done - 1, None, None, live=True)
        bar.set_progress(done, done, None, None, live=True)
    rate = float(bar.labels["rate"].text().split(": ")[1])
    assert abs(rate - 1 / step_s) < 0.01
    text = bar.labels["progress"].text()
    left = round(196 * step_s)  # under an hour: minutes and seconds
    assert text.endswith(f"ETA {left // 60}:{left % 60:02d}")
    # A step that stalls well past the measured pace slows the rate as it goes.
    now[0] += 3 * step_s
    bar.set_progress(4, 4, None, None, live=True)
    assert float(bar.labels["rate"].text().split(": ")[1]) < rate
    label = bar.labels["progress"]
    assert label.minimumWidth() >= label.fontMetrics().horizontalAdvance(text)

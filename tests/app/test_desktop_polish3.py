"""Desktop polish, round three (#31): each point driven as a user would, checked on data."""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QPushButton

from tests.app.drive import choose, click, wait_steps


def action(window, name: str) -> QAction:
    found = window.findChild(QAction, name)
    assert found is not None, name
    return found


def button(window, name: str) -> QPushButton:
    return window.findChild(QPushButton, name)


def stop(qtbot, window) -> None:
    click(qtbot, button(window, "stop_button"))
    qtbot.waitUntil(lambda: not window.running, timeout=60_000)


# --- 1. the rows table keeps the selection while rows arrive -----------------------------------


def test_rows_table_keeps_selection_and_scroll_while_a_run_appends_rows(qtbot, window):
    choose(window, steps=100_000)
    click(qtbot, button(window, "run_button"))
    wait_steps(qtbot, window, 60)
    action(window, "rows_action").trigger()
    dialog = window.view_actions.rows_dialog
    view = dialog.views["steps"]
    proxy = view.model()
    first = proxy.rowCount()
    assert first >= 60
    view.resize(700, 300)
    sel = view.selectionModel()
    for r in (20, 21, 22):
        sel.select(proxy.index(r, 0), QItemSelectionModel.Select)
    view.scrollTo(proxy.index(40, 0), view.ScrollHint.PositionAtTop)
    scrolled = view.verticalScrollBar().value()
    assert scrolled > 0
    with qtbot.waitSignal(proxy.rowsInserted, timeout=10_000):
        pass  # the dialog's own timer appends the rows the run made since
    qtbot.waitUntil(lambda: proxy.rowCount() > first, timeout=10_000)
    stop(qtbot, window)
    dialog.reload()
    picked = sorted({i.row() for i in sel.selectedIndexes()})
    assert picked == [20, 21, 22]
    assert view.verticalScrollBar().value() == scrolled
    assert proxy.rowCount() == len(window.history.steps.rows())


# --- 2. steps/s and ETA for steps slower than the rate window ----------------------------------


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



# --- 6. event texts: headings cut with "…", long explanations scroll ---------------------------


def test_event_headings_end_in_an_ellipsis_and_long_explanations_scroll(qtbot, window):
    from memlens.core.records import RunEvent

    message = ("the autograd graph of step 3's loss is still alive at step 5's end "
               "(2 losses of earlier steps alive), held by total_loss")
    diagnosis = RunEvent(5, 1.0, "diagnosis", message=message, where="train.py:12",
                         explanation="A tensor that requires grad keeps its whole graph.")
    error = RunEvent(6, 1.2, "error", phase="backward", key="RuntimeError",
                     message="Trying to backward through the graph a second time",
                     explanation=" ".join(["A second backward needs the saved tensors the "
                                           "first one freed."] * 40))
    panel = window.events_panel
    for n in range(6):
        panel.add_event(RunEvent(n, 0.1 * n, "info", message=f"note {n}"))
    panel.add_event(diagnosis)
    heading = panel.list.item(panel.list.count() - 1).text()
    assert heading.endswith("…") and not heading.endswith("of…")
    assert heading.removeprefix("step 5   ").removesuffix("…") in message
    panel.add_event(error)  # an error is chosen at once: its explanation shows
    assert "second backward" in panel.detail.text()
    qtbot.waitUntil(lambda: panel.detail_area.verticalScrollBar().maximum() > 0)
    row = panel.list.sizeHintForRow(0)
    assert panel.list.viewport().height() >= 4 * row  # the list keeps its rows
    bar = panel.detail_area.verticalScrollBar()
    bar.setValue(bar.maximum())  # the explanation's end can be scrolled to
    assert panel.detail_area.viewport().height() + bar.value() >= panel.detail.height() - 1

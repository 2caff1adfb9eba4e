"""View > Rows table: the run's rows, kept selected and scrolled while a run appends."""

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

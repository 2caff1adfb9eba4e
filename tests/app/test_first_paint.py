"""Work deferred to a window's first paint runs after that paint, once."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from memlens.app.window.first_paint import after_first_paint


class Painted(QWidget):
    def __init__(self, order: list[str]) -> None:
        super().__init__()
        self.order = order

    def paintEvent(self, event) -> None:
        self.order.append("paint")
        super().paintEvent(event)


def test_the_callback_runs_once_after_the_first_paint(qtbot):
    order: list[str] = []
    widget = Painted(order)
    qtbot.addWidget(widget)
    after_first_paint(widget, lambda: order.append("callback"))
    assert order == []  # not shown: nothing painted, nothing run
    widget.show()
    qtbot.waitUntil(lambda: "callback" in order)
    assert order[0] == "paint"
    widget.update()
    qtbot.waitUntil(lambda: order.count("paint") >= 2)
    assert order.count("callback") == 1


def test_a_window_never_painted_still_runs_it(qtbot):
    ran: list[bool] = []
    widget = QWidget()
    qtbot.addWidget(widget)  # never shown: no paint comes
    after_first_paint(widget, lambda: ran.append(True))
    qtbot.waitUntil(lambda: ran == [True], timeout=5000)

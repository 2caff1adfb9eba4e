"""The events list's texts: headings cut with "…", long explanations scroll."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton


def button(window, name: str) -> QPushButton:
    return window.findChild(QPushButton, name)




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

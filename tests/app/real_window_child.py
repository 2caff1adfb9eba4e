"""The app as `python main.py` starts it, reporting its state for tests/app/test_real_window.py.

Run in a child process on a real X server (no QT_QPA_PLATFORM): main.py's platform check,
launch() and the event loop are the user's. The only additions: the run panel is set to tiny
sizes (the click on Start comes from outside, through the X server), and a timer prints one
JSON line of state every 100 ms for the test to read: where the Start button and a technique
checkbox are on the screen, steps done, toggle events, markers on each plot.
"""

from __future__ import annotations

import json
import sys

TOGGLE = "eval_mode"  # a checkbox, live on the mlp preset


def centre(widget, rect=None) -> list[int]:
    p = widget.mapToGlobal((rect or widget.rect()).center())
    return [p.x(), p.y()]


def indicator(box) -> list[int]:
    """A checkbox's box on the screen: a click elsewhere in a stretched row does nothing."""
    from PySide6.QtWidgets import QStyle, QStyleOptionButton

    option = QStyleOptionButton()
    box.initStyleOption(option)
    return centre(box, box.style().subElementRect(QStyle.SE_CheckBoxIndicator, option, box))


def report(window) -> dict:
    from PySide6.QtWidgets import QDockWidget

    start = window.run_panel.run_button
    toggle = window.techniques_panel.fields[TOGGLE].widget
    history = window.history
    return {
        "exposed": bool(window.windowHandle() and window.windowHandle().isExposed()),
        "start": centre(start), "start_enabled": start.isEnabled(),
        "toggle": indicator(toggle), "toggle_checked": toggle.isChecked(),
        "steps": window.series.step_count if window.series is not None else 0,
        "toggles": [[e.step, e.key, str(e.old), str(e.new)] for e in history.events()
                    if e.kind == "toggle"] if history is not None else [],
        "markers": [[m.value() for m in p.markers] for p in window.plots.plots],
        "screen": rect(window.screen().availableGeometry()),
        "frame": rect(window.frameGeometry()),
        # where each part a user needs lies on the screen: the docks and the status bar
        "parts": {w.objectName() or type(w).__name__: global_rect(w)
                  for w in [*window.findChildren(QDockWidget), window.statusBar()]
                  if w.isVisible()},
    }


def rect(r) -> list[int]:
    return [r.x(), r.y(), r.width(), r.height()]


def global_rect(widget) -> list[int]:
    top_left = widget.mapToGlobal(widget.rect().topLeft())
    return [top_left.x(), top_left.y(), widget.width(), widget.height()]


def main() -> int:
    from PySide6.QtCore import QTimer
    from PySide6.QtGui import QGuiApplication

    import main as entry
    import memlens.app.window.launch as main_window
    from tests.app.drive import choose

    real_finish = main_window.finish_start_up

    def finish_start_up(window) -> None:
        real_finish(window)
        print(json.dumps({"qpa": QGuiApplication.platformName()}), flush=True)
        choose(window, "mlp", steps=100_000)
        timer = QTimer(window)
        timer.timeout.connect(lambda: print(json.dumps(report(window)), flush=True))
        timer.start(100)

    main_window.finish_start_up = finish_start_up
    code = entry.main([])
    print(json.dumps({"exit": code}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

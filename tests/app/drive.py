"""Driving the window as a user would: set the run panel, click, wait for steps."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt

# Tiny sizes keep a step at a few milliseconds; every knob is set through the widgets.
TINY = {"batch_size": 8, "width": 16, "seq_len": 8, "eval_every": 5}


def choose(window, preset: str = "mlp", steps: int = 100_000, **values) -> None:
    """Set the run panel as a user would: preset combo, then the spin boxes."""
    fields = window.run_panel.fields
    fields["preset"].widget.setCurrentText(preset)
    for key, value in {**TINY, "steps": steps, **values}.items():
        w = fields[key].widget
        if hasattr(w, "setValue"):
            w.setValue(value)
        elif hasattr(w, "setChecked"):
            w.setChecked(bool(value))
        else:
            w.setCurrentText(str(value))


def click(qtbot, widget) -> None:
    assert widget.isEnabled(), f"{widget.objectName()} is disabled"
    qtbot.mouseClick(widget, Qt.LeftButton)


def wait_steps(qtbot, window, n: int, timeout: int = 60_000) -> None:
    qtbot.waitUntil(lambda: window.series is not None and window.series.step_count >= n,
                    timeout=timeout)


def wait_frames(qtbot, window, n: int) -> None:
    """Let the window's refresh timer fire n times."""
    for _ in range(n):
        with qtbot.waitSignal(window.refresh_timer.timeout, timeout=5_000):
            pass


def on_screen(qtbot, widget, size: tuple[int, int] | None = None):
    """Show a widget as a window of `size` (w, h) and wait until it is exposed; returns it."""
    qtbot.addWidget(widget)
    if size is not None:
        widget.resize(*size)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def pixels(image) -> np.ndarray:
    """A QImage as an (h, w, 4) uint8 array, for comparing screens pixel by pixel."""
    from PySide6.QtGui import QImage

    image = image.convertToFormat(QImage.Format_RGB32)
    return np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.width(), 4)

"""The app as `python main.py` starts it, watching a script (File > Watch a script…'s
work, started from here), reporting its state for tests/app/test_real_window_watch.py: one
JSON line every 100 ms with where the no_grad_eval checkbox and the Stop button are on the
screen, whether detach_state is greyed, steps, toggle events and the markers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.app.real_window_child import centre, indicator, rect

SCRIPT = Path(__file__).resolve().parents[1] / "core" / "toggle_scripts" / "long_loop.py"


def report(window) -> dict:
    panel, watching = window.techniques_panel, window.script_watch
    history = window.history
    return {
        "exposed": bool(window.windowHandle() and window.windowHandle().isExposed()),
        "state": str(window.state), "alive": watching.alive,
        "toggle": indicator(panel.fields["no_grad_eval"].widget),
        "toggle_checked": panel.fields["no_grad_eval"].widget.isChecked(),
        "detach_enabled": panel.fields["detach_state"].widget.isEnabled(),
        "uses": watching.view.uses.text(),
        "stop": centre(window.run_panel.stop_button),
        "stop_enabled": window.run_panel.stop_button.isEnabled(),
        "steps": window.series.step_count if window.series is not None else 0,
        "toggles": [[e.step, e.key, str(e.old), str(e.new)] for e in history.events()
                    if e.kind == "toggle"] if history is not None else [],
        "markers": [[m.value() for m in p.markers] for p in window.plots.plots],
        "folder": str(watching.child.folder) if watching.child is not None else "",
        "screen": rect(window.screen().availableGeometry()),
    }


def main() -> int:
    from PySide6.QtCore import QTimer
    from PySide6.QtGui import QGuiApplication

    import main as entry
    import memlens.app.window.launch as launch

    real_finish = launch.finish_start_up

    def finish_start_up(window) -> None:
        real_finish(window)
        print(json.dumps({"qpa": QGuiApplication.platformName()}), flush=True)
        window.script_watch.start(str(SCRIPT), ["100000"], str(Path.cwd()))
        timer = QTimer(window)
        timer.timeout.connect(lambda: print(json.dumps(report(window)), flush=True))
        timer.start(100)

    launch.finish_start_up = finish_start_up
    code = entry.main([])
    print(json.dumps({"exit": code}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""Remake docs/fix.md's pictures of Try the fix, offscreen, as a user gets them: watch
tests/core/fix_scripts/kept_predictions.py, open the run, choose its diagnosis, Try the fix
and wait for it; then save the main window (the original and the fixed copy pinned) and the
fix's window.

    python tools/fix_shots.py            # docs/fix-app.png and docs/fix-panel.png
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = 30
SIZE = (1280, 800)


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.path.insert(0, str(ROOT))
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from memlens.app.window.main_window import MainWindow
    from memlens.core.watch import diagnoses as dx
    from memlens.core.watch.script import run_script

    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory(prefix="memlens-fix-shot-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        script = work / "kept_predictions.py"
        shutil.copy(ROOT / "tests" / "core" / "fix_scripts" / script.name, script)
        folder = Path(tmp) / "runs" / "kept_predictions"
        if run_script(str(script), ["--steps", str(STEPS)], out=folder, quiet=True) != 0:
            print("fix_shots: the watched run failed", file=sys.stderr)
            return 1
        w = MainWindow(runs_dir=None)
        w.resize(*SIZE)
        w.show()
        w.open_run(folder)
        events = w.events_panel
        row = next(i for i, e in enumerate(events.events) if e.key == dx.GRAD_NOT_BACKWARDED)
        events.list.setCurrentRow(row)
        w.fixing.steps = STEPS
        loop = QEventLoop()
        w.fixing.finished.connect(loop.quit)
        w.fixing.failed.connect(loop.quit)
        QTimer.singleShot(600_000, loop.quit)
        events.fix_actions.try_button.click()
        loop.exec()
        if w.fixing.panel is None or not w.fixing.panel.entries:
            print("fix_shots: the fix did not finish", file=sys.stderr)
            return 1
        for _ in range(30):  # let the plots take the pins in and repaint
            app.processEvents()
            QTimer.singleShot(33, lambda: None)
        w.refresh_now()
        app.processEvents()
        w.grab().save(str(ROOT / "docs" / "fix-app.png"))
        w.fixing.panel.resize(900, 640)
        app.processEvents()
        w.fixing.panel.grab().save(str(ROOT / "docs" / "fix-panel.png"))
        print("ok docs/fix-app.png, docs/fix-panel.png")
        w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

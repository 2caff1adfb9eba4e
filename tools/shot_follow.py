"""The docs' screenshot of a watched script followed live: runs `main.py watch SCRIPT` into a
fresh folder, follows it in the app (offscreen) and saves the window once STEPS steps are
shown, while the script still runs.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/shot_follow.py \
        examples/lightning_classifier.py docs/watch-follow-lightning.png --steps 60
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script")
    parser.add_argument("png")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--size", default="1280x800")
    args, rest = parser.parse_known_args()
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from memlens.app.window.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    folder = Path(tempfile.mkdtemp(prefix="memlens-shot-")) / "run"
    proc = subprocess.Popen([sys.executable, str(ROOT / "main.py"), "watch", "--out",
                             str(folder), args.script, *rest], cwd=ROOT)
    window = MainWindow(runs_dir=folder.parent / "runs")
    w, h = (int(v) for v in args.size.split("x"))
    window.resize(w, h)
    window.show()
    loop = QEventLoop()
    state = {"following": False}

    def poll():
        if not state["following"] and (folder / "run.json").exists():
            state["following"] = window.follow_run(folder)
        shown = window.history is not None and len(window.history.steps) >= args.steps
        if (state["following"] and shown) or (proc.poll() is not None and not state["following"]):
            loop.quit()

    timer = QTimer(interval=100, timeout=poll)
    timer.start()
    loop.exec()
    for _ in range(20):  # let the last rows paint
        app.processEvents()
    ok = state["following"]
    if ok:
        window.grab().save(args.png)
        print(f"saved {args.png}: {len(window.history.steps)} steps shown, "
              f"script {'running' if proc.poll() is None else 'finished'}")
    proc.wait()
    window.close()
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())

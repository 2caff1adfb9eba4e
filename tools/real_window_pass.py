"""The real-window pass (#49): the app as `python main.py` starts it, on an Xvfb screen of
each size with a window manager (openbox), driven by a scripted user and real xdotool
clicks; a screenshot of the whole screen at each point, and a line of state (the window's
frame against the screen, the centre column's width, each plot's view height).

    python tools/real_window_pass.py                 # 1024x768 and 1280x800, into /tmp
    python tools/real_window_pass.py 1280x800 --out shots/

Needs Xvfb, openbox, xdotool and ImageMagick's `import` (apt-get install xvfb openbox
xdotool imagemagick). The settings and runs go to a fresh temporary home for each size.
Look at the PNGs: that is the point of the pass.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("Xvfb", "openbox", "xdotool", "import")
SIZES = ("1024x768", "1280x800")
STEP_TIMEOUT_S = 120  # a step whose condition never holds is said, and passed


def shot(out: Path, name: str) -> None:
    subprocess.run(["import", "-window", "root", str(out / f"{name}.png")], check=True)
    print("shot", out / f"{name}.png", flush=True)


def xclick(widget) -> None:
    p = widget.mapToGlobal(widget.rect().center())
    subprocess.run(["xdotool", "mousemove", str(p.x()), str(p.y()), "click", "1"], check=True)


def report(window, tag: str) -> None:
    screen, frame = window.screen().availableGeometry(), window.frameGeometry()
    print(tag, json.dumps({
        "screen": [screen.width(), screen.height()],
        "frame": [frame.x(), frame.y(), frame.width(), frame.height()],
        "centre": window.tabs.width(),
        "plots": [round(p.getPlotItem().vb.height()) for p in window.plots.plots],
        "state": str(window.state)}), flush=True)


def plan(out: Path, size: str):
    """(until(window), step(window)) in order, each step taken once its condition holds: a
    run with a toggle, a run paused on an error (the banner shut, then open), the graph tab,
    View > Runs with a run ticked, the dark theme with the rows table and File > Follow
    run's dialog."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QCheckBox, QFileDialog, QToolButton, QTreeWidget

    from tests.app.drive import choose

    def steps(n):
        return lambda w: w.series is not None and w.series.step_count >= n

    def lstm_error(w):
        choose(w, "lstm", steps=40)
        w.findChild(QCheckBox, "detach_check").setChecked(False)
        w.start_run()

    def tick(w):
        tree = w.findChild(QTreeWidget, "runs_tree")
        if tree.topLevelItemCount():
            tree.topLevelItem(0).setCheckState(0, Qt.Checked)

    def shut_dialogs(w):
        for dialog in w.findChildren(QFileDialog):
            dialog.reject()
        w.theme_menu.choose("light")

    def now(w):
        return True

    def finished(w):
        return w.state == "finished"

    def later(ms):
        """A moment for the window to paint what the last step changed."""
        at = []
        return lambda w: (bool(at) and time.monotonic() >= at[0]) or (
            at.append(time.monotonic() + ms / 1000) and False)

    return [
        (now, lambda w: choose(w, "mlp", steps=400, batch_size=16, width=64)),
        (later(500), lambda w: xclick(w.run_panel.run_button)),  # a real click on Start
        (steps(30), lambda w: w.techniques_panel.fields["zero_grad"].widget.setCurrentText(
            "off")),
        (finished, lambda w: (report(w, "run"), shot(out, f"{size}-1-run"))),
        (now, lstm_error),
        (lambda w: w.state == "error", lambda w: None),
        (later(1000), lambda w: (report(w, "error"), shot(out, f"{size}-2-error-banner"))),
        (now, lambda w: xclick(w.error_banner.findChild(QToolButton,
                                                       "error_details_button"))),
        (later(1000), lambda w: (report(w, "details"),
                                 shot(out, f"{size}-3-error-details"))),
        (now, lambda w: w.stop_run()),
        (finished, lambda w: w.tabs.setCurrentWidget(w.graph_tab)),
        (later(1500), lambda w: (report(w, "graph"), shot(out, f"{size}-4-graph"))),
        (now, lambda w: (w.tabs.setCurrentIndex(0), w.runs_dock.action.trigger())),
        (later(1000), tick),
        (lambda w: bool(w.pins), lambda w: None),
        (later(1000), lambda w: (report(w, "pinned"), shot(out, f"{size}-5-runs-dock"))),
        (now, lambda w: w.theme_menu.choose("dark")),
        (later(500), lambda w: w.view_actions.show_rows()),
        (later(1500), lambda w: shot(out, f"{size}-6-dark-rows")),
        (now, lambda w: (w.view_actions.rows_dialog.close(), w.opening.follow_dialog())),
        (later(1500), lambda w: shot(out, f"{size}-7-dark-follow-dialog")),
        (now, shut_dialogs),
    ]


def child(out: Path, size: str) -> int:
    """In the app's own process: main.py's start-up, then the plan, polled on a timer."""
    from PySide6.QtCore import QTimer

    import main as entry
    import memlens.app.window.launch as launch

    real_finish = launch.finish_start_up

    def finish(window) -> None:
        real_finish(window)
        steps = plan(out, size)
        timer = QTimer(window)
        deadline = [time.monotonic() + STEP_TIMEOUT_S]

        def poll() -> None:
            if not steps:
                timer.stop()
                window.close()
                return
            until, step = steps[0]
            if not until(window):
                if time.monotonic() < deadline[0]:
                    return
                print("waited too long for step", len(steps), flush=True)
            steps.pop(0)
            deadline[0] = time.monotonic() + STEP_TIMEOUT_S
            try:
                step(window)
            except Exception as exc:  # a step that failed is said, the pass goes on
                print("step failed:", repr(exc), flush=True)

        timer.timeout.connect(poll)
        timer.start(100)

    launch.finish_start_up = finish
    return entry.main([])


def one_size(size: str, out: Path) -> int:
    display = f":{90 + SIZES.index(size) if size in SIZES else 99}"
    server = subprocess.Popen(["Xvfb", display, "-screen", "0", f"{size}x24", "-nolisten",
                               "tcp"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)  # a tool, not a test: the server and the window manager settle
        env = {k: v for k, v in os.environ.items()
               if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
        env.update(DISPLAY=display, PYTHONPATH=str(ROOT))
        manager = subprocess.Popen(["openbox"], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        time.sleep(1)
        with tempfile.TemporaryDirectory(prefix="memlens-pass-") as home:
            env["HOME"] = home
            done = subprocess.run([sys.executable, __file__, "--child", size, "--out",
                                   str(out)], env=env, cwd=home, timeout=300)
        manager.terminate()
        return done.returncode
    finally:
        server.terminate()
        server.wait(timeout=10)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="*", default=list(SIZES))
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "memlens-pass")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        return child(args.out, args.child)
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        print(f"real_window_pass: {', '.join(absent)} not installed (apt-get install xvfb "
              "openbox xdotool imagemagick)", file=sys.stderr)
        return 2
    return max(one_size(size, args.out) for size in args.sizes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

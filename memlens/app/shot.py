"""`python main.py shot`: run the real window offscreen for N steps and save a screenshot.

The README's pictures come from here, so they show what a user sees: the same window, the
same loop, toggles scheduled with --at exactly as live flips would apply. Nothing heavy is
imported until main() runs (main.py imports every subcommand at start-up).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_BAD_INPUT, EXIT_FAILED = 0, 2, 1


def add_parser(subparsers) -> None:
    from memlens.core.cli_run import add_config_arguments

    p = subparsers.add_parser(
        "shot", help="run the app window offscreen for N steps and save a PNG screenshot",
        description="Open the real window offscreen, run a preset for N steps (toggles "
        "scheduled with --at apply at step boundaries, as live flips do) and save the window "
        "as a PNG. A training error is shown as the app shows it (paused, explained).",
    )
    add_config_arguments(p)
    p.add_argument("--steps", type=int, default=60, help="steps to run (default 60)")
    p.add_argument("--out", required=True, metavar="FILE.png", help="where to save the PNG")
    p.add_argument("--size", default="1480x920", metavar="WxH", help="window size in pixels")
    p.add_argument("--hover", type=float, metavar="STEP",
                   help="show the values at this step, as hovering there does")
    p.add_argument("--resume", action="store_true",
                   help="when the run pauses on a training error, resume it as the Resume button "
                   "does (pair it with an --at change that fixes the cause)")
    p.add_argument("--baseline", action="extend", nargs="+", default=None, metavar="KEY=VALUE",
                   help="first run the same settings with these changes (and no --at), pin it, "
                   "then run the main one over it: a before/after picture")
    p.add_argument("--tab", choices=("timeline", "graph"), default="timeline",
                   help="which centre tab to show")
    p.add_argument("--open", metavar="PATH", dest="open_path",
                   help="run nothing: open this run folder or snapshot.pickle as File > Open "
                   "does and save the window showing it")
    p.add_argument("--theme", choices=("light", "dark"), default="light",
                   help="colour theme of the picture (the app itself follows the system's)")
    p.add_argument("--timeout", type=float, default=900.0, metavar="S",
                   help="give up waiting for the run after S seconds (the shot is still saved)")
    p.add_argument("--precise", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--synthetic", action="store_true", help=argparse.SUPPRESS)


# The largest window a shot makes: an 8K screen. Far larger ones ask the raster engine for
# an image it cannot allocate, and it crashes rather than fails.
MAX_SIZE = (7680, 4320)
MIN_SIZE = (400, 300)


def _say_if_resized(window, asked: tuple[int, int]) -> None:
    """The window cannot be made smaller than its layout needs: say so, never silently."""
    got = (window.width(), window.height())
    if got != tuple(asked):
        print(f"memlens shot: the window needs at least {got[0]}x{got[1]} here; "
              f"saved at that size instead of {asked[0]}x{asked[1]}", file=sys.stderr)


def _size(text: str) -> tuple[int, int]:
    w, sep, h = text.lower().partition("x")
    ok = sep and w.isdigit() and h.isdigit()
    if not ok or not (MIN_SIZE[0] <= int(w) <= MAX_SIZE[0]
                      and MIN_SIZE[1] <= int(h) <= MAX_SIZE[1]):
        raise ValueError(f"--size {text!r}: expected WIDTHxHEIGHT from "
                         f"{MIN_SIZE[0]}x{MIN_SIZE[1]} to {MAX_SIZE[0]}x{MAX_SIZE[1]}")
    return int(w), int(h)


def _timeout(seconds: float) -> float:
    if not (0 < seconds < float("inf")):
        raise ValueError(f"--timeout {seconds:g}: give a number of seconds > 0")
    return seconds


def main(args) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from dataclasses import replace

    from memlens.core.cli_run import build_config
    from memlens.core.options import ConfigError

    try:
        config = build_config(args)
        baseline = None
        if args.baseline is not None:
            baseline = replace(config, schedule=()).with_sets(args.baseline)
        width, height = _size(args.size)
        _timeout(args.timeout)
    except (ConfigError, ValueError) as exc:
        print(f"memlens shot: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = Path(args.out)
    if out.suffix.lower() != ".png":
        print(f"memlens shot: --out {str(out)!r}: the screenshot is a .png file", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.open_path is not None:
        return _shot_of_opened(args.open_path, out, (width, height), args.tab, args.theme)

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["memlens-shot"])
    from memlens.app.main_window import MainWindow
    from memlens.app.window_state import WindowState

    train_fn = None
    if args.synthetic:
        from memlens.core.synthetic import synthetic_training

        train_fn = synthetic_training
    window = MainWindow(config, runs_dir=None, train_fn=train_fn)
    _set_theme(window, args.theme)
    window.resize(width, height)
    window.show()

    def settle(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    deadline = time.monotonic() + args.timeout

    def run(cfg):
        session = window.start_config(cfg)
        while session.running and time.monotonic() < deadline:
            settle(50)
            window._on_frame(force_text=True)  # the error state is noticed now, not at 4 Hz
            if window.state == WindowState.ERROR:
                if not args.resume:
                    break
                window.toggle_pause()
        return session

    if baseline is not None:
        first = run(baseline)
        first.shutdown(30_000)
        settle(100)
        window.pin_current_run()
    session = run(config)
    timed_out = session.running and window.state != "error"
    settle(150)  # the last rows drawn, the slow text refreshed
    window._on_frame(force_text=True)
    if args.hover is not None:
        window.plots.set_hover(args.hover)
    if args.tab == "graph":
        window.tabs.setCurrentIndex(1)
        settle(500)
    app.processEvents()
    _say_if_resized(window, (width, height))
    image = window.grab()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp-{os.getpid()}-{out.name}")
    saved = image.save(str(tmp), "PNG")
    if saved:
        os.replace(tmp, out)
    session.shutdown(30_000)
    window.close()
    errors = [e for e in session.history.events() if e.kind == "error"]
    if not saved:
        print(f"memlens shot: cannot write {str(out)!r}", file=sys.stderr)
        return EXIT_FAILED
    note = f"; training error at step {errors[0].step}" if errors else ""
    print(f"wrote {out}: {len(session.history.steps)} steps{note}")
    if timed_out:
        print(f"memlens shot: the run did not end within {args.timeout:g} s", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _set_theme(window, name: str) -> None:
    from memlens.app.theme import THEMES

    window.conventions.apply_theme(THEMES[name])


def _shot_of_opened(path: str, out: Path, size: tuple[int, int], tab: str, theme: str) -> int:
    """`shot --open PATH`: the window showing a run folder or a snapshot, no run."""
    from memlens.core.runfolder.open_target import OpenError, check_openable

    try:
        kind, _target = check_openable(path)
    except OpenError as exc:
        print(f"memlens shot: cannot open {path}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["memlens-shot"])
    from memlens.app.main_window import MainWindow

    window = MainWindow(runs_dir=None)
    _set_theme(window, theme)
    window.resize(*size)
    window.show()
    opened = window.conventions.opener.open_path(path)
    if opened and kind == "run" and tab == "graph":
        window.tabs.setCurrentIndex(1)
    loop = QEventLoop()
    QTimer.singleShot(300, loop.quit)  # the plots drawn, the text refreshed
    loop.exec()
    app.processEvents()
    _say_if_resized(window, size)
    saved = opened and _save(window.grab(), out)
    window.close()
    if not saved:
        print(f"memlens shot: cannot {'write ' + repr(str(out)) if opened else 'open ' + path}",
              file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {out}: {path} ({kind})")
    return EXIT_OK


def _save(image, out: Path) -> bool:
    """Atomically: a failed save leaves no partial PNG where `out` is."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp-{os.getpid()}-{out.name}")
    if not image.save(str(tmp), "PNG"):
        return False
    os.replace(tmp, out)
    return True

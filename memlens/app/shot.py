"""Screenshots of the real window, offscreen (the `shot` command: memlens.cli.shot): a run
of N steps with its scheduled toggles, or a run folder or snapshot opened as File > Open
opens it. A failed save leaves nothing where the PNG goes, and says why in one line."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from memlens.app.images import save_png
from memlens.core.excerpt import printable
from memlens.core.exits import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

SETTLE_MS = 150  # after the run: the last rows drawn, the slow text refreshed
OPENED_MS = 300  # after opening: the plots drawn, the text refreshed


def shoot_run(config, baseline, out: Path, size: tuple[int, int], args) -> int:
    """Run `config` (after a pinned `baseline` run, if any) in the window and save it.
    Ctrl-C or SIGTERM stop the run and save the picture of what ran (exit 128 + N); a run
    that failed on bad input (a model file) exits 2 with its one line."""
    from PySide6.QtWidgets import QApplication

    from memlens.app.panels.window_state import WindowState
    from memlens.core.run_guard import SignalStop

    app = _application()
    train_fn = None
    if args.synthetic:
        from memlens.core.synthetic import synthetic_training

        train_fn = synthetic_training
    window = _window(size, args.theme, config=config, train_fn=train_fn)
    deadline = time.monotonic() + args.timeout
    failures: list[tuple[str, str]] = []
    signals = SignalStop(_Stopping(window))

    def run(cfg):
        session = window.start_config(cfg)
        session.failed.connect(lambda message, details: failures.append((message, details)))
        while session.running and time.monotonic() < deadline and signals.received is None:
            _settle(50)
            window.refresh_now()  # the error state is noticed now, not at 4 Hz
            if window.state == WindowState.ERROR:
                if not args.resume:
                    break
                window.toggle_pause()
        return session

    with signals:
        if baseline is not None:
            run(baseline).shutdown(30_000)
            _settle(100)
            window.pin_current_run()
        session = run(config)
        timed_out = session.running and window.state != WindowState.ERROR
        _settle(SETTLE_MS)
        window.refresh_now()
        if args.hover is not None:
            window.plots.set_hover(args.hover)
        if args.tab == "graph":
            window.tabs.setCurrentIndex(1)
            _settle(500)
        QApplication.processEvents()
        _say_if_resized(window, size)
        problem = save_png(window.grab(), out)
        ended = session.shutdown(STOP_WAIT_MS if signals.received else 30_000)
    code = _run_outcome(session, problem, failures, signals, timed_out, out, args.timeout)
    if not ended:
        # A step that never returns (a forward stuck in the user's code) keeps its thread:
        # a QThread cannot be joined or destroyed then, and Python's exit would destroy it
        # (Qt aborts). Everything is written: end the process here, as the app's Quit now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    window.close()
    del app
    return code


STOP_WAIT_MS = 3000  # after Ctrl-C: how long the run's step may take to end


class _Stopping:
    """What SignalStop stops: the window's run."""

    def __init__(self, window) -> None:
        self.window = window

    def stop(self) -> None:
        if self.window.session is not None:
            self.window.session.stop()


def _run_outcome(session, problem, failures, signals, timed_out, out, timeout) -> int:
    """The exit code and the lines that say it, once the picture is saved (or not)."""
    if problem:  # the PNG could not be written where --out says: an argument to change
        say(problem)
        return EXIT_BAD_INPUT
    errors = [e for e in session.history.events()
              if e.kind == "error" and e.key != "run failed"]
    note = f"; training error at step {errors[0].step}" if errors else ""
    print(printable(f"wrote {out}: {len(session.history.steps)} steps{note}"))
    if signals.received is not None:
        say(f"stopped by {signals.received.name} after {len(session.history.steps)} steps; "
            "the picture shows them")
        return signals.exit_code
    for message, details in failures:  # no traceback: bad input (a model file), said whole
        say(message)
        return EXIT_BAD_INPUT if not details else EXIT_FAILED
    if timed_out:
        say(f"the run did not end within {timeout:g} s")
        return EXIT_FAILED
    return EXIT_OK


def say(message: object) -> None:
    """One line on stderr, printable whatever it quotes of a file (core.excerpt)."""
    print(printable(f"memlens shot: {message}"), file=sys.stderr)


def shoot_opened(path: str, out: Path, size: tuple[int, int], tab: str, theme: str,
                 at_event: int | None = None) -> int:
    """`shot --open PATH`: the window showing a run folder or a snapshot, no run; with
    `at_event`, the snapshot's list of what was alive after that event, as a click shows."""
    from memlens.core.runfolder.open_target import OpenError, check_openable

    try:
        kind, _target = check_openable(path) if at_event is None else _snapshot_with(
            path, at_event)
    except OpenError as exc:
        say(f"cannot open {path}: {exc}")
        return EXIT_BAD_INPUT
    except IndexError as exc:
        say(exc)
        return EXIT_BAD_INPUT
    from PySide6.QtWidgets import QApplication

    app = _application()
    window = _window(size, theme)
    opened = window.opener.open_path(path)
    if opened and kind == "run" and tab == "graph":
        window.tabs.setCurrentIndex(1)
    if opened and at_event is not None:
        window.opener.snapshot_view.show_alive_at(at_event)
    _settle(OPENED_MS)
    QApplication.processEvents()
    _say_if_resized(window, size)
    problem = save_png(window.grab(), out) if opened else None
    window.close()
    del app
    if not opened:
        say(f"cannot open {path}")
        return EXIT_FAILED
    if problem:  # the PNG could not be written where --out says: an argument to change
        say(problem)
        return EXIT_BAD_INPUT
    at = "" if at_event is None else f", alive at event {at_event} listed"
    print(printable(f"wrote {out}: {path} ({kind}){at}"))
    return EXIT_OK


def _snapshot_with(path: str, at_event: int):
    """check_openable for `--at-event`: a snapshot that has that event, checked before any
    window is made (IndexError names the range)."""
    from memlens.core.runfolder.open_target import OpenError, resolve
    from memlens.core.snapshot_file import SnapshotFileError, read_snapshot

    kind, target = resolve(path)
    if kind != "snapshot":
        raise OpenError("--at-event needs a snapshot, and this is a run folder")
    try:
        last = read_snapshot(target).last_event
    except SnapshotFileError as exc:
        raise OpenError(str(exc)) from None
    if not 0 <= at_event <= last:
        raise IndexError(f"--at-event {at_event}: this snapshot has events 0 to {last} "
                         "(0 is before the first)")
    return kind, target


def _application():
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(["memlens-shot"])


def _window(size: tuple[int, int], theme: str, **kwargs):
    from memlens.app.theme import THEMES
    from memlens.app.window.main_window import MainWindow

    window = MainWindow(runs_dir=None, **kwargs)
    window.theme_menu.apply(THEMES[theme])
    window.resize(*size)
    window.show()
    return window


def _settle(ms: int) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def _say_if_resized(window, asked: tuple[int, int]) -> None:
    """The window cannot be made smaller than its layout needs: say so, never silently."""
    got = (window.width(), window.height())
    if got != tuple(asked):
        say(f"the window needs at least {got[0]}x{got[1]} here; saved at that size instead "
            f"of {asked[0]}x{asked[1]}")


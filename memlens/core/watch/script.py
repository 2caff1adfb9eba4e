"""Running a user's script as `python SCRIPT ARGS` would, recorded by a Watch (the engine
of `main.py watch`, memlens.cli.watch)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from memlens.core.exits import EXIT_BAD_INPUT, EXIT_SIGNAL_BASE
from memlens.core.watch.limit import StepLimit


def check_script(path: str) -> str | None:
    """Why this is not a script we can run, or None."""
    from memlens.core.safe_read import MAX_SOURCE, FileReadError, read_bytes

    p = Path(path)
    try:
        source = read_bytes(p, MAX_SOURCE, "a Python script")
    except FileReadError as exc:
        return f"{exc}. Give the path of your training script (a .py file)."
    try:
        compile(source, str(p), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return (f"{path}: not a Python script ({type(exc).__name__}: {exc}). memlens watch "
                "runs a Python training script.")
    return None


def run_script(script: str, script_args: list[str], *, out=None, precise: bool = False,
               capture_every: int = 0, quiet: bool = False, force: bool = False,
               model_found=None, at=(), control: str | None = None, around=None,
               stop_after: int = 0, detail: str | int | None = None) -> int:
    """Run `script` under a watch; returns the exit code `python script ARGS` would have
    (2 where a toggle of `at` never applied: past the run's last step, or a script that
    made no step). `model_found`: called with each model at its first call
    (WatchSession.model_found); `at`, `control`: technique changes and the control channel
    (core.watch.interventions); `around(watch)`: a context manager the script runs inside,
    left before the watch closes (memlens.integrations.relaunch: the ranks a framework
    starts again); `stop_after`: end the script where its step `stop_after + 1` would
    begin (exit code 0; core.watch.limit)."""
    from memlens.core.runfolder.atomic import ExportError
    from memlens.core.watch.control_channel import WatchStopped
    from memlens.core.watch.session import WatchSession

    path = str(Path(script))
    argv = [path, *script_args]
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = argv
    sys.path.insert(0, str(Path(path).resolve().parent))
    try:
        w = WatchSession(out=out, precise=precise, capture_every=capture_every, script=path,
                         argv=argv, force=force, model_found=model_found, at=at,
                         control=control, stop_after=stop_after, detail=detail)
    except (ExportError, OSError, ValueError) as exc:  # ConfigError: a folder holding a run
        sys.argv, sys.path[:] = old_argv, old_path
        print(f"memlens watch: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    code, error = 0, None
    old_term = _catch_sigterm()
    outer = around(w) if around is not None else contextlib.nullcontext()
    parent = os.getpid()
    try:
        with outer:
            _run_as_main(path)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except WatchStopped as exc:  # the app's Stop: between steps, the files complete
        error = exc
        print(f"memlens watch: {exc}; the run folder is complete up to it", file=sys.stderr)
    except StepLimit as exc:  # the steps asked for are recorded: not an error
        error = exc
        if not quiet:
            print(f"memlens watch: {exc}", file=sys.stderr)
    except Terminated as exc:  # SIGTERM: no traceback, as Python prints none for it
        error, code = exc, EXIT_SIGNAL_BASE + signal.SIGTERM
        print(f"memlens watch: {exc} at step {w.step_index}; the run folder is complete up "
              "to it", file=sys.stderr)
    except BaseException as exc:  # the script's own error: printed as Python prints it
        error = exc
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
        _print_user_traceback(exc, path)
    finally:
        _restore_sigterm(old_term)
        sys.argv, sys.path[:] = old_argv, old_path
        if os.getpid() == parent:
            w.close(error=error, exit_code=code)
    if os.getpid() != parent:
        # A child the script forked ended its script (sys.exit, or its end): the recording
        # and its folder are the parent's, so the child leaves them be and says nothing.
        return code
    _say_what_was_recorded(w, path, code, quiet, made=out is None)
    return _toggles_said(w, code, quiet)


def _say_what_was_recorded(w, path: str, code: int, quiet: bool, made: bool) -> None:
    """After the script: a failed write said; a run that never trained discarded (its
    folder too where memlens `made` it), said; else the summary."""
    from memlens.core.runfolder.claim import discard_run
    from memlens.core.watch.meta import NOTHING_FOUND_HELP
    from memlens.core.watch.report import print_summary

    if w.write_error is not None:
        print(f"memlens watch: writing {w.folder} failed ({w.write_error}); it holds what "
              "was written before. The script ran unchanged.", file=sys.stderr)
    if w.nothing_found and w.step_index == 0 and w.write_error is None:
        # It ended before it trained (its own usage error or --help, say): nothing to keep.
        discard_run(w.folder, made=made)
        if not quiet:
            print(f"memlens watch: {path} ended (exit code {code}) before it trained: no "
                  "model call, no optimizer, no step, so nothing was recorded and no run "
                  "folder is kept. Its own output is above; to pass it arguments, put them "
                  "after the script's name.", file=sys.stderr)
    elif not quiet:
        print_summary(w)
        if w.nothing_found:
            print(f"memlens watch: found no model and no optimizer. {NOTHING_FOUND_HELP}",
                  file=sys.stderr)


def _toggles_said(w, code: int, quiet: bool) -> int:
    """What the toggles made the script do, said; exit 2 (bad input) for `--at` changes
    that never applied, where the script itself ended well."""
    iv = w.interventions
    if iv is None:
        return code
    for line in [] if quiet else iv.failures:
        print(f"memlens watch: {line}", file=sys.stderr)
    asked = [c.text() for c in (*iv.applied, *iv.unapplied)]
    if w.step_index == 0 and asked:
        why = (f"--at {', '.join(asked)}: the script made no training step (no optimizer "
               "step, no backward), so there was nothing to toggle")
    elif iv.unapplied:
        why = (f"--at {', '.join(c.text() for c in iv.unapplied)} never applied: the run's "
               f"last step was {w.step_index - 1}")
    else:
        return code
    print(f"memlens watch: {why}", file=sys.stderr)
    return EXIT_BAD_INPUT if code == 0 else code


class Terminated(BaseException):
    """SIGTERM while the script runs, raised in it as Ctrl-C raises KeyboardInterrupt, so
    the watch finishes run.json; a BaseException, so the script's `except Exception` does
    not swallow it."""


def _on_sigterm(signum, _frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends the process at once
    raise Terminated("stopped by SIGTERM")


def _catch_sigterm():
    """Handle SIGTERM while the script runs, where nothing else does (main thread only; a
    handler the script sets itself replaces this one, as it would replace Python's)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return None
    return signal.signal(signal.SIGTERM, _on_sigterm)


def _default_sigterm_in_child() -> None:
    """A child the script forks dies on SIGTERM as it would unwatched: the handler above
    raises in a recording the child does not have."""
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_default_sigterm_in_child)


def _restore_sigterm(old) -> None:
    if old is not None and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, old)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what Python does with sys.exit("message")
    return 1


def _run_as_main(path: str) -> None:
    """Run the script as `python path` does: module `__main__` with `__file__` absolute (and
    so its tracebacks), `sys.argv[0]` as typed. (runpy.run_path sets argv[0] to the path it
    is given: one or the other would differ.)"""
    import importlib.machinery
    import types

    from memlens.core.safe_read import MAX_SOURCE, read_bytes

    fname = os.path.abspath(path)
    code = compile(read_bytes(fname, MAX_SOURCE, "a Python script"), fname, "exec",
                   dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = fname
    main.__cached__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", fname)
    old = sys.modules.get("__main__")
    sys.modules["__main__"] = main  # pickle finds the script's classes there, as it would
    try:
        exec(code, main.__dict__)
    finally:
        if old is not None:
            sys.modules["__main__"] = old


def _print_user_traceback(exc: BaseException, path: str) -> None:
    """The traceback from the script's first frame on, as `python script.py` shows it: the
    watch's own wrappers (a backward that raises passes through them) left out."""
    tb = exc.__traceback__
    target = str(Path(path).resolve())
    while tb is not None and str(Path(tb.tb_frame.f_code.co_filename).resolve()) != target:
        tb = tb.tb_next
    shown = traceback.TracebackException(type(exc), exc, tb or exc.__traceback__)
    _drop_watch_frames(shown, set())
    print("".join(shown.format()), end="", file=sys.stderr)


_WATCH_DIR = str(Path(__file__).resolve().parents[1])  # memlens/core: the hooks, the tracker


def _drop_watch_frames(shown: traceback.TracebackException, seen: set[int]) -> None:
    if id(shown) in seen:
        return
    seen.add(id(shown))
    shown.stack = traceback.StackSummary.from_list(
        [f for f in shown.stack if not str(Path(f.filename).resolve()).startswith(_WATCH_DIR)])
    for chained in (shown.__cause__, shown.__context__):
        if chained is not None:
            _drop_watch_frames(chained, seen)

"""A headless run's guards: Ctrl-C and SIGTERM stop it at a step boundary, and a failing disk
stops it, both with the run folder finalised (run.json's summary says what stopped it)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

from memlens.core.exits import EXIT_SIGNAL_BASE
from memlens.core.sinks import RECORD_METHODS


class SignalStop:
    """While entered (main thread only), SIGINT and SIGTERM ask `controls` to stop; the loop
    checks between steps and inside long phases, so the folder ends complete up to the last
    step. A second signal is not caught: it ends the process at once, as it would have."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, controls) -> None:
        self.controls = controls
        self.received: signal.Signals | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> SignalStop:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        self._restore()

    def _restore(self) -> None:
        for sig, handler in self._old.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)
        self._old = {}

    def _on_signal(self, signum, _frame) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
        self.controls.stop()
        self._restore()

    @property
    def exit_code(self) -> int | None:
        return None if self.received is None else EXIT_SIGNAL_BASE + int(self.received)


class WriteGuard:
    """A RunWriter whose first failed write (a full disk, a folder removed) stops the run
    instead of raising out of the loop: the records go on to the other sinks until the loop
    stops, and `failure` holds the error for the caller to report."""

    def __init__(self, writer, controls) -> None:
        self.writer = writer
        self.controls = controls
        self.failure: OSError | None = None

    def _call(self, method: str, *args) -> None:
        if self.failure is not None:
            return
        try:
            getattr(self.writer, method)(*args)
        except OSError as exc:
            self.failure = exc
            self.controls.stop()
            with contextlib.suppress(OSError):
                self.writer.close()

    def on_start(self, meta): self._call("on_start", meta)
    def on_samples(self, items): self._call("on_samples", items)
    def on_steps(self, rows): self._call("on_steps", rows)
    def on_event(self, e): self._call("on_event", e)
    def on_graph(self, g): self._call("on_graph", g)
    def on_allocations(self, rows): self._call("on_allocations", rows)
    def on_cuda_snapshot(self, recorder): self._call("on_cuda_snapshot", recorder)
    def on_finish(self, summary) -> None:
        # Even after a failed write: run.json's summary is one small atomic write, and
        # space freed since (or a smaller file) may let it through.
        try:
            self.writer.on_finish(summary)
        except OSError as exc:
            self.failure = self.failure or exc

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()


class StoppedBy:
    """Forwards to `sink`; the summary it hands on names what stopped the run when that was
    a signal or a failed write rather than the loop's own reasons."""

    def __init__(self, sink, reason) -> None:
        self._sink, self._reason = sink, reason
        for name in RECORD_METHODS:
            if name != "on_finish":
                setattr(self, name, getattr(sink, name))

    def on_finish(self, summary: dict) -> None:
        reason = self._reason()
        if reason and summary.get("stopped_by") == "stopped":
            summary = {**summary, "stopped_by": reason}
        self._sink.on_finish(summary)

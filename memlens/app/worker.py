"""The app's worker: a job on a QThread of its own that catches every exception and reports
it as a signal, and the session that owns the thread and says when it has ended."""

from __future__ import annotations

import traceback

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot


class Worker(QObject):
    """Runs `work()` on its thread. A ConfigError (bad input: its one line says what to
    change) or any other exception becomes `failed` (message, traceback text); none escapes
    the thread. `done` comes last either way, with `result` (None when work raised)."""

    done = Signal(object)
    failed = Signal(str, str)  # message, traceback text

    def __init__(self) -> None:
        super().__init__()
        self.result: object = None

    def work(self) -> object:
        raise NotImplementedError

    @Slot()
    def run(self) -> None:
        from memlens.core.options import ConfigError

        try:
            self.result = self.work()
        except ConfigError as exc:
            self.failed.emit(str(exc), "")
        except Exception as exc:
            self.failed.emit(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        finally:
            self.done.emit(self.result)


class WorkerSession(QObject):
    """Owns a Worker and its thread: `failed` is the worker's, `finished` (the worker's
    result) comes once, after the thread has ended; a subclass may add to that
    (`_on_worker_ended`)."""

    finished = Signal(object)  # the worker's result; after the thread has ended
    failed = Signal(str, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.ended = False

    def _run_on_thread(self, worker: Worker, name: str) -> None:
        """Give `worker` a thread of its own, named `name`; `start()` starts it."""
        self.worker = worker
        self._thread = QThread(self)
        self._thread.setObjectName(name)
        worker.moveToThread(self._thread)
        self._thread.started.connect(worker.run)
        worker.failed.connect(self.failed)
        # Direct: the worker's own thread ends its event loop, so the thread finishes even
        # while the GUI thread is blocked in _wait().
        worker.done.connect(self._thread.quit, Qt.DirectConnection)
        self._thread.finished.connect(self._on_thread_finished)

    def start(self) -> None:
        self._thread.start()

    def _wait(self, timeout_ms: int) -> bool:
        """Wait for the thread (the caller has asked the worker to stop). True once it has
        ended."""
        if not self._thread.isRunning():
            return True
        return self._thread.wait(timeout_ms)

    def _on_worker_ended(self) -> None:
        """On the GUI thread, once, after the worker's thread has ended, before `finished`."""

    @Slot()
    def _on_thread_finished(self) -> None:
        if self.ended:
            return
        self.ended = True
        result = self.worker.result
        self._on_worker_ended()
        self.finished.emit(result)

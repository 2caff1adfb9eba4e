"""The Lessons tab's worker: core.lessons' runner in a QThread, its progress pulled by the GUI.

The runner calls `progress` from the arms' own threads; the worker only keeps the newest
value, and the tab reads it on a timer (no signal a step). Stop is the runner's flag, read
between phases; every exception becomes the `failed` signal.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot


class LessonsWorker(QObject):
    done = Signal(object)  # the LessonsReport, or None when the runner raised
    failed = Signal(str, str)  # message, traceback text

    def __init__(self, presets: list[str], steps: int | None, quick: bool,
                 out: Path | None, settings: dict[str, Any]) -> None:
        super().__init__()
        from memlens.core.lessons.runner import LessonRunner

        self.latest = None  # the newest memlens.core.lessons.runner.Progress, written by any thread
        self.runner = LessonRunner(presets, steps=steps, quick=quick, out=out,
                                   settings=settings, progress=self._on_progress)
        self.report = None

    def _on_progress(self, progress) -> None:
        self.latest = progress  # one reference written: safe under the GIL

    @Slot()
    def run(self) -> None:
        from memlens.core.options import ConfigError

        try:
            # as `lessons` does: arms that cannot fit in free memory together are refused
            # before anything is measured (here, off the GUI thread)
            self.runner.check_fits()
            self.report = self.runner.run()
        except ConfigError as exc:  # a setting: its one line says what to change
            self.failed.emit(str(exc), "")
        except Exception as exc:  # reported, never raised out of the thread
            self.failed.emit(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        finally:
            self.done.emit(self.report)


class LessonsSession(QObject):
    """Owns one lessons run's worker and thread."""

    finished = Signal(object)  # the report or None, after the thread has ended
    failed = Signal(str, str)

    def __init__(self, presets: list[str], *, steps: int | None = None, quick: bool = True,
                 out: Path | None = None, settings: dict[str, Any] | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.ended = False
        self._thread = QThread(self)
        self._thread.setObjectName("memlens-lessons")
        self.worker = LessonsWorker(presets, steps, quick, out, dict(settings or {}))
        self.worker.moveToThread(self._thread)
        self._thread.started.connect(self.worker.run)
        self.worker.failed.connect(self.failed)
        self.worker.done.connect(self._thread.quit, Qt.DirectConnection)
        self._thread.finished.connect(self._on_thread_finished)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.worker.runner.stop()

    @property
    def progress(self):
        return self.worker.latest

    def shutdown(self, timeout_ms: int = 10_000) -> bool:
        self.stop()
        if not self._thread.isRunning():
            return True
        return self._thread.wait(timeout_ms)

    @Slot()
    def _on_thread_finished(self) -> None:
        if self.ended:
            return
        self.ended = True
        self.finished.emit(self.worker.report)

"""The Lessons tab's worker: core.lessons' runner in a QThread, its progress pulled by the GUI.

The runner calls `progress` from the arms' own threads; the worker only keeps the newest
value, and the tab reads it on a timer (no signal a step). Stop is the runner's flag, read
between phases; every exception becomes the `failed` signal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject

from memlens.app.worker import Worker, WorkerSession


class LessonsWorker(Worker):
    def __init__(self, presets: list[str], steps: int | None, quick: bool,
                 out: Path | None, settings: dict[str, Any]) -> None:
        super().__init__()
        from memlens.core.lessons.runner import LessonRunner

        self.latest = None  # the newest memlens.core.lessons.runner.Progress, written by any thread
        self.runner = LessonRunner(presets, steps=steps, quick=quick, out=out,
                                   settings=settings, progress=self._on_progress)

    def _on_progress(self, progress) -> None:
        self.latest = progress  # one reference written: safe under the GIL

    def work(self):
        """The LessonsReport."""
        # as `lessons` does: arms that cannot fit in free memory together are refused
        # before anything is measured (here, off the GUI thread)
        self.runner.check_fits()
        return self.runner.run()


class LessonsSession(WorkerSession):
    """Owns one lessons run's worker and thread; `finished` gives the report or None."""

    def __init__(self, presets: list[str], *, steps: int | None = None, quick: bool = True,
                 out: Path | None = None, settings: dict[str, Any] | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._run_on_thread(LessonsWorker(presets, steps, quick, out, dict(settings or {})),
                            "memlens-lessons")

    def stop(self) -> None:
        self.worker.runner.stop()

    @property
    def progress(self):
        return self.worker.latest

    def shutdown(self, timeout_ms: int = 10_000) -> bool:
        self.stop()
        return self._wait(timeout_ms)

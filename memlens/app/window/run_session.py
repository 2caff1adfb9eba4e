"""One run in the app: the worker that runs the core loop in a QThread, and what it feeds.

The worker is the app's only thread. It calls the same `run_training` as the CLI with a
RunControls (pause, stop and technique changes are flags the loop reads between steps) and
a sink that fills a RunHistory, which the GUI pulls on its timer, and streams the run folder
to disk so nothing is lost. Records are plain numbers; no tensor leaves the worker. Every
exception the loop raises is caught and reported as the `failed` signal.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject

from memlens.app.worker import Worker, WorkerSession
from memlens.core.config import RunConfig
from memlens.core.controls import RunControls
from memlens.core.history import RunHistory
from memlens.core.model_file import preset_label
from memlens.core.recorder.output import choose_folder
from memlens.core.records import RunEvent
from memlens.core.runfolder.header import run_header
from memlens.core.runfolder.writer import RunWriter
from memlens.core.sinks import FanOut, GuardedSink

TrainFn = Callable[..., object]


def _writer_failed(history: RunHistory):
    """A failing disk never stops the run: the run-folder writer is dropped (GuardedSink)
    and an info event says why."""

    def failed(dropped: RunWriter, exc: Exception) -> None:
        history.on_event(RunEvent(
            step=max(len(history.steps) - 1, 0), time_s=0.0, kind="info",
            message=f"run files in {dropped.folder} stopped: {exc}",
            explanation="The run goes on in memory; use File > Export to save it.",
        ))

    return failed


def core_training() -> TrainFn:
    # Imported on the worker thread at Start: torch loads there, never on the GUI thread.
    # The first optimizer a preset builds imports torch._dynamo (and sympy, hundreds of
    # modules); import it here too, so the freeze below covers those as well.
    import torch._dynamo  # noqa: F401

    from memlens.core.loop import run_training

    # torch's import leaves a great many long-lived objects; a full collection walking them
    # all pauses every thread, the GUI's included, for a visible moment. Freeze them out of
    # the collector once (later garbage is still collected as usual).
    gc.freeze()
    return run_training


class RunWorker(Worker):
    def __init__(self, config: RunConfig, controls: RunControls, sink: FanOut,
                 train_fn: TrainFn | None) -> None:
        super().__init__()
        self._config, self._controls, self._sink, self._train_fn = config, controls, sink, train_fn

    def work(self) -> dict | None:
        """The run's summary dict."""
        from memlens.core.model_file import one_load_per_run

        with one_load_per_run():  # the preflight and the run take one load of a model file
            train = self._train_fn or core_training()
            if self._train_fn is None:  # the preset's memory check, as the CLI's
                from memlens.core.preflight import check_run
                from memlens.core.training import resolve_device

                check_run(self._config, resolve_device(self._config.device))
            result = train(self._config, self._controls, self._sink, on_error="pause")
        return result.to_dict() if hasattr(result, "to_dict") else result


class RunSession(WorkerSession):
    """Owns a run's history, controls, run folder and worker thread; `finished` gives the
    summary dict or None."""

    def __init__(self, config: RunConfig, runs_dir: Path | None = None,
                 train_fn: TrainFn | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.config = config
        self.controls = RunControls(config.techniques, config.schedule)
        self.folder: Path | None = None
        self.summary: dict | None = None
        writer, problem, folder = None, None, None
        if runs_dir is not None:
            try:
                folder = choose_folder(None, preset_label(config.preset), runs_dir=runs_dir)
            except OSError as exc:  # the runs folder cannot be made
                problem = str(exc)
        # A long run's older rows go to a hidden file on the run's own disk (memlens.core.history).
        self.history = RunHistory(spill_dir=folder)
        if folder is not None:
            try:
                writer = RunWriter(folder, precise=config.precise,
                                   meta=run_header("lab", config=config.to_dict()),
                                   history=self.history)
                self.folder = folder
            except OSError as exc:  # ExportError
                problem = str(exc)
        if problem is not None:
            self.history.on_event(RunEvent(0, 0.0, "setup", message=problem,
                                           explanation="The run is kept in memory only."))
        self._writer = (GuardedSink(writer, _writer_failed(self.history))
                        if writer is not None else None)
        self.sink = FanOut(self.history, self._writer)
        self._run_on_thread(RunWorker(config, self.controls, self.sink, train_fn), "memlens-run")

    def stop(self) -> None:
        self.controls.stop()

    @property
    def running(self) -> bool:
        return not self.ended

    def shutdown(self, timeout_ms: int = 10_000) -> bool:
        """Stop and wait for the thread (window closing). True once it has ended."""
        self.controls.stop()
        return self._wait(timeout_ms)

    def abandon(self) -> None:
        """Quit without waiting for a step that does not end (the window's "Quit now"):
        stop the run, and finalise its folder from this thread: the rows written so far
        stay, and run.json's summary says the run was closed mid-step. The training thread
        goes on to the end of its step, writing nothing more."""
        self.controls.stop()
        writer = self._writer.detach() if self._writer is not None else None
        if writer is None:
            return
        steps = self.history.steps.column("step")
        try:
            writer.on_finish({"steps_done": len(steps), "stopped_by": "closed",
                              "last_step": int(steps[-1]) if len(steps) else None})
        except OSError:
            writer.close()

    def _on_worker_ended(self) -> None:
        self.summary = self.worker.result
        self.worker.deleteLater()

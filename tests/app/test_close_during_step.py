"""Closing the window while a step runs that does not end soon: the window says it is
stopping and the app's event loop returns once the run has stopped; a second close offers to
quit at once, with the run's folder finalised."""

from __future__ import annotations

import json
import math
import threading

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from memlens.core.config import RunConfig
from memlens.core.records import RunSummary, StepRecord

SAFETY_S = 120  # only keeps a broken build from hanging the suite; no test waits on it


class LongStep:
    """A train function whose second step blocks, ignoring the stop flag as one long kernel
    would, until the test releases it."""

    def __init__(self) -> None:
        self.in_step = threading.Event()
        self.release = threading.Event()

    def __call__(self, config, controls, sink, on_error="pause") -> RunSummary:
        sink.on_start({"config": config.to_dict(), "environment": {}})
        sink.on_steps([(StepRecord(step=0, time_s=0.0, loss=1.0, grad_norm=1.0, step_ms=1.0,
                                   zero_grad_ms=0.0, forward_ms=0.0, backward_ms=0.0,
                                   optimizer_ms=0.0, eval_ms=0.0, allocated_bytes=1,
                                   peak_bytes=1, reserved_bytes=None, graph_nodes=1,
                                   saved_bytes=0, retained_bytes=0), ())])
        self.in_step.set()
        self.release.wait(SAFETY_S)
        summary = RunSummary(steps_done=1, stopped_by="stopped", wall_s=0.0, final_loss=1.0,
                             peak_bytes=1, mean_step_ms=1.0)
        sink.on_finish(summary.to_dict())
        return summary


@pytest.fixture
def long_window(qtbot, tmp_path):
    from memlens.app.window.main_window import MainWindow

    step = LongStep()
    w = MainWindow(runs_dir=tmp_path / "runs", train_fn=step)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    w.start_config(RunConfig(steps=10))
    qtbot.waitUntil(step.in_step.is_set)
    yield w, step
    # pytest-qt has closed and scheduled the window's deletion by now: end the thread
    # without running an event loop, as tests/app/conftest.py does.
    step.release.set()
    w.session.shutdown(SAFETY_S * 1000)


def run_app_until_it_returns(actions) -> int:
    """app.exec() with `actions` run from inside it; its return code."""
    app = QApplication.instance()
    assert app.quitOnLastWindowClosed()
    safety = QTimer()
    safety.setSingleShot(True)
    safety.timeout.connect(lambda: app.exit(99))
    safety.start(SAFETY_S * 1000)
    QTimer.singleShot(0, actions)
    try:
        return app.exec()
    finally:
        safety.stop()


def test_closing_during_a_long_step_says_stopping_and_exits_when_the_step_ends(long_window):
    w, step = long_window
    seen: dict = {}

    def close_then_release() -> None:
        w.close()
        seen.update(visible=w.isVisible(), state=w.state, title=w.windowTitle(),
                    stop=w.session.controls.stop_requested, still_running=w.running)
        step.release.set()

    assert run_app_until_it_returns(close_then_release) == 0
    assert seen["visible"] and seen["still_running"] and seen["stop"]
    assert seen["state"] == "stopping" and "stopping…" in seen["title"].lower()
    assert not w.isVisible() and not w.running
    doc = json.loads((w.session.folder / "run.json").read_text())
    assert doc["summary"]["stopped_by"] == "stopped"


def test_a_second_close_offers_to_quit_at_once_and_finalises_the_run_files(qtbot, long_window):
    w, step = long_window
    seen: dict = {}

    def close_twice_and_quit() -> None:
        w.close()
        w.close()
        box = w.findChild(QMessageBox, "quit_now")
        seen["offered"] = box is not None and box.isVisible()
        quit_button = next(b for b in box.buttons() if b.text() == "Quit now")
        quit_button.click()

    assert run_app_until_it_returns(close_twice_and_quit) == 0
    assert seen["offered"]
    assert not w.isVisible()
    assert w.running and not step.release.is_set()  # the step is still going: no waiting
    folder = w.session.folder
    doc = json.loads((folder / "run.json").read_text())
    assert doc["summary"]["stopped_by"] == "closed" and doc["summary"]["steps_done"] == 1
    rows = (folder / "steps.csv").read_text().splitlines()
    assert len(rows) == 2 and math.isclose(float(rows[1].split(",")[2]), 1.0)
    step.release.set()  # the step ends after all: it writes nothing more
    qtbot.waitUntil(lambda: not w.running, timeout=SAFETY_S * 1000)
    assert json.loads((folder / "run.json").read_text()) == doc
    assert (folder / "steps.csv").read_text().splitlines() == rows

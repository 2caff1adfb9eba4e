"""pytest-qt set-up for the app tests: offscreen Qt, chosen before anything imports Qt."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest


@pytest.fixture
def window(qtbot, tmp_path):
    from app.main_window import MainWindow

    w = MainWindow(runs_dir=tmp_path / "runs")
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w
    if w.session is not None and w.running:
        w.session.shutdown(20_000)

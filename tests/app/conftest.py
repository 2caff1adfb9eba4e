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


@pytest.fixture(autouse=True)
def app_settings_in_tmp(tmp_path_factory):
    """The app's QSettings (recent model files) in a temporary folder: no test reads or
    writes the user's own settings."""
    from PySide6.QtCore import QSettings

    QSettings.setPath(QSettings.IniFormat, QSettings.UserScope,
                      str(tmp_path_factory.mktemp("settings")))

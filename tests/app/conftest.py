"""pytest-qt set-up for the app tests: offscreen Qt, chosen before anything imports Qt."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
if os.environ["QT_QPA_PLATFORM"] == "offscreen":
    # A desktop-sized screen (Qt's offscreen default is 800x800): the first window takes its
    # size from the screen it opens on (app/screen_fit.py), and the tests drive a full one.
    os.environ["QT_QPA_PLATFORM"] = "offscreen:configfile=" + os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "offscreen-screen.json")

import pytest


@pytest.fixture(autouse=True)
def _no_user_settings(tmp_path_factory):
    """QSettings' user store points at a temporary folder: no test reads or writes the
    settings of whoever runs the tests."""
    from PySide6.QtCore import QSettings

    folder = tmp_path_factory.mktemp("qsettings")
    for fmt in (QSettings.IniFormat, QSettings.NativeFormat):
        QSettings.setPath(fmt, QSettings.UserScope, str(folder))
    yield
    from memlens.core import units

    units.set_exact_bytes(False)  # a test that switched it leaves the next one as usual


@pytest.fixture
def settings_file(tmp_path):
    return tmp_path / "memlens-settings.ini"


@pytest.fixture
def window(qtbot, tmp_path, settings_file):
    from memlens.app.app_settings import AppSettings
    from memlens.app.window.main_window import MainWindow

    w = MainWindow(runs_dir=tmp_path / "runs", settings=AppSettings.at(settings_file))
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

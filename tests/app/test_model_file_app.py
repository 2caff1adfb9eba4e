"""A model file in the app: picked through "Model file…", remembered, loaded by the worker."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from memlens.app.panels.preset_field import CHOOSE_TEXT
from memlens.app.panels.run_panel import RunPanel
from memlens.app.recent_model_files import RecentModelFiles
from tests.app.drive import click

ROOT = Path(__file__).resolve().parents[2]
CNN = ROOT / "examples" / "cnn_classifier.py"

# A tiny model file that records which thread ran it.
WHERE = '''\
import threading
from pathlib import Path

import torch
from torch import nn

Path({marker!r}).write_text(str(threading.current_thread() is threading.main_thread()))
CONFIG = {{"batch_size": 8, "eval_every": 2}}


def build_model():
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


def make_batch(step, split):
    gen = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=gen), torch.randint(0, 3, (8,), generator=gen)
'''


class FakeDialog:
    """QFileDialog's static picker, answering as a user would (or cancelling)."""

    answer = ""
    asked = 0

    @classmethod
    def getOpenFileName(cls, parent, caption, folder, filters):
        cls.asked += 1
        return cls.answer, filters


def pick(qtbot, monkeypatch, panel_or_window, path) -> None:
    import memlens.app.panels.preset_field

    FakeDialog.answer, FakeDialog.asked = str(path) if path else "", 0
    monkeypatch.setattr(memlens.app.panels.preset_field, "QFileDialog", FakeDialog)
    panel = getattr(panel_or_window, "run_panel", panel_or_window)
    combo = panel.fields["preset"].widget
    combo.setCurrentIndex(combo.findText(CHOOSE_TEXT))  # the user picks the entry
    assert FakeDialog.asked == 1


def test_model_file_entry_opens_the_dialog_applies_config_and_remembers(qtbot, monkeypatch):
    panel = RunPanel()
    qtbot.addWidget(panel)
    panel.set_value("batch_size", 64)
    pick(qtbot, monkeypatch, panel, CNN)
    assert panel.fields["preset"].value() == str(CNN.resolve())
    assert panel.fields["preset"].widget.currentText() == "cnn_classifier.py"
    cfg = panel.config()
    assert (cfg.preset, cfg.batch_size, cfg.eval_every) == (str(CNN.resolve()), 16, 5)
    assert "settings from its CONFIG" in panel.state_label.text()
    assert RecentModelFiles().paths() == [str(CNN.resolve())]
    # A new panel (the next session) offers it among the presets.
    again = RunPanel()
    qtbot.addWidget(again)
    combo = again.fields["preset"].widget
    assert combo.findData(str(CNN.resolve())) >= 0
    combo.setCurrentIndex(combo.findData(str(CNN.resolve())))  # a recent file, no dialog
    assert again.config().batch_size == 16


def test_cancelling_the_dialog_keeps_the_preset_and_remembers_nothing(qtbot, monkeypatch):
    panel = RunPanel()
    qtbot.addWidget(panel)
    panel.fields["preset"].widget.setCurrentText("lstm")
    pick(qtbot, monkeypatch, panel, None)
    assert panel.fields["preset"].value() == "lstm"
    assert panel.fields["preset"].widget.currentText() == "lstm"
    assert RecentModelFiles().paths() == []


def test_a_model_file_runs_in_the_worker_with_exact_parameter_bytes(qtbot, monkeypatch,
                                                                     window, tmp_path):
    marker = tmp_path / "thread.txt"
    path = tmp_path / "where.py"
    path.write_text(WHERE.format(marker=str(marker)))
    pick(qtbot, monkeypatch, window, path)
    assert not marker.exists()  # choosing a file runs none of it
    window.run_panel.set_value("steps", 4)
    click(qtbot, window.run_panel.run_button)
    qtbot.waitUntil(lambda: not window.running, timeout=120_000)
    assert marker.read_text() == "False"  # loaded off the GUI thread
    history = window.history
    assert len(history.steps) == 4
    spec = importlib.util.spec_from_file_location("plain_where", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    params = sum(p.nbytes for p in mod.build_model().parameters())
    rows, idx = history.samples.rows(), history.samples.index
    assert np.all(rows[:, idx["params"]] == params)
    assert history.meta["config"]["preset"] == str(path.resolve())
    assert window.session.folder.name.endswith("-where")
    assert "memlens: where" in window.windowTitle()


def test_a_broken_model_file_is_explained_and_the_app_stays_up(qtbot, monkeypatch, window,
                                                               tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import torch\n\ndef build_model(:\n    pass\n")
    pick(qtbot, monkeypatch, window, path)
    click(qtbot, window.run_panel.run_button)
    qtbot.waitUntil(lambda: not window.running, timeout=120_000)
    assert window.error_banner.isVisible()
    assert f"{path}:3: syntax error" in window.error_banner.text()
    assert "Resume" not in window.error_banner.text()  # nothing to resume: it never started
    (event,) = [e for e in window.history.events() if e.kind == "error"]
    assert event.message.startswith(f"{path}:3: syntax error")
    assert "Traceback" not in event.explanation
    # The app goes on: a built-in preset starts and runs as before.
    window.run_panel.fields["preset"].widget.setCurrentText("mlp")
    window.run_panel.set_value("steps", 2)
    click(qtbot, window.run_panel.run_button)
    qtbot.waitUntil(lambda: not window.running, timeout=120_000)
    assert len(window.history.steps) == 2 and not window.error_banner.isVisible()

"""Opening a damaged run folder shows what is wrong in a dialog, the busy cursor always comes
back, and File > Export reports a failure instead of raising out of the slot."""

from __future__ import annotations

import json

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from memlens.core.runfolder.history_files import write_history
from tests.core.helpers import run


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good") / "run"
    history, _summary = run("mlp", steps=4)
    write_history(history, folder)
    return folder


def _config_is_text(folder):
    doc = json.loads((folder / "run.json").read_text())
    doc["config"] = "mlp"
    (folder / "run.json").write_text(json.dumps(doc))


def _deep(folder):
    (folder / "run.json").write_text('{"format": "memlens-run", "x": ' + "[" * 200_000
                                     + "]" * 200_000 + "}")


def _infinite_step(folder):
    lines = (folder / "steps.csv").read_text().splitlines()
    lines[1] = "inf" + lines[1][lines[1].index(","):]
    (folder / "steps.csv").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("damage,file", [(_config_is_text, "run.json"), (_deep, "run.json"),
                                         (_infinite_step, "steps.csv")])
def test_a_damaged_folder_is_a_dialog_naming_the_file(window, good_run, tmp_path, damage, file):
    import shutil

    folder = tmp_path / "damaged"
    shutil.copytree(good_run, folder)
    damage(folder)
    assert not window.open_run(folder)
    box = window.findChild(QMessageBox, "open_error")
    assert box is not None and box.isVisible() and file in box.text()
    assert QApplication.overrideCursor() is None
    assert window.isVisible()


def test_an_unexpected_failure_while_opening_still_restores_the_cursor(window, tmp_path,
                                                                       monkeypatch):
    import memlens.app.window.opening

    def broken(folder):
        raise KeyError("a reader's own bug")

    monkeypatch.setattr(memlens.app.window.opening, "load_run", broken)
    assert not window.open_run(tmp_path)
    assert QApplication.overrideCursor() is None
    box = window.findChild(QMessageBox, "open_error")
    assert box is not None and "KeyError" in box.text()


def test_export_that_fails_reading_the_run_is_a_message(window, good_run, tmp_path,
                                                        monkeypatch):
    import memlens.app.window.exporting

    assert window.open_run(good_run)

    def fails(*args, **kwargs):
        raise ValueError("a value does not fit its format")

    monkeypatch.setattr(memlens.app.window.exporting, "export_run", fails)
    assert window.export_to(tmp_path / "out", {"run files"}) == []
    box = window.findChild(QMessageBox, "export_message")
    assert box is not None and "does not fit" in box.text()

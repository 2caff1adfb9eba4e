"""Opening a damaged run folder or snapshot shows what is wrong in a dialog (a snapshot of
wrong types or sizes, run.json values of the wrong type), the busy cursor always comes back,
a huge string is cut before it reaches a label, and File > Export reports a failure instead
of raising out of the slot."""

from __future__ import annotations

import json
import pickle
import shutil

import pytest
from PySide6.QtWidgets import QApplication, QLabel, QMessageBox

from memlens.core.runfolder.history_files import write_history
from tests.core.helpers import run
from tests.core.test_snapshot_limits import SNAPSHOTS, write_snapshot


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


def _refused(window, path) -> QMessageBox:
    assert not window.opener.open_path(path)
    assert QApplication.overrideCursor() is None
    box = window.findChild(QMessageBox, "open_error")
    assert box is not None and box.isVisible()
    assert window.isVisible()
    return box


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_a_snapshot_of_wrong_types_or_sizes_is_a_dialog(window, tmp_path, name):
    path = write_snapshot(tmp_path, name)
    box = _refused(window, path)
    assert "snapshot.pickle" in box.text() and len(box.text()) < 600


def test_a_snapshot_of_sixty_thousand_categories_opens(window, tmp_path):
    from memlens.core.snapshot_file import MAX_CATEGORIES

    trace = [{"action": "alloc", "addr": 4096 * i, "size": 512, "category": f"c{i}"}
             for i in range(60_000)]
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps({"device_traces": [trace], "segments": []}))
    assert window.opener.open_path(path)
    assert QApplication.overrideCursor() is None
    view = window.opener.snapshot_view
    assert len(view.timeline.categories) == MAX_CATEGORIES + 1


@pytest.mark.parametrize("key,value", [("config.preset", 5),
                                       ("environment.memory_label", [1]),
                                       ("environment.device", {"a": 1})])
def test_run_json_values_of_the_wrong_type_are_a_dialog(window, good_run, tmp_path, key,
                                                        value):
    folder = tmp_path / "typed"
    shutil.copytree(good_run, folder)
    doc = json.loads((folder / "run.json").read_text())
    part, field = key.split(".")
    doc[part][field] = value
    (folder / "run.json").write_text(json.dumps(doc))
    box = _refused(window, folder)
    assert "run.json" in box.text() and key in box.text()


def test_a_fifty_megabyte_label_is_cut_before_it_is_shown(window, good_run, tmp_path):
    from memlens.core.runfolder.format import MAX_JSON_TEXT

    folder = tmp_path / "long"
    shutil.copytree(good_run, folder)
    doc = json.loads((folder / "run.json").read_text())
    doc["environment"]["memory_label"] = "m" * 50_000_000
    doc["events"].append({"step": 1, "time_s": 0.1, "kind": "error", "key": "k" * 50_000_000,
                          "message": "e" * 50_000_000})
    (folder / "run.json").write_text(json.dumps(doc))
    assert window.opener.open_path(folder)
    assert QApplication.overrideCursor() is None
    longest = max(len(label.text()) for label in window.findChildren(QLabel))
    assert longest <= 3 * MAX_JSON_TEXT  # a label may hold two cut values (key, message)
    assert any(label.text().startswith("m" * 100) for label in window.findChildren(QLabel))

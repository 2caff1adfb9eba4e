"""The third fault audit (#34) in the window: a damaged snapshot or run.json is a dialog with
the busy cursor back, a huge string is cut before it reaches a label, and a full disk under
`shot` is one line with no temporary file left."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication, QLabel, QMessageBox

from memlens.core.runfolder.history_files import write_history
from tests.core.helpers import run
from tests.core.test_faults_round3 import SNAPSHOTS, write_snapshot

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good") / "run"
    history, _summary = run("mlp", steps=3)
    write_history(history, folder)
    return folder


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


FULL_DISK = """
import errno, os, sys
import memlens.core.runfolder.atomic as atomic

def full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

atomic.os = type(sys)("os_full")
atomic.os.__dict__.update({k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
atomic.os.fsync = full
sys.path.insert(0, sys.argv[1])
import main
sys.exit(main.main(sys.argv[2:]))
"""


def test_shot_to_a_full_disk_is_one_line_and_leaves_no_temporary(tmp_path, good_run):
    out = tmp_path / "pictures" / "s.png"
    out.parent.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(ROOT), "shot", "--open", str(good_run),
         "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("memlens shot:")]
    assert len(lines) == 1 and "No space left on device" in lines[0]
    assert "libpng" not in proc.stderr
    assert list(out.parent.iterdir()) == []

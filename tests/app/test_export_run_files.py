"""File > Export's run files are the files the run streamed, copied byte for byte."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton

from memlens.core.runfolder.format import (
    ALLOCATIONS_NPY,
    FRAMES_JSONL,
    MEMORY_CSV,
    RUN_JSON,
    STEPS_CSV,
)
from tests.app.drive import choose, click

RUN_FILES = (STEPS_CSV, MEMORY_CSV, ALLOCATIONS_NPY, FRAMES_JSONL, RUN_JSON)


def test_export_of_a_finished_or_opened_run_copies_its_streamed_files(qtbot, window, tmp_path):
    choose(window, steps=3, precise=True)
    click(qtbot, window.findChild(QPushButton, "run_button"))
    qtbot.waitUntil(lambda: window.state == "finished", timeout=120_000)
    folder = window.session.folder
    written = window.export_to(tmp_path / "live", {"run files"})
    assert sorted(p.name for p in written) == sorted(RUN_FILES)
    for name in RUN_FILES:
        assert (tmp_path / "live" / name).read_bytes() == (folder / name).read_bytes(), name
    assert window.open_run(folder)
    window.export_to(tmp_path / "opened", {"run files"})
    for name in RUN_FILES:
        assert (tmp_path / "opened" / name).read_bytes() == (folder / name).read_bytes(), name

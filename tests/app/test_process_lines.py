"""The memory plot's process lines: RSS and the malloc heap beside the tensor bytes, as
memory.csv recorded them."""

from __future__ import annotations

import csv

import numpy as np
from PySide6.QtWidgets import QCheckBox

from memlens.app.timeline.memory_plot import Y_UNIT
from tests.app.drive import click, wait_frames
from tests.app.test_main_window import plot, run_to_end


def csv_column(path, name: str) -> np.ndarray:
    with open(path, newline="") as fh:
        return np.array([float(r[name]) if r[name] else np.nan for r in csv.DictReader(fh)])


def test_process_rss_and_heap_lines_hold_memory_csv_columns(qtbot, window):
    run_to_end(qtbot, window, steps=6)
    memory = plot(window, "memory_plot")
    box = window.findChild(QCheckBox, "process_memory_box")
    assert not memory.curves["rss"].isVisible()
    click(qtbot, box)
    assert box.isChecked()
    wait_frames(qtbot, window, 2)
    path = window.session.folder / "memory.csv"
    x_all = window.history.samples.column("x")
    for key, column in (("rss", "rss_bytes"), ("heap", "heap_bytes")):
        recorded = csv_column(path, column)
        read = np.isfinite(recorded)
        assert read.sum() == 1 + 6  # the run's start and each step's forward
        x, y = memory.curves[key].getData()
        assert memory.curves[key].isVisible()
        np.testing.assert_array_equal(x, x_all[read])
        np.testing.assert_allclose(y * Y_UNIT, recorded[read], rtol=1e-6)
    window.plots.refresh_legends()
    legend = memory.getPlotItem().titleLabel.text
    assert "process RSS" in legend and "malloc heap (CPU)" in legend
    click(qtbot, box)  # off again: hidden, and out of the y range
    assert not memory.curves["rss"].isVisible() and not memory.curves["heap"].isVisible()

"""A run folder with thousands of events opens in bounded work: every event is in the events
list, the timeline draws at most MAX_MARKERS markers a plot, and the labels it shows never
overlap (placed in the rows that fit)."""

from __future__ import annotations

import json

from PySide6.QtWidgets import QListWidget

from memlens.app.timeline.live_plot import MAX_MARKERS
from memlens.app.timeline.marker_labels import label_rows
from memlens.core.runfolder.history_files import write_history
from tests.core.helpers import run

EVENTS = 1000


def test_a_run_with_a_thousand_events_lists_them_all_and_draws_a_bounded_few(window,
                                                                             tmp_path):
    folder = tmp_path / "many"
    history, _ = run("mlp", steps=3)
    write_history(history, folder)
    doc = json.loads((folder / "run.json").read_text())
    doc["events"] = [{"step": i % 3, "time_s": 0.1, "kind": "info", "key": "note",
                      "message": f"event {i}"} for i in range(EVENTS)]
    (folder / "run.json").write_text(json.dumps(doc))
    assert window.opener.open_path(folder)
    listed = window.findChild(QListWidget, "events_list")
    assert listed.count() == EVENTS
    assert listed.item(EVENTS - 1).text().endswith(f"event {EVENTS - 1}")
    for plot in window.plots.plots:
        assert len(plot.markers) == MAX_MARKERS < EVENTS
        shown = [m.label.sceneBoundingRect() for m in plot.markers if m.label.isVisible()]
        assert shown and not any(a.intersects(b) for i, a in enumerate(shown)
                                 for b in shown[i + 1:])


def test_labels_past_the_rows_that_fit_get_no_row():
    spans = [(0.0, 10.0)] * 5 + [(100.0, 110.0)]  # five labels over one another, one apart
    assert label_rows(spans, max_rows=3) == [0, 1, 2, -1, -1, 0]
    assert label_rows(spans) == [0, 1, 2, 3, 4, 0]

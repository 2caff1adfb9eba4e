"""File > Follow run: the plots grow as another writer appends rows to a run folder."""

from __future__ import annotations

import pyqtgraph as pg

from memlens.core.runfolder.writer import RunWriter
from tests.core.test_run_follow import sample, step_record


def plot(window, name: str) -> pg.PlotWidget:
    return window.findChild(pg.PlotWidget, name)


def test_following_a_folder_shows_rows_as_they_are_written(qtbot, window, tmp_path):
    import os

    folder = tmp_path / "watched"
    w = RunWriter(folder)
    w.on_start({"source": "watch", "pid": os.getpid()})
    w.flush()
    assert window.follow_run(folder)
    assert window.following
    # another program's run: the panel's settings are not its own, and say so
    assert "new run" in window.run_panel.title()
    assert window.run_panel.state_label.text().endswith(": live")
    for i in range(3):
        for phase in ("zero_grad", "forward", "backward", "optimizer"):
            w.on_samples([sample(i, phase)])
        w.on_steps([(step_record(i), ())])
        w.flush()
        qtbot.waitUntil(lambda i=i: len(plot(window, "loss_plot").curves["loss"].getData()[0])
                        == i + 1, timeout=5000)
    _, loss = plot(window, "loss_plot").curves["loss"].getData()
    assert loss.tolist() == [1.0, 0.5, 0.25]
    x, _ = plot(window, "memory_plot").curves["total"].getData()
    assert len(x) == 12  # four phase samples a step
    assert window.history.samples.column("total")[-1] == sample(2, "optimizer").total
    w.on_finish({"steps_done": 3})
    qtbot.waitUntil(lambda: not window.following, timeout=5000)
    assert window.opening.followed.state == "finished"


def test_following_a_folder_that_is_not_a_run_says_why(qtbot, window, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr(window, "message", lambda title, text, *a: shown.append(text))
    not_a_folder = tmp_path / "notes.txt"  # one that does not exist yet is waited for
    not_a_folder.write_text("not a run")
    assert not window.follow_run(not_a_folder)
    assert shown and "not a folder" in shown[0]


def test_a_torchrun_parent_folder_shows_one_rank_chosen_in_the_status_bar(qtbot, window,
                                                                         tmp_path):
    """Following (or opening) DIR of a watched torchrun job: rank 0 first, the rank chooser
    lists every rank, and choosing one follows that rank's folder."""
    import dataclasses
    import os

    writers = []
    for rank in (0, 1):
        w = RunWriter(tmp_path / "job" / f"rank{rank}")
        w.on_start({"source": "watch", "pid": os.getpid(), "rank": rank, "world_size": 2})
        for i in range(2):
            w.on_samples([sample(i, "forward")])
            w.on_steps([(dataclasses.replace(step_record(i), loss=10.0 * rank + i), ())])
        w.flush()
        writers.append(w)
    loss = lambda: plot(window, "loss_plot").curves["loss"].getData()[1]  # noqa: E731

    assert window.follow_run(tmp_path / "job")
    chooser = window.rank_chooser
    assert chooser.isVisibleTo(window) and chooser.combo.count() == 2
    assert window.loaded_from == tmp_path / "job" / "rank0" and window.following
    qtbot.waitUntil(lambda: loss() is not None and loss().tolist() == [0.0, 1.0], timeout=5000)
    chooser.select(1)
    assert window.loaded_from == tmp_path / "job" / "rank1" and window.following
    qtbot.waitUntil(lambda: loss() is not None and loss().tolist() == [10.0, 11.0],
                    timeout=5000)
    assert chooser.isVisibleTo(window) and chooser.combo.count() == 2  # still offered
    for w in writers:
        w.on_finish({"steps_done": 2})
    assert window.open_run(tmp_path / "job")  # opened, not followed: the same choice
    assert window.loaded_from == tmp_path / "job" / "rank0" and not window.following
    chooser.select(1)
    assert window.loaded_from == tmp_path / "job" / "rank1"
    assert window.open_run(tmp_path / "job" / "rank0")  # an offered rank keeps the chooser
    assert chooser.isVisibleTo(window)
    single = tmp_path / "single"
    RunWriter(single).on_finish({})
    assert window.open_run(single)  # any other run: no ranks to choose
    assert not chooser.isVisibleTo(window)

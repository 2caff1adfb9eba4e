"""The Ranks tab: a torchrun job's folder opened and followed, driven as a user drives it;
its figures checked against the records written here and against the `ranks` command."""

from __future__ import annotations

import os
import statistics

import numpy as np
from PySide6.QtCore import Qt

import main as memlens_main
from memlens.app.timeline.memory_plot import Y_UNIT
from memlens.core.records import MEMORY_CATEGORIES, MemorySample, StepRecord
from memlens.core.runfolder.writer import RunWriter
from memlens.core.units import format_bytes, format_ms

PHASES = ("zero_grad", "forward", "backward", "optimizer")


def _sample(rank: int, step: int, k: int) -> MemorySample:
    """Rank r holds (r + 1) times rank 0's activations; the step's forward holds the most."""
    act = (rank + 1) * 1000 * (1 + step) if PHASES[k] == "forward" else 0
    return MemorySample(step, PHASES[k], step + k / 10, params=4096, grads=512 * k,
                        optimizer=256, activations=act, other=64 * rank)


def _step(rank: int, step: int) -> StepRecord:
    peak = max(_sample(rank, step, k).total for k in range(len(PHASES)))
    return StepRecord(step=step, time_s=step * 0.1, loss=1.0, grad_norm=0.5,
                      step_ms=_step_ms(rank, step), zero_grad_ms=1, forward_ms=4,
                      backward_ms=4, optimizer_ms=1, eval_ms=0, allocated_bytes=peak,
                      peak_bytes=peak, reserved_bytes=None, graph_nodes=7, saved_bytes=0,
                      retained_bytes=0)


def _step_ms(rank: int, step: int) -> float:
    return 20.0 + step if rank == 1 else 10.0 + 0.5 * step  # rank 1 is the slow one


def _writer(job, rank: int, world: int) -> RunWriter:
    w = RunWriter(job / f"rank{rank}")
    w.on_start({"source": "watch", "pid": os.getpid(), "rank": rank, "world_size": world,
                "host": f"node{rank // 2}", "node_rank": rank // 2, "local_rank": rank % 2})
    w.flush()
    return w


def _write_steps(w: RunWriter, rank: int, steps: range) -> None:
    for i in steps:
        for k in range(len(PHASES)):
            w.on_samples([_sample(rank, i, k)])
        w.on_steps([(_step(rank, i), ())])
    w.flush()


def _saved_job(tmp_path, world: int = 3, steps: int = 5):
    job = tmp_path / "job"
    for rank in range(world):
        w = _writer(job, rank, world)
        _write_steps(w, rank, range(steps))
        w.on_finish({"steps_done": steps})
    return job


def _table(window) -> list[list[str]]:
    t = window.ranks_tab.table
    return [[t.item(i, j).text() for j in range(t.columnCount())] for i in range(t.rowCount())]


def test_a_jobs_folder_opens_every_rank_on_one_view_with_the_clis_figures(qtbot, window,
                                                                          tmp_path, capsys):
    world, steps = 3, 5
    job = _saved_job(tmp_path, world, steps)
    assert window.ranks_tab is None  # made only for a job's folder
    assert window.open_run(job)
    tab = window.ranks_tab
    qtbot.waitUntil(lambda: tab.table.rowCount() == world, timeout=5000)
    assert window.tabs.currentWidget() is tab
    rows = _table(window)
    assert len(rows) == world
    header = [tab.table.horizontalHeaderItem(j).text() for j in range(tab.table.columnCount())]
    for rank, row in enumerate(rows):
        cell = dict(zip(header, row, strict=True))
        ms = [_step_ms(rank, i) for i in range(steps)]
        peak = max(_sample(rank, i, k).total for i in range(steps) for k in range(4))
        assert cell["rank"] == str(rank) and cell["steps"] == str(steps)
        assert (cell["host"], cell["node"], cell["local"]) == (
            f"node{rank // 2}", str(rank // 2), str(rank % 2))
        assert cell["peak"] == format_bytes(peak)
        assert cell["mean step"] == format_ms(statistics.fmean(ms))
        assert cell["p95 step"] == format_ms(statistics.quantiles(ms, n=20,
                                                                  method="inclusive")[18])
        # The peak is the last step's forward: its activations at the peak.
        assert cell["activations at peak"] == format_bytes((rank + 1) * 1000 * steps)
    notes = [row[-1] for row in rows]
    assert notes == ["", "slowest", "largest"]
    assert tab.table.item(2, 0).font().bold() and not tab.table.item(0, 0).font().bold()
    # The same figures as the `ranks` command prints, row for row.
    assert memlens_main.main(["ranks", str(job)]) == 0
    printed = capsys.readouterr().out.splitlines()
    for row, line in zip(rows, printed[1:1 + world], strict=True):
        assert [t for c in row for t in c.split()] == line.split()
    assert printed[-1] == tab.summary.text()

    # A line per rank, on the same axes: each rank's totals as written.
    for rank in range(world):
        _x, y = tab.plots.totals[rank].getData()
        written = [_sample(rank, i, k).total for i in range(steps) for k in range(4)]
        assert np.allclose(y * Y_UNIT, written)
        _x, peaks = tab.plots.peaks[rank].getData()
        assert np.allclose(peaks * Y_UNIT, [_step(rank, i).peak_bytes for i in range(steps)])
    # The stacked categories: the largest rank first; choosing rank 0 stacks rank 0's.
    assert tab.rank_combo.currentData() == 2
    tab.rank_combo.setCurrentIndex(tab.rank_combo.findData(0))
    _x, top = tab.plots.area.layer_data(len(MEMORY_CATEGORIES) - 1)
    assert np.allclose(top * Y_UNIT, [_sample(0, i, k).total for i in range(steps)
                                      for k in range(4)])
    _x, params = tab.plots.area.layer_data(0)
    assert np.allclose(params * Y_UNIT, 4096)

    # Small multiples: a plot per rank, each stacking its own rank.
    qtbot.mouseClick(tab.multiples_box, Qt.LeftButton)
    assert tab.multiples_box.isChecked() and tab.plots.currentWidget() is tab.plots.multiples
    assert sorted(tab.plots.multiple_plots) == list(range(world))
    for rank in range(world):
        plot = tab.plots.multiple_plots[rank]
        assert plot.isVisibleTo(window)
        area, _total = tab.plots._multiple_items[rank]
        _x, top = area.layer_data(len(MEMORY_CATEGORIES) - 1)
        assert np.allclose(top * Y_UNIT, [_sample(rank, i, k).total for i in range(steps)
                                          for k in range(4)])
    assert not tab.rank_combo.isEnabled()

    single = tmp_path / "single"
    RunWriter(single).on_finish({})
    assert window.open_run(single)  # a plain run: the Ranks tab goes
    assert not window.tabs.isTabVisible(window.tabs.indexOf(tab))


def test_following_a_job_shows_each_ranks_new_steps_and_a_rank_that_starts_late(
        qtbot, window, tmp_path):
    job = tmp_path / "job"
    world = 3
    writers = {rank: _writer(job, rank, world) for rank in (0, 1)}
    _write_steps(writers[0], 0, range(2))
    assert window.follow_run(job)
    tab = window.ranks_tab
    assert window.tabs.currentWidget() is tab and tab.job.active
    qtbot.waitUntil(lambda: [r[4] for r in _table(window)] == ["2", "0"], timeout=5000)
    _write_steps(writers[1], 1, range(3))
    qtbot.waitUntil(lambda: [r[4] for r in _table(window)] == ["2", "3"], timeout=5000)
    _x, y = tab.plots.totals[1].getData()
    assert len(y) == 3 * len(PHASES)
    writers[2] = _writer(job, 2, world)  # the last rank starts late
    _write_steps(writers[2], 2, range(1))
    qtbot.waitUntil(lambda: len(_table(window)) == 3 and _table(window)[2][4] == "1",
                    timeout=5000)
    assert all("running" in row[-1] for row in _table(window))
    for w in writers.values():
        w.on_finish({"steps_done": 1})
    qtbot.waitUntil(lambda: not tab.job.active, timeout=5000)
    assert not any("running" in row[-1] for row in _table(window))


def test_shot_open_of_a_job_folder_renders_the_ranks_tab(qtbot, tmp_path, monkeypatch):
    from memlens.app import shot

    world = 4
    job = _saved_job(tmp_path, world, 3)
    made = []
    window_of = shot._window
    monkeypatch.setattr(shot, "_window", lambda *a, **k: made.append(window_of(*a, **k))
                        or made[-1])
    out = tmp_path / "ranks.png"
    assert shot.shoot_opened(str(job), out, (1480, 920), "timeline", "light") == 0
    assert out.stat().st_size > 0 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (w,) = made
    assert w.tabs.currentWidget() is w.ranks_tab
    assert w.ranks_tab.table.rowCount() == world


def test_a_long_ranks_lines_are_cut_to_bins_that_keep_every_peak(tmp_path):
    from memlens.app.series.rank_series import rank_lines
    from memlens.core.runfolder.reader import load_run

    steps = 600
    job = _saved_job(tmp_path, 1, steps)
    lines = rank_lines(load_run(job / "rank0"), max_points=100)
    written = [_sample(0, i, k).total for i in range(steps) for k in range(4)]
    assert len(lines.x) <= 200 < len(written)
    assert lines.total.max() == max(written) and lines.layers[-1].max() == max(written)
    assert np.all(np.diff(lines.x) >= 0)

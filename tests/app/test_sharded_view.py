"""A sharded job in the app (issue #44): the Ranks tab shows each rank's shard, its padding
and FSDP's all-gather peak side by side, names the uneven shard, stacks the gathered
parameters as a band of their own; the rows table names what the new columns hold. Driven
as a user would, checked on the figures written here."""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction

from memlens.core.records import CATEGORY_HELP, MEMORY_CATEGORIES, MemorySample, StepRecord
from memlens.core.runfolder.writer import RunWriter
from memlens.core.units import format_bytes

PARAMS = {0: 5372, 1: 5372}  # each rank's shard storage, padded to one size
SHARD = {0: 5372, 1: 4928}  # 33 rows over 2 ranks: 17 and 16, without the padding
GATHERED = {0: 6120, 1: 6120}  # a block's full parameters, while gathered
OPTIMIZER = {0: 10776, 1: 9888}  # AdamW's moments: the shards, unpadded


def _sharding(rank: int) -> dict:
    return {"kind": "fsdp2", "rank": rank, "world_size": 2, "parameters": 8, "groups": 3,
            "full_bytes": 10300, "shard_bytes": SHARD[rank], "padded_bytes": PARAMS[rank],
            "uneven": 8, "uneven_params": [
                {"name": "inp.weight", "shape": [33, 8], "dim": 0, "rows": 17 - rank,
                 "padded_rows": 17}]}


def _samples(rank: int, step: int) -> list[MemorySample]:
    """A forward that gathers a block and frees it, a backward, the optimizer's step."""
    opt = OPTIMIZER[rank] if step else 0
    rows = [("forward", 512, GATHERED[rank], 0), ("forward", 4736, 0, 0),
            ("backward", 4736, GATHERED[rank], 136), ("backward", 0, 0, PARAMS[rank]),
            ("optimizer", 0, 0, PARAMS[rank])]
    return [MemorySample(step, phase, step + k / 10, PARAMS[rank], grads,
                         OPTIMIZER[rank] if phase == "optimizer" else opt, act, 0,
                         gathered=gathered)
            for k, (phase, act, gathered, grads) in enumerate(rows)]


def _job(tmp_path, steps: int = 3):
    job = tmp_path / "fsdp_job"
    for rank in (0, 1):
        w = RunWriter(job / f"rank{rank}")
        w.on_start({"source": "watch", "pid": os.getpid(), "rank": rank, "world_size": 2,
                    "host": "node0", "node_rank": 0, "local_rank": rank,
                    "sharding": _sharding(rank)})
        for step in range(steps):
            samples = _samples(rank, step)
            peak = max(s.total for s in samples)
            w.on_steps([(StepRecord(step, step + 0.5, 1.0, 0.5, 10.0 + rank, 1, 4, 4, 1, 0,
                                    peak, peak, None, 7, 4736, 0), samples)])
        w.on_finish({"steps_done": steps})
    return job


def test_the_ranks_tab_shows_each_ranks_shard_padding_and_all_gather_peak(qtbot, window,
                                                                          tmp_path):
    job = _job(tmp_path)
    assert window.open_run(job)
    tab = window.ranks_tab
    qtbot.waitUntil(lambda: tab.table.rowCount() == 2, timeout=5000)
    t = tab.table
    header = [t.horizontalHeaderItem(j).text() for j in range(t.columnCount())]
    assert header[-4:] == ["shard", "padding", "gathered peak", "note"]
    for rank in (0, 1):
        cell = dict(zip(header, (t.item(rank, j).text() for j in range(len(header))),
                        strict=True))
        assert cell["shard"] == format_bytes(SHARD[rank])
        assert cell["padding"] == format_bytes(PARAMS[rank] - SHARD[rank])
        assert cell["gathered peak"] == format_bytes(GATHERED[rank])
    # the line under the imbalance: the all-gather peak per rank, the uneven shard named
    line = tab.sharding.text()
    assert tab.sharding.isVisibleTo(window)
    assert line.startswith("FSDP2 (fully_shard): all-gather peak rank 0 "
                           f"{format_bytes(GATHERED[0])}, rank 1 {format_bytes(GATHERED[1])}")
    assert "inp.weight [33, 8]: 17 | 16 rows" in line
    assert f"rank 0's shard holds {format_bytes(SHARD[0] - SHARD[1])} more" in line
    assert f"optimizer state (unpadded) rank 0 {OPTIMIZER[0] / OPTIMIZER[1]:.2f}x" in line
    # the gathered parameters: a band of their own in the stacked categories, as written
    tab.rank_combo.setCurrentIndex(tab.rank_combo.findData(1))
    assert "gathered" in tab.plots.stack.plotItem.titleLabel.text
    i = MEMORY_CATEGORIES.index("gathered")
    _x, top = tab.plots.area.layer_data(i)
    _x, below = tab.plots.area.layer_data(i - 1)
    written = [s.gathered for step in range(3) for s in _samples(1, step)]
    assert [round((a - b) * 2**20) for a, b in zip(top, below, strict=True)] == written


def test_a_job_without_sharding_has_no_sharding_line(qtbot, window, tmp_path):
    job = tmp_path / "plain_job"
    for rank in (0, 1):
        w = RunWriter(job / f"rank{rank}")
        w.on_start({"source": "watch", "rank": rank, "world_size": 2})
        w.on_samples([MemorySample(0, "forward", 0.1, 100, 0, 0, 10, 0)])
        w.on_finish({})
    assert window.open_run(job)
    qtbot.waitUntil(lambda: window.ranks_tab.table.rowCount() == 2, timeout=5000)
    assert not window.ranks_tab.sharding.isVisibleTo(window)
    header = [window.ranks_tab.table.horizontalHeaderItem(j).text()
              for j in range(window.ranks_tab.table.columnCount())]
    assert "shard" not in header and "gathered peak" not in header


def test_the_rows_table_holds_the_new_columns_and_says_what_they_hold(qtbot, window,
                                                                     tmp_path):
    job = _job(tmp_path, steps=1)
    assert window.open_run(job / "rank1")
    window.findChild(QAction, "rows_action").trigger()
    dialog = window.view_actions.rows_dialog
    model = dialog.models["memory"]
    qtbot.waitUntil(lambda: model.rowCount() == 5, timeout=5000)
    names = [model.headerData(j, Qt.Horizontal) for j in range(model.columnCount())]
    for category in ("gathered", "buckets"):
        j = names.index(f"{category}_bytes")
        assert model.headerData(j, Qt.Horizontal, Qt.ToolTipRole) == CATEGORY_HELP[category]
    j = names.index("gathered_bytes")
    assert [model.cell(r, j) for r in range(5)] == [str(s.gathered) for s in _samples(1, 0)]

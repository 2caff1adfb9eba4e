"""memory_timeline.json: export_memory_timeline's [times, sizes] layout, with our numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memlens.core.exports._allocs import allocation_events
from memlens.core.exports.memory_timeline import (
    COLUMN,
    OURS_TO_PROFILER,
    PROFILER_CATEGORIES,
    thin,
    timeline_rows,
    write_memory_timeline,
)
from memlens.core.records import MEMORY_CATEGORIES
from tests.core.export_histories import small_history, tiled_history
from tests.core.helpers import run


def load(path):
    return json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c))


def replay(history) -> tuple[list[int], list[list[int]]]:
    """The profiler's coalescing, event by event in plain Python: a new row when the time
    changes, every storage counted in the category it was allocated as."""
    rows = history.allocs.rows()
    idx = history.allocs.index
    owner: dict[int, int] = {}
    state = [0] * (1 + len(PROFILER_CATEGORIES))
    times: list[int] = []
    sizes: list[list[int]] = []
    for r in rows:
        nbytes = int(r[idx["bytes"]])
        if nbytes <= 0:
            continue
        sid, t = int(r[idx["storage"]]), int(r[idx["t_us"]])
        if r[idx["action"]] == 0:
            owner[sid] = int(r[idx["category"]])
            cat, delta = owner[sid], nbytes
        else:
            cat, delta = owner.pop(sid, int(r[idx["category"]])), -nbytes
        if not times or times[-1] != t:
            times.append(t)
            sizes.append(list(state))
        col = 1 + PROFILER_CATEGORIES.index(OURS_TO_PROFILER[MEMORY_CATEGORIES[cat]])
        state[col] += delta
        sizes[-1] = list(state)
    return times, sizes


def test_category_order_is_the_installed_profilers():
    import torch.profiler._memory_profiler as mp

    names = ["unknown" if c is None else c.name.lower() for c in mp._CATEGORY_TO_COLORS]
    assert tuple(names) == PROFILER_CATEGORIES
    for ours, column in zip(MEMORY_CATEGORIES, COLUMN, strict=True):
        profiler_category = next(c for c in mp._CATEGORY_TO_INDEX
                                 if ("unknown" if c is None else c.name.lower())
                                 == OURS_TO_PROFILER[ours])
        assert column == mp._CATEGORY_TO_INDEX[profiler_category] + 1  # row[0] is the 0


def test_layout_and_values_of_a_hand_built_precise_run(tmp_path):
    history, peak = small_history()
    write_memory_timeline(history, tmp_path / "t.json")
    times, sizes = load(tmp_path / "t.json")
    assert [times, sizes] == list(replay(history))
    assert all(type(t) is int for t in times) and times == sorted(times)
    assert all(len(row) == 9 and row[0] == 0 for row in sizes)
    assert max(sum(row) for row in sizes) == peak
    # the two frees at the same microsecond are one row, after both
    i = times.index(10_500)
    assert times.count(10_500) == 1
    assert sizes[i][1 + PROFILER_CATEGORIES.index("activation")] == 0
    # what the profiler's own HTML plot does with it
    stacked = np.cumsum(np.array(sizes), axis=1)
    assert stacked[:, -1].max() == peak


def test_real_precise_run_matches_the_event_replay_and_its_peak(tmp_path):
    history, summary = run("mlp", steps=4, precise=True)
    write_memory_timeline(history, tmp_path / "t.json")
    times, sizes = load(tmp_path / "t.json")
    assert [times, sizes] == list(replay(history))
    assert max(sum(r) for r in sizes) == summary.peak_bytes
    # the sizes at a phase boundary agree with the sample taken there, category by category
    t_forward = history.samples.rows()[2]  # step 0's forward sample
    idx = history.samples.index
    at = np.searchsorted(times, t_forward[idx["time_s"]] * 1e6, side="right") - 1
    row = sizes[at]
    assert row[1 + PROFILER_CATEGORIES.index("parameter")] == t_forward[idx["params"]]


def test_run_without_precise_mode_uses_its_samples(tmp_path):
    history, _ = run("mlp", steps=3)
    assert len(history.allocs) == 0
    write_memory_timeline(history, tmp_path / "t.json")
    times, sizes = load(tmp_path / "t.json")
    rows = history.samples.rows()
    idx = history.samples.index
    assert times == [round(r[idx["time_s"]] * 1e6) for r in rows]
    for row, r in zip(sizes, rows, strict=True):
        expected = [0] * len(row)  # two of ours may share a column (other, buffers: unknown)
        for ours, column in zip(MEMORY_CATEGORIES, COLUMN, strict=True):
            expected[column] += r[idx[ours]]
        assert row == expected
        assert sum(row) == r[idx["total"]]


def test_long_runs_are_thinned_keeping_peaks_and_the_end(tmp_path):
    real, _ = run("mlp", steps=8, precise=True)
    history = tiled_history(real, 300)
    full = timeline_rows(history, max_rows=0)
    thinned = write_memory_timeline(history, tmp_path / "t.json", max_rows=1000)
    times, sizes = load(tmp_path / "t.json")
    assert len(times) == len(thinned.times) <= 1000 < len(full.times)
    assert thinned.rows_before_thinning == len(full.times)
    totals = np.array(sizes).sum(axis=1)
    full_totals = full.sizes.sum(axis=1)
    assert totals.max() == full_totals.max() == allocation_events(history).peak_bytes()
    assert sizes[-1] == full.sizes[-1].tolist() and times[-1] == full.times[-1]
    # every kept row is a state that occurred, at its time
    where = np.searchsorted(full.times, times)
    assert (full.times[where] == times).all()
    assert (full.sizes[where] == np.array(sizes)).all()


def test_thin_picks_each_stretchs_peak_and_last():
    total = np.array([1, 5, 2, 2, 9, 3, 4, 4, 1, 0])
    kept = thin(total, max_rows=4)  # two stretches: rows 0-4 and 5-9
    assert kept.tolist() == [4, 6, 9]  # peak 9 is also stretch one's last; peak 4 first seen
    assert thin(total, max_rows=100).tolist() == list(range(10))

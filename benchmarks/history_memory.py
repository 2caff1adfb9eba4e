"""Figure 3: what a run's history costs in memory, per phase sample and per step, as stored.

A RunHistory is filled with 1,000,000 phase samples (and their 250,000 step records, four
phases a step) through its sink methods, exactly as the loop fills it; the tables' bytes
are read back (allocated capacity: each table's last block is only partly filled) and
checked against the process's own growth. The app's plot data for the same run (RunSeries,
per-bin peaks beside the history) is measured too: the window holds both.
"""

from __future__ import annotations

import gc
import time

from benchmarks._common import Figure, Settings

SAMPLES = 1_000_000
PHASES_PER_STEP = 4  # zero_grad, forward, backward, optimizer (eval steps add a fifth)
LIMIT_BYTES = 150e6


def _rss() -> int:
    """Resident set size of this process, in bytes (Linux), or 0 where unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")


def _fill_fast(history, steps: int) -> None:
    """The same rows, appended as numpy blocks (quick mode: the bytes come out the same,
    since both ways fill the same fixed-size blocks)."""
    import numpy as np

    _fill(history, 1)
    sample = np.asarray(history.samples.rows(1, 2)[0])
    step = np.asarray(history.steps.rows(0, 1)[0])
    history.samples.extend(np.tile(sample, (PHASES_PER_STEP * (steps - 1), 1)))
    history.steps.extend(np.tile(step, (steps - 1, 1)))


def _fill(history, steps: int) -> float:
    """Fill through on_sample / on_step with plain records; returns seconds taken."""
    from core.records import MemorySample, StepRecord

    phases = ("zero_grad", "forward", "backward", "optimizer")[:PHASES_PER_STEP]
    history.on_start({"config": {}, "environment": {}})
    history.on_sample(MemorySample(0, "start", 0.0, 1 << 20, 0, 0, 0, 4096))
    t0 = time.perf_counter()
    for step in range(steps):
        t = step * 1e-3
        for i, phase in enumerate(phases):
            history.on_sample(MemorySample(step, phase, t + i * 1e-4, 1 << 20, 1 << 20,
                                           2 << 20, (i == 1) << 22, 4096, None, None,
                                           50_000_000 + step))
        history.on_step(StepRecord(step, t, 1.0, 0.5, 3.5, 0.1, 1.0, 2.0, 0.4, 0.0,
                                   4 << 20, 9 << 20, None, 12, 1 << 22, 0))
    return time.perf_counter() - t0


def run(s: Settings) -> list[Figure]:
    from core.history import RunHistory

    steps = SAMPLES // PHASES_PER_STEP
    gc.collect()
    rss0 = _rss()
    history = RunHistory()
    if s.quick:
        _fill_fast(history, steps)
    else:
        fill_s = _fill(history, steps)
    gc.collect()
    rss1 = _rss()
    if s.quick:  # the append rate from a shorter fill of its own
        probe = RunHistory()
        fill_s = _fill(probe, 12_500) * steps / 12_500
    n_samples, n_steps = len(history.samples), len(history.steps)
    sample_row = history.samples.itemsize * len(history.samples.columns)
    step_row = history.steps.itemsize * len(history.steps.columns)
    stored = history.samples.nbytes + history.steps.nbytes + history.allocs.nbytes
    rows_per_s = (n_samples + n_steps) / fill_s

    from app.run_series import RunSeries  # no Qt in it: plain numpy

    series = RunSeries(history)
    series.pull()
    for table in (series.samples, series.steps):  # every level, as a whole-run view makes
        for pyramid in table.pyramids.values():
            pyramid.complete()
    series_bytes = series.nbytes
    return [
        Figure("history_bytes_per_sample", "bytes per phase sample (row, as stored)",
               sample_row, "B/row", note=f"{len(history.samples.columns)} float64 columns"),
        Figure("history_bytes_per_step", "bytes per step record (row, as stored)",
               step_row, "B/row", note=f"{len(history.steps.columns)} float64 columns"),
        Figure("history_bytes_1m_samples", "history with 1M samples (as stored)", stored,
               "B", LIMIT_BYTES,
               note=f"{n_samples:,} samples + {n_steps:,} steps; allocated capacity"),
        Figure("history_rss_growth_1m_samples", "process growth filling it (context)",
               rss1 - rss0, "B", note="resident set, after gc"),
        Figure("history_app_series_bytes", "app plot copy (RunSeries) of it (context)",
               series_bytes, "B", note="per-bin peaks (float32) at every power-of-two "
               "bin size, bin starts (float64); no full-resolution copy"),
        # The target is on the history as stored (the figure's definition); the window's own
        # copy comes on top, so say plainly whether the two together still fit.
        Figure("history_app_total_bytes_1m_samples", "history + app plot copy (context)",
               stored + series_bytes, "B",
               note="what the window holds for that run; "
                    + ("within" if stored + series_bytes <= LIMIT_BYTES else "OVER")
                    + f" the {LIMIT_BYTES / 1e6:.0f} MB budget"),
        Figure("history_append_rows_per_s", "sink appends (samples + steps) (context)",
               rows_per_s, "rows/s", note="MemorySample/StepRecord -> on_sample/on_step"),
    ]

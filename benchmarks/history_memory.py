"""Figure 3: what a run's history costs in memory, per row, and for a long run as held.

A RunHistory is filled through its sink methods, exactly as the loop fills it (quick: the
same rows appended in blocks), for a 1,000,000-step light run (four phase samples a step)
and a 100,000-step precise run (ALLOCS_PER_STEP storage events a step besides). The history
keeps its newest blocks in memory and moves older rows to a spill file on disk, so the
figures are the bytes it holds in memory, checked against the process's own growth, plus
the app's plot data for the same run (RunSeries, per-bin peaks): the window holds both.
"""

from __future__ import annotations

import gc
import time

from benchmarks._common import Figure, Settings

LIGHT_STEPS = 1_000_000
PRECISE_STEPS = 100_000
PHASES_PER_STEP = 4  # zero_grad, forward, backward, optimizer (eval steps add a fifth)
ALLOCS_PER_STEP = 200  # alloc + free events of a precise mlp step (docs/benchmarks.md)
# The stated bounds: what the history and the window's plot data hold for each run, at any
# length up to these (the plot data grows by about 2/16 of the rows; the history does not).
LIGHT_BOUND_BYTES = 64e6
PRECISE_BOUND_BYTES = 32e6
FILL_CHUNK = 65_536  # rows a quick fill appends at a time (never the whole run at once)

def _rss() -> int:
    """Resident set size of this process, in bytes (Linux), or 0 where unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")


def _fill_fast(history, steps: int, allocs_per_step: int = 0) -> None:
    """The same rows, appended as numpy blocks a chunk at a time (quick mode: the bytes held
    come out the same, since both ways fill the same fixed-size blocks)."""
    import numpy as np

    _fill(history, 1, allocs_per_step)
    for table, n in ((history.samples, PHASES_PER_STEP * (steps - 1)),
                     (history.steps, steps - 1), (history.allocs, allocs_per_step * (steps - 1))):
        if not n:
            continue
        row = np.asarray(table.rows(len(table) - 1)[0])
        chunk = np.tile(row, (min(FILL_CHUNK, n), 1))
        for done in range(0, n, FILL_CHUNK):
            table.extend(chunk[: min(FILL_CHUNK, n - done)])


def _fill(history, steps: int, allocs_per_step: int = 0) -> float:
    """Fill through add_sample / add_step (and on_allocations) with plain records; returns
    seconds taken."""
    import numpy as np

    from memlens.core.records import AllocBlock, MemorySample, StepRecord

    phases = ("zero_grad", "forward", "backward", "optimizer")[:PHASES_PER_STEP]
    history.on_start({"config": {}, "environment": {}})
    history.add_sample(MemorySample(0, "start", 0.0, 1 << 20, 0, 0, 0, 4096))
    allocs = np.zeros((allocs_per_step, 9))
    allocs[:, 1] = np.arange(allocs_per_step) % 2  # alloc, free, alloc, ...
    allocs[:, 4] = 4096
    t0 = time.perf_counter()
    for step in range(steps):
        t = step * 1e-3
        for i, phase in enumerate(phases):
            history.add_sample(MemorySample(step, phase, t + i * 1e-4, 1 << 20, 1 << 20,
                                           2 << 20, (i == 1) << 22, 4096, None, None,
                                           50_000_000 + step))
        if allocs_per_step:
            allocs[:, 6] = step
            history.on_allocations(AllocBlock(allocs, ["model.py:12:forward"]))
        history.add_step(StepRecord(step, t, 1.0, 0.5, 3.5, 0.1, 1.0, 2.0, 0.4, 0.0,
                                   4 << 20, 9 << 20, None, 12, 1 << 22, 0))
    return time.perf_counter() - t0


def _held(s: Settings, steps: int, allocs_per_step: int) -> dict:
    """Fill a history for `steps` and measure what it and the window's plot data hold."""
    import tempfile

    from memlens.core.history import RunHistory

    gc.collect()
    rss0 = _rss()
    with tempfile.TemporaryDirectory(prefix="memlens-bench-") as spill_dir:
        history = RunHistory(spill_dir=spill_dir)
        fill_s = float("nan")
        if s.quick:
            _fill_fast(history, steps, allocs_per_step)
        else:
            fill_s = _fill(history, steps, allocs_per_step)
        gc.collect()
        rss1 = _rss()
        held = history.samples.nbytes + history.steps.nbytes + history.allocs.nbytes
        rows = len(history.samples) + len(history.steps) + len(history.allocs)
        series_bytes = _series_bytes(history)
        out = {"history": held, "series": series_bytes, "rss": rss1 - rss0, "fill_s": fill_s,
               "rows": rows, "spilled": history.spill.nbytes,
               "per_sample": history.samples.itemsize * len(history.samples.columns),
               "per_step": history.steps.itemsize * len(history.steps.columns),
               "per_alloc": history.allocs.itemsize * len(history.allocs.columns)}
        history.spill.close()
    return out


def _series_bytes(history) -> float:
    from memlens.app.series.run_series import RunSeries  # no Qt in it: plain numpy

    series = RunSeries(history)
    series.pull()
    for table in (series.samples, series.steps):  # every level, as a whole-run view makes
        for pyramid in table.pyramids.values():
            pyramid.complete()
    return series.nbytes


def run(s: Settings) -> list[Figure]:
    light = _held(s, LIGHT_STEPS, 0)
    precise = _held(s, PRECISE_STEPS, ALLOCS_PER_STEP)
    probe_steps = 12_500
    if s.quick:  # the append rate from a shorter fill of its own
        from memlens.core.history import RunHistory

        probe = RunHistory()
        light["fill_s"] = _fill(probe, probe_steps) * LIGHT_STEPS / probe_steps
    rows_per_s = LIGHT_STEPS * (PHASES_PER_STEP + 1) / light["fill_s"]
    figures = [
        Figure("history_bytes_per_sample", "bytes per phase sample (row, as stored)",
               light["per_sample"], "B/row", note="float64 columns"),
        Figure("history_bytes_per_step", "bytes per step record (row, as stored)",
               light["per_step"], "B/row", note="float64 columns"),
        Figure("history_bytes_per_alloc", "bytes per allocation event (row, as stored)",
               light["per_alloc"], "B/row", note="precise mode"),
    ]
    for key, run_, steps, bound in (("light_1m_steps", light, LIGHT_STEPS, LIGHT_BOUND_BYTES),
                                    ("precise_100k_steps", precise, PRECISE_STEPS,
                                     PRECISE_BOUND_BYTES)):
        total = run_["history"] + run_["series"]
        what = f"{steps:,}-step {key.split('_')[0]} run"
        figures += [
            Figure(f"history_held_{key}", f"{what}: history + plot data held", total, "B",
                   bound, note=f"history {run_['history'] / 1e6:.1f} MB in memory of "
                   f"{run_['rows']:,} rows, plot data {run_['series'] / 1e6:.1f} MB; "
                   f"{run_['spilled'] / 1e6:.0f} MB on disk"),
            Figure(f"history_rss_growth_{key}", f"{what}: process growth (context)",
                   run_["rss"], "B", note="resident set after the fill, before the plot data; "
                   "the spill file is not in it"),
        ]
    figures.append(Figure("history_append_rows_per_s", "sink appends (samples + steps) "
                          "(context)", rows_per_s, "rows/s",
                          note="MemorySample/StepRecord -> add_sample/add_step"))
    return figures

"""The process's resident memory (RSS) recorded beside the heap, after a step's forward at
most every HEAP_EVERY_S (every step where asked: a lesson), read back from memory.csv, and
old folders without the column still open."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest

from memlens.core.recorder.heap import process_rss_bytes
from memlens.core.runfolder.follow import RunFollower
from memlens.core.runfolder.reader import load_run
from memlens.core.runfolder.writer import RunWriter
from memlens.core.sinks import Sink
from tests.core.helpers import run, samples_at

BLOCK = 256 * 2**20  # bytes of the array a test allocates (and touches) between samples
linux_only = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="no /proc")


def statm_rss() -> int:
    """An independent read of the resident memory: resident pages times the page size."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@linux_only
def test_rss_is_statm_resident_pages_and_grows_by_a_touched_allocation():
    before = statm_rss()
    got = process_rss_bytes()
    after = statm_rss()
    assert min(before, after) - 2**20 <= got <= max(before, after) + 2**20
    block = np.ones(BLOCK // 8)  # every page written: resident
    grown = process_rss_bytes()
    assert grown - got >= 0.95 * BLOCK
    assert abs(grown - statm_rss()) <= 2**20
    del block


class AllocateAfterStep(Sink):
    """A sink that allocates BLOCK bytes (and keeps them) when step `at` is recorded: the
    next step's forward sample must show the process that much bigger."""

    def __init__(self, at: int) -> None:
        self.at, self.block, self.rss_around = at, None, None

    def on_steps(self, rows) -> None:
        if any(record.step == self.at for record, _ in rows):
            before = statm_rss()
            self.block = np.ones(BLOCK // 8)
            self.rss_around = (before, statm_rss())


@linux_only
def test_a_run_records_rss_where_it_reads_the_heap_and_sees_an_allocation_between_steps():
    sink = AllocateAfterStep(at=2)
    history, _ = run("mlp", steps=5, sink=sink, heap_every_s=0.0)  # every step (a lesson's)
    table = history.samples
    rss, heap = table.column("rss"), table.column("heap")
    # The same cadence as the heap: at start and after each forward, never elsewhere.
    np.testing.assert_array_equal(np.isfinite(rss), np.isfinite(heap))
    forward = samples_at(history, "forward", "rss")
    assert len(forward) == 5 and np.isfinite(forward).all()
    assert forward[3] - forward[2] >= 0.95 * BLOCK  # the block came between the two
    # ... and what was recorded is the process's statm resident figure of the moment (not
    # its virtual size, GBs more with torch loaded): a tiny step later, within a few MiB.
    assert abs(forward[3] - sink.rss_around[1]) <= 64 * 2**20


def test_the_lab_reads_the_heap_and_rss_after_a_forward_at_most_every_heap_every_s(
        monkeypatch):
    """On a phase clock faked at 1 ms a read (steps of a few ms), the lab reads the process
    heap and RSS at the run's start, then at the first forward at least HEAP_EVERY_S after
    the last read: never twice within it, never at another phase."""
    import memlens.core.recorder.recorder as recorder_module
    from memlens.core.recorder.step import HEAP_EVERY_S
    from memlens.core.records import SAMPLE_PHASE_CODE

    ticks = iter(range(10**9))
    monkeypatch.setattr(recorder_module, "phase_clock",
                        lambda device, synchronize=True: (lambda: next(ticks) * 1e-3, "fake"))
    history, _ = run("mlp", steps=60)
    table = history.samples
    heap, rss = table.column("heap"), table.column("rss")
    np.testing.assert_array_equal(np.isfinite(rss), np.isfinite(heap))
    read = np.isfinite(heap)
    phases = table.column("phase")[read].astype(int).tolist()
    assert phases[0] == SAMPLE_PHASE_CODE["start"]
    assert set(phases[1:]) == {SAMPLE_PHASE_CODE["forward"]}
    # as often as the rule allows on the fake clock's whole run: a read at the first forward
    # after each HEAP_EVERY_S (a step here reads the clock a few dozen times at most)
    run_s = next(ticks) * 1e-3
    step_s = run_s / 60
    assert step_s < HEAP_EVERY_S / 4  # (the premise: several steps between reads)
    forwards = len(phases) - 1
    assert run_s / (HEAP_EVERY_S + step_s) - 1 <= forwards <= run_s / HEAP_EVERY_S + 1


def test_memory_csv_has_rss_bytes_and_load_run_reads_it_back(tmp_path):
    folder = tmp_path / "run"
    history, _ = run("mlp", steps=3, sink=RunWriter(folder), heap_every_s=0.0)
    with open(folder / "memory.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert "rss_bytes" in rows[0]
    written = [float(r["rss_bytes"]) if r["rss_bytes"] else np.nan for r in rows]
    np.testing.assert_array_equal(load_run(folder).samples.column("rss"), written)
    np.testing.assert_array_equal(history.samples.column("rss"), written)
    if os.path.exists("/proc/self/statm"):
        assert np.isfinite(written).sum() == 1 + 3  # start, and each step's forward


@pytest.mark.parametrize("reader", ["load_run", "follow"])
@pytest.mark.parametrize("dropped", [("rss", "gathered", "buckets", "carried"),
                                     ("gathered", "buckets", "carried"), ("carried",)])
def test_a_folder_written_before_later_columns_still_opens(tmp_path, reader, dropped):
    """rss_bytes came last, then the sharded categories, then `carried`: a folder from
    before any opens, rss as no value (NaN), a category as 0 (nothing was counted as it
    then), carried as 0 (every sample was measured)."""
    folder = tmp_path / "old"
    run("mlp", steps=3, sink=RunWriter(folder))
    new = load_run(folder).samples.rows()
    path = folder / "memory.csv"
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][-len(dropped):] == [c if c == "carried" else f"{c}_bytes" for c in dropped]
    with open(path, "w", newline="") as fh:  # as a memlens before these columns wrote it
        csv.writer(fh).writerows(r[:-len(dropped)] for r in rows)
    if reader == "load_run":
        old = load_run(folder).samples
    else:
        follower = RunFollower(folder)
        follower.poll()
        old = follower.history.samples
    gone = [old.index[c] for c in dropped]
    for c in dropped:
        column = old.rows()[:, old.index[c]]
        assert np.isnan(column).all() if c == "rss" else (column == 0).all()
    keep = [i for i in range(new.shape[1]) if i not in gone]
    np.testing.assert_array_equal(old.rows()[:, keep], new[:, keep])

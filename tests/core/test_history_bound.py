"""A long run's history keeps only its newest blocks in memory; older rows go to a hidden
spill file and read back exactly, so memory stays bounded however long the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc

import numpy as np

from memlens.core.history import RunHistory, SpillFile
from memlens.core.runfolder.history_files import write_history
from tests.core.cli_child import ROOT
from tests.core.helpers import run

BLOCK = 8192


def fill(history: RunHistory, rows: np.ndarray, chunk: int = 5000) -> None:
    for start in range(0, len(rows), chunk):
        history.steps.extend(rows[start : start + chunk])


def test_rows_beyond_the_kept_blocks_leave_memory_and_read_back_exactly(tmp_path):
    history = RunHistory(spill_dir=tmp_path, keep_blocks=2)
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((BLOCK * 12 + 123, len(history.steps.columns)))
    fill(history, rows)
    table = history.steps
    assert len(table) == len(rows)
    assert table.spilled_rows == BLOCK * 10  # 12 full blocks, the newest 2 kept
    assert table.nbytes == 3 * BLOCK * rows.shape[1] * 8  # 2 full blocks + the partial one
    np.testing.assert_array_equal(table.rows(), rows)
    np.testing.assert_array_equal(table.rows(BLOCK - 5, 3 * BLOCK + 7),
                                  rows[BLOCK - 5 : 3 * BLOCK + 7])
    np.testing.assert_array_equal(table.column("loss", 17, len(rows) - 1),
                                  rows[17:-1, table.index["loss"]])
    assert os.listdir(tmp_path) == []  # the spill file has no name in the folder


def test_memory_of_a_growing_history_stops_growing(tmp_path):
    history = RunHistory(spill_dir=tmp_path, keep_blocks=2)
    width = len(history.steps.columns)
    chunk = np.ones((BLOCK, width))
    fill(history, chunk[:10])  # the first allocations (lock, lists) before measuring
    tracemalloc.start()
    try:
        for _ in range(8):
            history.steps.extend(chunk)
        _, after_8 = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(40):
            history.steps.extend(chunk)
        current, peak_48 = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    block_bytes = BLOCK * width * 8
    assert len(history.steps) == 48 * BLOCK + 10
    # 40 more blocks of rows (~45 MB) came in; memory grew by far less than one block
    assert current < 4 * block_bytes
    assert peak_48 - after_8 < block_bytes // 2


def test_a_run_with_spilled_rows_writes_the_same_files(tmp_path):
    history, _summary = run("mlp", steps=40, precise=True)
    small = RunHistory(spill_dir=tmp_path, keep_blocks=1)
    for name in ("steps", "samples", "allocs"):
        table = getattr(small, name)
        table.block_rows = 16  # tiny blocks: most rows of this short run are spilled
        getattr(small, name).extend(getattr(history, name).rows())
    small.frames.extend(history.frames)
    small.meta, small.summary = history.meta, history.summary
    for e in history.events():
        small.on_event(e)
    assert small.samples.spilled_rows > 0 and small.allocs.spilled_rows > 0
    write_history(history, tmp_path / "a")
    write_history(small, tmp_path / "b")
    for name in ("steps.csv", "memory.csv", "allocations.npy", "allocation_frames.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_disk_that_refuses_the_spill_keeps_the_rows_in_memory(tmp_path):
    history = RunHistory(spill_dir=tmp_path / "missing", keep_blocks=1)
    width = len(RunHistory().steps.columns)
    rows = np.arange(BLOCK * 4 * width, dtype=np.float64).reshape(-1, width)
    fill(history, rows)
    assert history.spill.failed and history.steps.spilled_rows == 0
    np.testing.assert_array_equal(history.steps.rows(), rows)


def test_spill_file_reads_what_was_written():
    spill = SpillFile()
    a, b = spill.write(b"x" * 10), spill.write(b"yz" * 7)
    assert (a, b) == (0, 10)
    assert spill.read(8, 6) == b"xxyzyz"
    spill.close()


RSS_IN_CHILD = """
import json, sys, tempfile
from memlens.core.config import RunConfig
from memlens.core.history import RunHistory
from memlens.core.synthetic import synthetic_training

def rss():
    with open("/proc/self/statm") as f:
        import os
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

class Probe:
    def __init__(self, history):
        self.history, self.points = history, []
    def __getattr__(self, name):
        return getattr(self.history, name)
    def on_steps(self, rows):
        self.history.on_steps(rows)
        for record, _ in rows:
            if (record.step + 1) % 25_000 == 0:
                self.points.append([record.step + 1, rss(), len(self.history.samples),
                                    len(self.history.steps)])

with tempfile.TemporaryDirectory() as d:
    history = RunHistory(spill_dir=d)
    probe = Probe(history)
    synthetic_training(RunConfig(steps=int(sys.argv[1])), sink=probe)
    print(json.dumps({"points": probe.points, "spilled": history.samples.spilled_rows,
                      "widths": [len(history.samples.columns), len(history.steps.columns)]}))
"""


def test_resident_memory_stays_flat_past_the_spill_point_over_200k_steps():
    """A light run of 200,000 synthetic steps: resident memory from step 50,000 (past the
    32,768-row spill point of both tables) to the end grows by far less than the rows added
    would take in memory. Figure in docs/benchmarks.md."""
    proc = subprocess.run([sys.executable, "-c", RSS_IN_CHILD, "200000"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    points = {p[0]: p for p in got["points"]}
    start, end = points[50_000], points[200_000]
    assert start[3] > 32_768 and start[2] > 32_768
    sample_width, step_width = got["widths"]
    added = ((end[2] - start[2]) * sample_width + (end[3] - start[3]) * step_width) * 8
    assert got["spilled"] > 0
    assert end[1] - start[1] < added / 10, (end[1] - start[1], added)

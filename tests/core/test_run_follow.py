"""Following a run folder as another process writes it: new rows only, and the writer's state."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from memlens.core.history import sample_values
from memlens.core.records import MemorySample, StepRecord
from memlens.core.runfolder.follow import FINISHED, GONE, LIVE, RunFollower
from memlens.core.runfolder.format import MEMORY_CSV, RunFolderError, memory_row
from memlens.core.runfolder.reader import load_run
from memlens.core.runfolder.writer import RunWriter


def step_record(i: int) -> StepRecord:
    return StepRecord(step=i, time_s=i * 0.1, loss=1.0 / 2**i, grad_norm=0.5, step_ms=10.0,
                      zero_grad_ms=1, forward_ms=4, backward_ms=4, optimizer_ms=1, eval_ms=0,
                      allocated_bytes=1000 + i, peak_bytes=2000 + i, reserved_bytes=None,
                      graph_nodes=7, saved_bytes=300, retained_bytes=0)


def sample(i: int, phase: str) -> MemorySample:
    return MemorySample(i, phase, i * 0.1, 100, 10 * i, 5, 7, 0)


def writer(folder, pid=None) -> RunWriter:
    w = RunWriter(folder)
    import os

    w.on_start({"source": "watch", "pid": pid if pid is not None else os.getpid()})
    w.flush()
    return w


def test_poll_takes_only_new_complete_rows(tmp_path):
    w = writer(tmp_path)
    f = RunFollower(tmp_path)
    assert f.poll() == (0, 0) and f.state == LIVE
    for i in range(3):
        w.on_samples([sample(i, "forward")])
        w.on_steps([(step_record(i), ())])
        w.flush()  # the writer's thread has written them
        assert f.poll() == (1, 1)
    assert f.history.steps.column("loss").tolist() == [1.0, 0.5, 0.25]
    assert f.history.samples.column("grads").tolist() == [0, 10, 20]
    row = ",".join(memory_row(sample_values(sample(3, "forward")))) + "\n"
    with open(tmp_path / MEMORY_CSV, "a") as fh:  # a row being written: waits for its newline
        fh.write(row[:16])
    assert f.poll() == (0, 0)
    with open(tmp_path / MEMORY_CSV, "a") as fh:
        fh.write(row[16:])
    assert f.poll() == (0, 1) and f.history.samples.column("grads").tolist()[-1] == 30
    w.on_finish({"steps_done": 3})
    f.poll()
    assert f.state == FINISHED
    loaded = load_run(tmp_path)  # the reader of saved folders sees the same rows
    np.testing.assert_array_equal(loaded.steps.rows(), f.history.steps.rows())
    np.testing.assert_array_equal(loaded.samples.rows(), f.history.samples.rows())


def test_a_writer_whose_process_ended_without_finishing_is_gone(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    w = writer(tmp_path, pid=p.pid)
    w.on_steps([(step_record(0), ())])
    w.flush()
    f = RunFollower(tmp_path)
    f.poll()
    assert f.state == GONE and len(f.history.steps) == 1


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
    with pytest.raises(RunFolderError):
        RunFollower(tmp_path / "missing")
    (tmp_path / "steps.csv").write_text("a,b,c\n1,2,3\n")
    with pytest.raises(RunFolderError, match="not a memlens"):
        RunFollower(tmp_path).poll()

"""CudaSnapshotRecorder: records exactly its window, bounded, and dumps protocol-4 pickles.

No GPU here: a stand-in for torch.cuda.memory records the calls; on this machine the real
constructor must refuse with a message that says what to do instead.
"""

from __future__ import annotations

import pickle

import pytest

from memlens.core.exports.cuda_recorder import CudaSnapshotRecorder, CudaUnavailable
from memlens.core.runfolder.atomic import ExportError


class FakeCudaMemory:
    """Records calls the way torch.cuda.memory would receive them."""

    def __init__(self, clear_history: bool = True) -> None:
        self.calls: list[tuple] = []
        self.clear_history = clear_history
        self.enabled = False
        self.metadata = ""

    def _record_memory_history(self, enabled="all", **kwargs):
        if "clear_history" in kwargs and not self.clear_history:
            raise TypeError("unexpected keyword argument 'clear_history'")
        self.calls.append(("record", enabled, kwargs))
        self.enabled = enabled is not None

    def _snapshot(self, device=None):
        assert self.enabled, "snapshot taken after recording stopped"
        self.calls.append(("snapshot", device))
        return {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 512,
                                                    "stream": 0, "frames": [],
                                                    "user_metadata": self.metadata}]]}

    def _set_memory_metadata(self, text: str) -> None:
        self.metadata = text


def drive(recorder: CudaSnapshotRecorder, steps: range) -> None:
    for step in steps:
        recorder.on_step_begin(step)
        recorder.on_step_end(step)


def test_records_only_its_window_with_max_entries(tmp_path):
    mem = FakeCudaMemory()
    rec = CudaSnapshotRecorder(start_step=3, steps=2, max_entries=5000, memory=mem)
    drive(rec, range(3))
    assert mem.calls == [] and not rec.recording
    drive(rec, range(3, 10))
    assert [c[0] for c in mem.calls] == ["record", "snapshot", "record"]
    start, stop = mem.calls[0], mem.calls[2]
    assert start[1] == "all"
    assert start[2] == {"clear_history": True, "context": "all", "stacks": "python",
                        "max_entries": 5000, "device": None}
    assert stop[1] is None and not mem.enabled
    assert rec.steps_recorded == [3, 4]
    path = rec.dump(tmp_path / "snapshot.pickle")
    data = path.read_bytes()
    assert data[:2] == b"\x80\x04"
    snap = pickle.loads(data)
    assert snap["device_traces"][0][0]["user_metadata"] == "memlens step 4"
    assert mem.metadata == ""  # cleared when recording stopped


def test_a_run_that_stops_inside_the_window_keeps_what_it_recorded(tmp_path):
    mem = FakeCudaMemory()
    rec = CudaSnapshotRecorder(start_step=0, steps=100, memory=mem)
    drive(rec, range(5))
    assert rec.recording
    rec.dump(tmp_path / "s.pickle")
    assert not rec.recording and [c[0] for c in mem.calls] == ["record", "snapshot", "record"]


def test_older_torch_without_clear_history(tmp_path):
    mem = FakeCudaMemory(clear_history=False)
    rec = CudaSnapshotRecorder(start_step=0, steps=1, max_entries=10, memory=mem)
    drive(rec, range(2))
    assert mem.calls[0][2]["max_entries"] == 10 and "clear_history" not in mem.calls[0][2]
    rec.dump(tmp_path / "s.pickle")


def test_window_never_reached_or_bad_arguments(tmp_path):
    rec = CudaSnapshotRecorder(start_step=50, steps=5, memory=FakeCudaMemory())
    drive(rec, range(10))
    with pytest.raises(ExportError, match=r"steps 50-54.* never reached"):
        rec.dump(tmp_path / "s.pickle")
    assert not (tmp_path / "s.pickle").exists()
    with pytest.raises(ValueError, match="steps=0"):
        CudaSnapshotRecorder(start_step=0, steps=0, memory=FakeCudaMemory())


def test_close_stops_recording_without_a_snapshot():
    mem = FakeCudaMemory()
    rec = CudaSnapshotRecorder(start_step=0, steps=10, memory=mem)
    rec.on_step_begin(0)
    rec.close()
    assert not mem.enabled and rec.snapshot is None


def test_on_a_machine_without_cuda_it_says_what_to_do_instead():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(CudaUnavailable, match=r"precise mode.*--format snapshot"):
        CudaSnapshotRecorder(start_step=0, steps=1)

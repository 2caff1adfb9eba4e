"""Reading a snapshot.pickle: no code from the file runs; memlens's own file gives its peak."""

from __future__ import annotations

import pickle

import pytest

from memlens.core.exports.snapshot import write_snapshot
from memlens.core.snapshot_file import BEFORE_WINDOW, SnapshotFileError, read_snapshot
from tests.core.helpers import run


class _CreatesAFile:
    """Unpickled normally, this opens (creates) `target`: what a malicious file does."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    # The payload works: a plain pickle.loads creates the file.
    control = tmp_path / "control.txt"
    pickle.loads(pickle.dumps({"device_traces": [[]], "x": _CreatesAFile(str(control))}))
    assert control.exists()

    target = tmp_path / "pwned.txt"
    bad = tmp_path / "snapshot.pickle"
    bad.write_bytes(pickle.dumps({"device_traces": [[]], "segments": [],
                                  "x": _CreatesAFile(str(target))}))
    with pytest.raises(SnapshotFileError) as err:
        read_snapshot(bad)
    assert not target.exists()
    text = str(err.value)
    assert "io.open" in text and "nothing in it ran" in text


@pytest.mark.parametrize("payload", [
    b"not a pickle at all",
    pickle.dumps([1, 2, 3]),
    pickle.dumps({"segments": []}),
    pickle.dumps({"device_traces": [[]], "segments": []}),
    pickle.dumps({"device_traces": [[{"action": "alloc", "addr": 1, "size": 2.5}]]}),
    pickle.dumps({"device_traces": [[1, 2]]})[:-3],  # torn
])
def test_files_that_are_not_snapshots_say_why(tmp_path, payload):
    path = tmp_path / "x.pickle"
    path.write_bytes(payload)
    with pytest.raises(SnapshotFileError) as err:
        read_snapshot(path)
    assert str(path) in str(err.value)


def test_a_missing_file_says_it_does_not_exist(tmp_path):
    with pytest.raises(SnapshotFileError, match=r"nope\.pickle: does not exist"):
        read_snapshot(tmp_path / "nope.pickle")


def test_memlens_own_snapshot_gives_the_runs_peak_and_categories(tmp_path):
    history, summary = run("mlp", steps=4, precise=True)
    path = write_snapshot(history, tmp_path / "snapshot.pickle", max_entries=None)
    timeline = read_snapshot(path)
    # Independent figures: the run's own peak and the file read by plain pickle.
    raw = pickle.loads(path.read_bytes())
    trace = max(raw["device_traces"], key=len)
    assert timeline.actions == len(trace)
    assert timeline.peak_bytes == summary.peak_bytes > 0
    alive_end = sum(b["size"] for s in raw["segments"] for b in s["blocks"])
    assert timeline.allocated[-1] == alive_end
    # Categories as the file tags its allocations, counted independently here.
    tagged = {e["category"] for e in trace if e["action"] in ("alloc", "free_completed")}
    assert set(timeline.categories) == tagged and "params" in tagged
    for name, curve in timeline.categories.items():
        net = sum(e["size"] * (1 if e["action"] == "alloc" else -1) for e in trace
                  if e.get("category") == name and e["action"] in ("alloc", "free_completed"))
        assert curve[-1] == net
    # The largest alive at the peak are sorted and add up to no more than the peak.
    sizes = [a.size for a in timeline.top]
    assert sizes == sorted(sizes, reverse=True) and sum(sizes) <= timeline.peak_bytes
    assert timeline.top[0].frames  # stacks come along


def test_a_ring_buffer_window_starts_from_what_was_alive_before(tmp_path):
    """Only the last events were kept: memory alive before them comes from the segments."""
    old = {"address": 4096, "size": 1000, "state": "active_allocated",
           "frames": [{"filename": "train.py", "line": 3, "name": "setup"}]}
    doc = {
        "segments": [{"device": 0, "address": 4096, "total_size": 8192,
                      "blocks": [old, {"address": 8192, "size": 300,
                                       "state": "active_allocated", "frames": []}]}],
        "device_traces": [[
            {"action": "alloc", "addr": 8192, "size": 300, "frames": []},
            {"action": "alloc", "addr": 9000, "size": 500,
             "frames": [{"filename": "train.py", "line": 9, "name": "loss"}]},
            {"action": "free_requested", "addr": 9000, "size": 500, "frames": []},
            {"action": "free_completed", "addr": 9000, "size": 500, "frames": []},
            {"action": "free_completed", "addr": 7000, "size": 200, "frames": []},
        ]],
    }
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(doc))
    t = read_snapshot(path)
    # Before the window: the 1000 still alive at the end and the 200 freed in it.
    assert t.allocated.tolist() == [1200, 1500, 2000, 2000, 1500, 1300]
    assert t.peak_index == 2 and t.peak_bytes == 2000
    assert sorted(a.size for a in t.top) == [200, 300, 500, 1000]
    assert t.top[0].frames[0] == BEFORE_WINDOW
    assert t.top[1].frames == ["train.py:9 loss"]
    assert t.reserved is None  # no segment events: reserved over time is not known


def test_segment_events_give_reserved_memory_over_time(tmp_path):
    doc = {"segments": [{"device": 0, "total_size": 4096, "blocks": []}],
           "device_traces": [[
               {"action": "segment_alloc", "addr": 0, "size": 2048},
               {"action": "alloc", "addr": 0, "size": 100},
               {"action": "free_completed", "addr": 0, "size": 100},
               {"action": "segment_free", "addr": 0, "size": 2048},
           ]]}
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(doc))
    t = read_snapshot(path)
    assert t.reserved.tolist() == [4096, 6144, 6144, 6144, 4096]
    assert t.allocated.tolist() == [0, 0, 100, 0, 0]


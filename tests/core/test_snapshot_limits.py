"""A snapshot.pickle of any size or shape reads in bounded memory and time, or is one short
line: wrong types and sizes, tens of thousands of categories, one huge shared stack, a
trace that repeats one event millions of times (a pickle memo bomb), a file over the
stated limit (refused before it is read, never held whole)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.core.snapshot_file import SnapshotFileError, read_snapshot
from tests.core.cli_child import ROOT, cli, limit_memory, refused_in_one_line


def _write_pickle(path: Path, doc) -> Path:
    path.write_bytes(pickle.dumps(doc, protocol=4))
    return path


READ_IN_CHILD = """
import json, sys
from memlens.core.snapshot_file import read_snapshot
t = read_snapshot(sys.argv[1])
print(json.dumps({"categories": {k: int(v[-1]) for k, v in t.categories.items()},
                  "allocated_end": int(t.allocated[-1]), "actions": t.actions,
                  "top": [[a.size, len(a.frames), max(map(len, a.frames), default=0)]
                          for a in t.top], "live": t.live_at_peak}))
"""


def read_in_child(path: Path) -> dict:
    """read_snapshot in a child under MEMORY_LIMIT: the reading must fit there."""
    proc = subprocess.run([sys.executable, "-c", READ_IN_CHILD, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=limit_memory)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_thirty_thousand_categories_are_drawn_as_a_few_curves_and_other(tmp_path):
    from memlens.core.snapshot_file import MAX_CATEGORIES, OTHER_CATEGORY

    n = 30_000
    sizes = [(i % 97 + 1) * 512 for i in range(n)]
    trace = [{"action": "alloc", "addr": 4096 * i, "size": sizes[i], "category": f"c{i}"}
             for i in range(n)]
    path = _write_pickle(tmp_path / "snapshot.pickle", {"device_traces": [trace],
                                                         "segments": []})
    assert path.stat().st_size < 2 << 20
    got = read_in_child(path)
    assert len(got["categories"]) == MAX_CATEGORIES + 1
    # the curves together hold every byte, the largest categories on their own
    assert sum(got["categories"].values()) == sum(sizes) == got["allocated_end"]
    largest = sorted(range(n), key=lambda i: -sizes[i])[:MAX_CATEGORIES]
    assert {f"c{i}" for i in largest} | {OTHER_CATEGORY} == set(got["categories"])


def test_one_huge_stack_shared_by_every_allocation_is_read_once(tmp_path):
    from memlens.core.snapshot_file import MAX_FRAMES, MAX_TEXT, TOP_ALLOCATIONS

    frame = {"filename": "train.py", "line": 12, "name": "f" * 5000}
    frames = [frame] * 1_000_000  # one list in the pickle's memo, as torch shares stacks
    n = 100_000
    trace = [{"action": "alloc", "addr": 4096 * i, "size": 512 + i, "frames": frames}
             for i in range(n)]
    path = _write_pickle(tmp_path / "snapshot.pickle", {"device_traces": [trace],
                                                         "segments": []})
    assert path.stat().st_size < 8 << 20
    got = read_in_child(path)
    assert got["live"] == n and got["actions"] == n
    assert [t[0] for t in got["top"]] == [512 + i for i in range(n - 1, n - 1 - TOP_ALLOCATIONS,
                                                                 -1)]
    assert all(t[1] == MAX_FRAMES and t[2] <= MAX_TEXT + 1 for t in got["top"])


def test_a_trace_repeating_one_event_millions_of_times_is_refused_before_it_is_read(tmp_path):
    """A pickle's memo lets a 10 MB file list one event 5,000,000 times: within the event
    limit, but no recording; it is refused before any work is done per event."""
    event = {"action": "alloc", "addr": 4096, "size": 512, "frames": []}
    path = _write_pickle(tmp_path / "snapshot.pickle",
                         {"device_traces": [[event] * 5_000_000], "segments": []})
    assert path.stat().st_size < 16 << 20
    with pytest.raises(SnapshotFileError, match="5,000,000 events but only 1 distinct"):
        read_snapshot(path)


def test_a_snapshot_over_the_limit_is_refused_before_it_is_read(tmp_path):
    """A file past the stated 1 GiB (README; a sparse one: no disk used) is refused by its
    size in a child whose address space could not hold it: it is never read whole."""
    limit = 1 << 30
    path = tmp_path / "snapshot.pickle"
    with open(path, "wb") as fh:
        fh.truncate(limit + (256 << 20))
    proc = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom memlens.core.snapshot_file import "
         "read_snapshot\ntry:\n    read_snapshot(sys.argv[1])\nexcept ValueError as e:\n"
         "    print(e)\n", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: limit_memory(limit))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "snapshot.pickle: 1.25 GiB, more than the 1.00 GiB" in proc.stdout


# --- tracebacks where one line belongs ----------------------------------------------------


def _trace(**fields) -> dict:
    event = {"action": "alloc", "addr": 4096, "size": 512, "frames": []}
    event.update(fields)
    return {"device_traces": [[event]], "segments": []}


def _nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


SNAPSHOTS = {
    "size 2**70": _trace(size=2**70),
    "sizes summing past int64": {"device_traces": [[
        {"action": "alloc", "addr": 4096 * i, "size": 2**61, "frames": []} for i in range(9)]],
        "segments": []},
    "action a list": _trace(action=["alloc"]),
    "frames an int": _trace(frames=5),
    "blocks an int": {"device_traces": [[]], "segments": [
        {"device": 0, "total_size": 1024, "blocks": 7}]},
    "device_traces [5]": {"device_traces": [5], "segments": []},
    "category a nested list": _trace(category=_nested(5_000)),
    "size text of 600 KB": _trace(size="9" * 600_000),
}


def write_snapshot(folder: Path, name: str) -> Path:
    """SNAPSHOTS[name] pickled as a snapshot file in `folder`."""
    path = folder / "snapshot.pickle"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # to write the nested case; reading it needs none
    try:
        path.write_bytes(pickle.dumps(SNAPSHOTS[name], protocol=4))
    finally:
        sys.setrecursionlimit(limit)
    return path


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_a_snapshot_with_wrong_types_or_sizes_is_one_short_line(tmp_path, name):
    path = write_snapshot(tmp_path, name)
    line = refused_in_one_line(*cli("shot", "--open", path, "--out", tmp_path / "s.png")[::2],
                               "shot")
    assert str(path) in line and len(line) < 600
    assert not (tmp_path / "s.png").exists()


def test_sixty_thousand_categories_open_in_shot(tmp_path):
    trace = [{"action": "alloc", "addr": 4096 * i, "size": 512, "category": f"c{i}"}
             for i in range(60_000)]
    path = _write_pickle(tmp_path / "snapshot.pickle", {"device_traces": [trace],
                                                         "segments": []})
    code, _, err = cli("shot", "--open", path, "--out", tmp_path / "s.png")
    assert code == 0, err[-2000:]
    assert (tmp_path / "s.png").is_file()


def test_a_snapshot_field_is_never_echoed_in_full(tmp_path):
    path = _write_pickle(tmp_path / "snapshot.pickle", _trace(addr="a" * 600_000))
    line = refused_in_one_line(*cli("shot", "--open", path, "--out", tmp_path / "s.png")[::2],
                               "shot")
    assert "aaaaaaaaaa" not in line and len(line) < 600

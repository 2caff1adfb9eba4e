"""snapshot.pickle: PyTorch's schema, its tools read it, and they see our peak."""

from __future__ import annotations

import pickle
import pickletools
import re
import subprocess
import sys

import numpy as np
import pytest

from memlens.core.exports import export_run
from memlens.core.exports._allocs import allocation_events, parse_frames
from memlens.core.exports.snapshot import (
    SYNTHETIC_BASE,
    SnapshotUnavailable,
    build_snapshot,
    device_slot,
    write_snapshot,
)
from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES
from tests.core.export_histories import META, Allocs, sample, small_history
from tests.core.helpers import run
from tests.core.viewer_model import (
    VIEWER_OPCODES,
    annotated,
    format_size,
    snapshot_from_html,
    viewer_peak,
)

CPU_ONLY = (0, 1)  # device slot on a machine without CUDA: index 0 of 1 trace


@pytest.fixture(scope="module")
def precise_run():
    history, summary = run("mlp", steps=5, precise=True)
    return history, summary


def entries(snapshot: dict, index: int = 0) -> list[dict]:
    return snapshot["device_traces"][index]


# --- schema ----------------------------------------------------------------------------------


def test_schema_of_a_hand_built_run():
    history, _ = small_history()
    snap = build_snapshot(history, device=CPU_ONLY)
    assert set(snap) == {"segments", "device_traces"}
    trace = entries(snap)
    actions = [e["action"] for e in trace]
    assert actions.count("alloc") == 2 + 2 * 4  # w, b, then x, y, tmp, gw in each step
    assert actions.count("free_requested") == actions.count("free_completed") == 7
    assert actions[-1] == "snapshot"
    for i, e in enumerate(trace):
        assert set(e) == {"action", "addr", "size", "stream", "time_us", "frames", "category"}
        assert e["category"] in (*MEMORY_CATEGORIES, "unknown")
        assert all(set(f) == {"filename", "line", "name"} for f in e["frames"])
        if e["action"] == "free_requested":  # a free on CPU completes at once
            nxt = trace[i + 1]
            assert nxt["action"] == "free_completed" and nxt["addr"] == e["addr"]
            assert nxt["size"] == e["size"]
    # the activation x: its Python frames, newest first, then when it was allocated
    x = next(e for e in trace if e["action"] == "alloc" and e["size"] == 2000)
    assert x["frames"] == [
        {"filename": "/home/u/train.py", "line": 12, "name": "forward"},
        {"filename": "/home/u/train.py", "line": 40, "name": "main"},
        {"filename": "<memlens step>", "line": 0, "name": "forward"},
    ]
    assert x["time_us"] == 10_100 and x["category"] == "activations"
    # alive at the end: w, b and the second step's gradient, each its own segment
    segs = snap["segments"]
    assert sorted(s["total_size"] for s in segs) == [400, 4000, 4000]
    for s in segs:
        (block,) = s["blocks"]
        assert block["state"] == "active_allocated"
        assert s["address"] == block["address"]
        assert s["total_size"] == s["allocated_size"] == block["size"] == block["requested_size"]
    assert [s["address"] for s in segs] == sorted(s["address"] for s in segs)


def test_plain_protocol_4_pickle_the_viewer_can_read(tmp_path, precise_run):
    history, _ = precise_run
    path = write_snapshot(history, tmp_path / "snapshot.pickle")
    data = path.read_bytes()
    assert data[:2] == b"\x80\x04"
    used = {op.name for op, _, _ in pickletools.genops(data)}
    assert used <= VIEWER_OPCODES, used - VIEWER_OPCODES

    def plain(obj):
        if isinstance(obj, dict):
            assert all(isinstance(k, str) for k in obj)
            return all(plain(v) for v in obj.values())
        if isinstance(obj, list):
            return all(plain(v) for v in obj)
        if isinstance(obj, int) and not isinstance(obj, bool):
            assert abs(obj) < 2**53, obj  # exact as a JavaScript number
            return True
        return isinstance(obj, str)

    assert plain(pickle.loads(data))


def test_cpu_trace_sits_where_profile_to_snapshot_puts_it():
    import torch

    history, _ = small_history()
    assert device_slot(history) == (torch.cuda.device_count(), torch.cuda.device_count() + 1)
    assert device_slot(history, cuda_device_count=2) == (2, 3)
    snap = build_snapshot(history, device=device_slot(history, cuda_device_count=2))
    assert [len(t) > 0 for t in snap["device_traces"]] == [False, False, True]
    assert {s["device"] for s in snap["segments"]} == {2}
    history.meta = {**history.meta, "environment": {"device": "cuda:1", "precise": True}}
    assert device_slot(history, cuda_device_count=2) == (1, 2)


def test_frames_text_parses_like_the_tracker_writes_it():
    assert parse_frames("") == []
    assert parse_frames("/a/b.py:3:f|C:\\x\\y.py:10:<module>") == [
        {"filename": "/a/b.py", "line": 3, "name": "f"},
        {"filename": "C:\\x\\y.py", "line": 10, "name": "<module>"},
    ]
    assert parse_frames("weird") == [{"filename": "", "line": 0, "name": "weird"}]


# --- peaks -------------------------------------------------------------------------------------


def test_viewer_peak_equals_our_peak_on_a_real_precise_run(precise_run):
    history, summary = precise_run
    ours = int(history.steps.column("peak_bytes").max())
    assert ours == summary.peak_bytes > 0
    assert allocation_events(history).peak_bytes() == ours
    snap = build_snapshot(history, device=CPU_ONLY)
    assert viewer_peak(snap, 0) == ours


def test_viewer_peak_on_a_hand_built_run():
    history, peak = small_history()
    assert viewer_peak(build_snapshot(history, device=CPU_ONLY), 0) == peak == 13_900


def test_memory_viz_commands_read_our_cpu_file_and_show_our_peak(tmp_path, precise_run):
    """`python -m torch.cuda._memory_viz stats | trace | trace_plot` on our file."""
    history, _ = precise_run
    ours = int(history.steps.column("peak_bytes").max())
    path = write_snapshot(history, tmp_path / "snapshot.pickle")
    snap = pickle.loads(path.read_bytes())
    html = tmp_path / "x.html"
    cmds = {"stats": ["stats"], "trace": ["trace"], "trace_plot": ["trace_plot", "-o", str(html)]}
    procs = {k: subprocess.Popen([sys.executable, "-m", "torch.cuda._memory_viz", *c, str(path)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, c in cmds.items()}
    out = {}
    for k, p in procs.items():
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, f"{k}: {stderr[-2000:]}"
        out[k] = stdout

    # stats: one segment per storage alive at the end, reserved == allocated == live bytes
    ev = allocation_events(history)
    live_end = int(ev.nbytes[ev.alive_at_end].sum())
    assert f"segments: {int(ev.alive_at_end.sum())}\n" in out["stats"]
    assert f"total_allocated: {format_size(live_end)}\n" in out["stats"]
    assert f"total_reserved: {format_size(live_end)}\n" in out["stats"]

    # trace: every entry, in our order and sizes; replaying it gives our peak
    trace = entries(snap)
    lines = out["trace"].splitlines()
    assert lines[1] == f"{len(trace)} entries"
    names: dict[str, int] = {}
    live = peak = 0
    alloc_sizes = iter(e["size"] for e in trace if e["action"] == "alloc")
    for line in lines[2:]:
        if m := re.fullmatch(r"(\w+) = (?:MEM|seg_\d+)\[\d+:(\S+)\]", line):
            size = next(alloc_sizes)
            assert m.group(2) == format_size(size)
            names[m.group(1)] = size
            live += size
            peak = max(peak, live)
        elif m := re.fullmatch(r"# free completed for (\w+) (\S+)", line):
            live -= names.pop(m.group(1))
    assert next(alloc_sizes, None) is None
    assert peak == ours

    # trace_plot: the page embeds our snapshot; the viewer's timeline tops out at our peak
    page = html.read_text()
    embedded = snapshot_from_html(page)
    assert embedded == snap
    assert "Active Memory Timeline" in page
    assert viewer_peak(embedded, 0) == ours


def test_window_keeps_the_last_entries_and_still_counts_older_storages(precise_run):
    history, _ = precise_run
    ev = allocation_events(history)
    live = ev.baseline_bytes + np.cumsum(ev.signed_bytes())
    full = build_snapshot(history, max_entries=None, device=CPU_ONLY)
    n_full = len(entries(full))
    for max_entries in (50, n_full // 2, n_full - 1):
        snap = build_snapshot(history, max_entries=max_entries, device=CPU_ONLY)
        trace = entries(snap)
        assert len(trace) - 1 <= max_entries < len(entries(full))
        assert trace[:-1] == entries(full)[-len(trace) : -1]  # the tail, unchanged
        # the viewer sees exactly the live bytes after each of the window's rows
        first_row = len(ev) - sum(1 for e in trace if e["action"] in ("alloc", "free_completed"))
        assert viewer_peak(snap, 0) == int(live[first_row:].max())
        assert snap["segments"] == full["segments"]


def test_unusable_or_shared_addresses_get_their_own(tmp_path):
    """A zero address, two live storages at one address, a free of an older storage."""
    h = RunHistory()
    h.on_start(META)
    a = Allocs()
    a.alloc("p", 0, 0x5000, 1000, "params", phase="start")
    a.alloc("z", 10, 0, 300, "other")  # address 0: unusable
    a.alloc("s1", 20, 0x7000, 200, "activations")
    a.alloc("s2", 30, 0x7000, 500, "activations")  # same address while s1 is alive
    a.free("s1", 40)
    a.free("z", 45)
    a.alloc("s3", 50, 0x7000, 700, "activations")  # s2 still alive at 0x7000
    rows = [*a.rows, (60, 1, 999, 0x9000, 4000, 4, 0, 2, "")]  # freed, never allocated
    h.on_allocations(rows)
    h.add_sample(sample(0, "start", 0.0))
    snap = build_snapshot(h, device=CPU_ONLY)
    allocs = [e for e in entries(snap) if e["action"] == "alloc"]
    addrs = [e["addr"] for e in allocs]
    assert addrs[0] == 0x5000 and addrs[2] == 0x7000
    assert addrs[1] >= SYNTHETIC_BASE and addrs[3] >= SYNTHETIC_BASE and addrs[4] >= SYNTHETIC_BASE
    assert len(set(addrs)) == len(addrs)
    frees = {e["size"]: e["addr"] for e in entries(snap) if e["action"] == "free_completed"}
    assert frees[200] == 0x7000 and frees[300] == addrs[1]
    # 4000 alive from the start; p, z, s1, s2 -> 6000; s1, z freed -> 5500; s3 -> 6200
    ev = allocation_events(h)
    assert ev.peak_bytes() == 6200 == viewer_peak(snap, 0)


def test_zero_byte_storages_are_left_out():
    h, peak = small_history()
    h.on_allocations([(99_000, 0, 500, 0x1, 0, 4, 1, 2, ""), (99_001, 1, 500, 0x1, 0, 4, 1, 2, "")])
    snap = build_snapshot(h, device=CPU_ONLY)
    assert all(e["size"] > 0 for e in entries(snap) if e["action"] != "snapshot")
    assert viewer_peak(snap, 0) == peak


def test_viewer_categories_include_unknown():
    """MemoryViz.js fails while annotating when categories lack 'unknown' (it pushes to a
    misspelt list): our marker entry carries it."""
    history, _ = small_history()
    cats = {e.get("category") for e in entries(build_snapshot(history, device=CPU_ONLY))}
    assert "unknown" in cats
    marker = entries(build_snapshot(history, device=CPU_ONLY))[-1]
    assert marker["action"] == "snapshot" and marker["size"] == 0
    assert [e["action"] for e in annotated([marker])] == ["snapshot"]


def test_run_without_precise_mode_says_what_it_cannot_produce(tmp_path):
    history, _ = run("mlp", steps=2)
    with pytest.raises(SnapshotUnavailable, match=r"without precise mode.*--precise"):
        build_snapshot(history)
    with pytest.raises(SnapshotUnavailable, match=r"snapshot\.pickle"):
        export_run(history, tmp_path, ["snapshot"])
    assert not list(tmp_path.iterdir())  # nothing half-done
    notes: list[str] = []
    written = export_run(history, tmp_path, "all", notes=notes)
    assert sorted(p.name for p in written) == ["memory_timeline.json", "trace.json"]
    assert len(notes) == 1 and notes[0].startswith("snapshot.pickle not written")

"""What a snapshot had alive after event N, checked against a replay of the whole program
that the trace is the last part of (a ring buffer's window), counted simply here."""

from __future__ import annotations

import pickle
import random

import pytest

from memlens.core.exports.snapshot import write_snapshot
from memlens.core.snapshot_file import BEFORE_WINDOW, read_snapshot, timeline_of
from tests.core.helpers import run

FRAME = {"filename": "train.py", "line": 0, "name": "step"}


def _program(seed: int, events: int) -> list[dict]:
    """Allocs and frees as torch's caching allocator traces them (free_requested, then
    free_completed), addresses reused after a free, some tagged with a category."""
    rng = random.Random(seed)
    live: list[int] = []
    spare: list[int] = []
    sizes: dict[int, int] = {}
    out: list[dict] = []
    next_addr = 1 << 20
    while len(out) < events:
        if live and (rng.random() < 0.45 or len(live) > 40):
            addr = live.pop(rng.randrange(len(live)))
            size = sizes.pop(addr)
            for action in ("free_requested", "free_completed"):
                out.append({"action": action, "addr": addr, "size": size, "stream": 0,
                            "frames": [FRAME]})
            spare.append(addr)
        else:
            if spare and rng.random() < 0.7:
                addr = spare.pop(rng.randrange(len(spare)))
            else:
                addr, next_addr = next_addr, next_addr + (1 << 20)
            size = rng.choice([512, 1024, 4096, 1 << 20, 3 << 20])
            live.append(addr)
            sizes[addr] = size
            entry = {"action": "alloc", "addr": addr, "size": size, "stream": 0,
                     "frames": [{**FRAME, "line": len(out)}]}
            if rng.random() < 0.5:
                entry["category"] = rng.choice(["activations", "params"])
            out.append(entry)
        if rng.random() < 0.05:
            out.append({"action": "segment_alloc", "addr": 0, "size": 2 << 20, "stream": 0,
                        "frames": []})
    return out


def _replay(program: list[dict], upto: int) -> dict[int, dict]:
    """addr -> the alloc entry alive after the first `upto` events of the program."""
    live: dict[int, dict] = {}
    for e in program[:upto]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_completed":
            del live[e["addr"]]
    return live


def _snapshot(program: list[dict], kept: int) -> dict:
    """The dict torch.cuda.memory._snapshot() gives: the end state's segments (one per
    block here) and the last `kept` events of the trace."""
    blocks = [{"address": addr, "size": e["size"], "requested_size": e["size"],
               "state": "active_allocated", "frames": e["frames"]}
              for addr, e in _replay(program, len(program)).items()]
    segments = [{"device": 0, "address": b["address"], "total_size": 4 << 20,
                 "allocated_size": b["size"], "active_size": b["size"], "stream": 0,
                 "segment_type": "large", "blocks": [b]} for b in blocks]
    return {"segments": segments, "device_traces": [program[-kept:]]}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_alive_at_any_event_matches_a_replay_of_the_program(seed):
    program = _program(seed, 3000)
    kept = 1200
    cut = len(program) - kept
    t = timeline_of(_snapshot(program, kept))
    assert t.last_event == kept
    for n in [0, 1, 2, 17, 400, 401, 999, t.peak_index, kept - 1, kept]:
        truth = _replay(program, cut + n)
        got = t.alive_at(n, limit=10_000)
        assert got.count == len(truth)
        assert got.allocated == sum(e["size"] for e in truth.values()) == t.allocated[n]
        assert sorted((a.addr, a.size) for a in got.largest) == \
            sorted((addr, e["size"]) for addr, e in truth.items())
        sizes = [a.size for a in got.largest]
        assert sizes == sorted(sizes, reverse=True)
        for a in got.largest:
            made = truth[a.addr]
            # Made before the window: said so (its category and stack are not in it).
            made_before = program.index(made) < cut
            assert (a.frames[0] == BEFORE_WINDOW) == made_before
            if not made_before:
                assert a.category == made.get("category", "")
                assert a.frames == [f"train.py:{made['frames'][0]['line']} step"]


def test_the_largest_are_listed_and_the_rest_counted():
    program = _program(7, 2000)
    t = timeline_of(_snapshot(program, 2000))
    n = 1500
    truth = sorted((e["size"] for e in _replay(program, n).values()), reverse=True)
    got = t.alive_at(n, limit=5)
    assert got.count == len(truth) > 5
    assert [a.size for a in got.largest] == truth[:5]


def test_the_peak_list_is_alive_at_the_peak_and_bad_events_are_refused():
    program = _program(4, 500)
    t = timeline_of(_snapshot(program, 500))
    at_peak = t.alive_at(t.peak_index)
    assert [a.size for a in t.top] == [a.size for a in at_peak.largest]
    assert t.live_at_peak == at_peak.count
    for bad in (-1, t.last_event + 1):
        with pytest.raises(IndexError, match=f"outside 0..{t.last_event}"):
            t.alive_at(bad)


def test_memlens_own_snapshot_alive_sets_match_its_trace(tmp_path):
    history, _summary = run("mlp", steps=3, precise=True)
    path = write_snapshot(history, tmp_path / "snapshot.pickle", max_entries=None)
    trace = max(pickle.loads(path.read_bytes())["device_traces"], key=len)
    t = read_snapshot(path)
    for n in sorted({0, len(trace) // 3, len(trace) // 2, t.peak_index, len(trace)}):
        live: dict[int, int] = {}
        for e in trace[:n]:
            if e["action"] == "alloc":
                live[e["addr"]] = e["size"]
            elif e["action"] == "free_completed":
                live.pop(e["addr"])
        got = t.alive_at(n, limit=100_000)
        assert sorted(a.size for a in got.largest) == sorted(live.values())
        assert got.allocated == sum(live.values())

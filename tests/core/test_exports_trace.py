"""trace.json: the Trace Event Format, as chrome://tracing and Perfetto read it."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from memlens.core.exports.chrome_trace import write_chrome_trace
from memlens.core.history import RunHistory
from memlens.core.records import MEMORY_CATEGORIES, PHASES
from tests.core.export_histories import META, sample, small_history, step_record
from tests.core.helpers import run

PHASE_TYPES = {"X", "C", "i", "M"}


def _reject_constant(name: str):
    raise AssertionError(f"{name} is not JSON")


class Pairs(list):
    """A JSON object as its (key, value) pairs in file order."""


def load(path) -> tuple[dict, list[Pairs]]:
    """The document, and each event's (key, value) pairs in file order."""
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text, parse_constant=_reject_constant)
    ordered = json.loads(text, object_pairs_hook=Pairs)
    top = dict(ordered)
    return doc, top["traceEvents"]


def check_format(doc: dict, ordered: list) -> None:
    """The Trace Event Format's rules for the events we write, and Perfetto's reader's."""
    assert set(doc) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert doc["displayTimeUnit"] in ("ms", "ns")
    assert isinstance(doc["otherData"], dict)
    for pairs, e in zip(ordered, doc["traceEvents"], strict=True):
        assert pairs[0][0] == "ts", pairs  # Perfetto finds ts by scanning keys in order
        assert not any(type(v) is list for _, v in pairs)  # nor arrays at its top level
        assert e["ph"] in PHASE_TYPES
        assert isinstance(e["pid"], int) and isinstance(e["name"], str) and e["name"]
        assert isinstance(e["ts"], int | float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and isinstance(e["cat"], str)
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, int | float) for v in e["args"].values())
        elif e["ph"] == "i":
            assert e["s"] in ("g", "p", "t")
        else:
            assert e["name"] in ("process_name", "thread_name", "process_sort_index",
                                 "thread_sort_index")
            assert "name" in e["args"] or "sort_index" in e["args"]


def of(doc: dict, **match) -> list[dict]:
    return [e for e in doc["traceEvents"] if all(e.get(k) == v for k, v in match.items())]


def test_hand_built_run_against_the_format(tmp_path):
    history, peak = small_history()
    doc, ordered = load(write_chrome_trace(history, tmp_path / "trace.json"))
    check_format(doc, ordered)
    names = {e["name"]: e["args"] for e in of(doc, ph="M")}
    assert names["process_name"]["name"] == "memlens: mlp on cpu"
    assert names["thread_name"]["name"] == "training loop"
    assert doc["otherData"]["config"] == META["config"]
    assert doc["otherData"]["summary"]["peak_bytes"] == peak

    steps = of(doc, cat="step")
    assert [s["name"] for s in steps] == ["step 0", "step 1"]
    s1 = steps[1]["args"]
    assert s1["step"] == 1 and s1["peak_bytes"] == peak and s1["graph_nodes"] == 7
    assert s1["loss"] == pytest.approx(0.5) and s1["reserved_bytes"] is None
    assert s1["eval_loss"] is None  # NaN is written as null
    # phases: end at the sample after them (µs), last their measured time, inside the step
    phases = of(doc, cat="phase")
    assert [p["name"] for p in phases] == [*PHASES[:4]] * 2
    fwd = phases[1]
    assert fwd["args"] == {"step": 0} and fwd["dur"] == pytest.approx(2000.0)
    assert fwd["ts"] + fwd["dur"] == pytest.approx(10_000 + 3000)  # sample at 0.013 s
    for step in steps:
        inside = [p for p in phases if p["args"]["step"] == step["args"]["step"]]
        assert len(inside) == 4
        end = step["ts"] + step["dur"]
        for p in inside:
            assert step["ts"] <= p["ts"] and p["ts"] + p["dur"] <= end + 1e-3
        for a, b in itertools.pairwise(inside):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-3  # phases do not overlap
    assert steps[0]["ts"] + steps[0]["dur"] <= steps[1]["ts"]


def test_counters_follow_the_samples(tmp_path):
    history, _ = small_history()
    doc, _ = load(write_chrome_trace(history, tmp_path / "trace.json"))
    rows = history.samples.rows()
    idx = history.samples.index
    memory = of(doc, ph="C", name="memory")
    assert len(memory) == len(rows)
    for e, r in zip(memory, rows, strict=True):
        assert e["ts"] == pytest.approx(r[idx["time_s"]] * 1e6, abs=1e-3)
        assert e["args"] == {c: int(r[idx[c]]) for c in MEMORY_CATEGORIES}
    totals = of(doc, ph="C", name="memory total")
    assert [e["args"]["bytes"] for e in totals] == [int(r[idx["total"]]) for r in rows]
    heap = of(doc, ph="C", name="process heap")
    assert [e["args"]["bytes"] for e in heap] == [int(r[idx["heap"]]) for r in rows]
    assert not of(doc, ph="C", name="cuda allocator")  # CPU: no allocator figures
    peaks = of(doc, ph="C", name="step peak")
    assert [e["args"]["bytes"] for e in peaks] == [13_900, 13_900]
    assert [e["ts"] for e in peaks] == [s["ts"] for s in of(doc, cat="step")]


def test_toggles_and_errors_are_instant_events(tmp_path):
    history, _ = small_history()
    doc, _ = load(write_chrome_trace(history, tmp_path / "trace.json"))
    toggle, error = of(doc, ph="i")
    assert toggle["s"] == "p" and toggle["cat"] == "toggle"
    assert toggle["name"] == "zero_grad: set_to_none -> off"
    assert toggle["ts"] == pytest.approx(20_000.0)
    assert toggle["args"]["old"] == "set_to_none" and toggle["args"]["new"] == "off"
    assert error["cat"] == "error" and error["name"] == "error in forward: NaN loss"
    assert error["args"]["message"] == 'loss = nan "quoted" ünïcode\nnewline'
    assert error["args"]["explanation"] == "the learning rate is too high"
    raw = (tmp_path / "trace.json").read_bytes()
    assert "ünïcode".encode() in raw and b"\\u00fc" not in raw  # UTF-8, no \u escapes


def test_real_run_with_eval_and_a_toggle(tmp_path):
    history, _ = run("mlp", steps=4, at=("2:zero_grad=zeros",), eval_every=2)
    doc, ordered = load(write_chrome_trace(history, tmp_path / "trace.json"))
    check_format(doc, ordered)
    steps = of(doc, cat="step")
    assert [s["args"]["step"] for s in steps] == [0, 1, 2, 3]
    evals = of(doc, cat="phase", name="eval")
    assert [e["args"]["step"] for e in evals] == [1, 3]
    assert math.isfinite(steps[1]["args"]["eval_loss"])
    assert [e["name"] for e in of(doc, ph="i")] == ["zero_grad: set_to_none -> zeros"]
    ms = history.steps.column("forward_ms")
    fwd = of(doc, cat="phase", name="forward")
    assert [f["dur"] for f in fwd] == pytest.approx(list(ms * 1000), abs=1e-3)
    for step in steps:
        for p in (p for p in of(doc, cat="phase") if p["args"]["step"] == step["args"]["step"]):
            assert step["ts"] <= p["ts"] and p["ts"] + p["dur"] <= step["ts"] + step["dur"] + 1e-3


def test_phases_without_samples_are_laid_back_to_back(tmp_path):
    """A loaded run whose memory.csv lost rows still gets phase spans, ending at the step."""
    h = RunHistory()
    h.on_start(META)
    h.add_sample(sample(0, "start", 0.0))
    h.add_step(step_record(0, 1.0, 100, eval_ms=4.0))
    doc, ordered = load(write_chrome_trace(h, tmp_path / "trace.json"))
    check_format(doc, ordered)
    phases = of(doc, cat="phase")
    assert [p["name"] for p in phases] == list(PHASES)
    assert phases[-1]["ts"] + phases[-1]["dur"] == pytest.approx(1e6)
    for a, b in itertools.pairwise(phases):
        assert a["ts"] + a["dur"] == pytest.approx(b["ts"])

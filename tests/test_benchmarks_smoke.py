"""The benchmark harness's own logic (the timed runs are CI's `python -m benchmarks --quick`)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from benchmarks._common import Figure, interleaved, paired_ratios, percentile

ROOT = Path(__file__).resolve().parent.parent


def test_interleaved_shuffles_each_round_and_drops_warmup():
    order: list[str] = []
    variants = {n: (lambda n=n: order.append(n) or len(order)) for n in "abcd"}
    times = interleaved(variants, reps=30, warmup=1)
    rounds = [order[i : i + 4] for i in range(0, len(order), 4)]
    assert len(rounds) == 31 and all(sorted(r) == list("abcd") for r in rounds)
    # every variant runs right after each of the others at some point (a rotation would
    # always put the same one before it)
    before_b = {r[r.index("b") - 1] for r in rounds if r.index("b") > 0}
    assert before_b == {"a", "c", "d"}
    assert {k: len(v) for k, v in times.items()} == {k: 30 for k in "abcd"}
    assert times["a"] == [1 + i for i, n in enumerate(order) if n == "a"][1:]  # warm-up out
    order.clear()
    interleaved(variants, reps=30, warmup=1)
    assert [order[i : i + 4] for i in range(0, len(order), 4)] == rounds  # seeded


def test_paired_ratios_and_percentile():
    times = {"x": [2.0, 3.0, 4.0], "base": [1.0, 2.0, 0.0]}
    assert paired_ratios(times, "x", "base") == [2.0, 1.5]  # a zero baseline is skipped
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert math.isnan(percentile([], 50))


def test_figure_verdicts():
    assert Figure("a", "a", 1.04, "x", 1.05).hit is True
    assert Figure("a", "a", 1.06, "x", 1.05).verdict == "MISS"
    assert Figure("a", "a", 31.0, "Hz", 28.5, "higher").hit is True
    assert Figure("a", "a", float("nan"), "ms", 16).hit is False
    assert Figure("a", "a", 3.0).hit is None  # context only


def test_frame_totals_sum_the_events_of_each_frame():
    from benchmarks.gui_load import _frame_totals

    frames = [(0.0, 5.0), (1.0, 5.0), (2.0, 5.0)]
    busy = [(0.0, 5.0, 1.0), (0.5, 7.0, 2.0), (1.0, 5.0, 1.0), (2.0, 5.0, 1.0), (2.5, 1.0, 1.0)]
    assert _frame_totals(frames, busy) == [12.0, 5.0]  # the last frame is cut short
    assert _frame_totals(frames, busy, field=2) == [3.0, 1.0]


def test_unknown_group_is_a_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--only", "nope"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown group" in proc.stderr


def test_one_cheap_group_writes_flat_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only",
                           "history_memory", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["history_bytes_per_sample"] > 0
    assert all(v is None or isinstance(v, (int, float)) for v in data.values())


def test_light_rounds_run_before_the_other_tools_exist(monkeypatch):
    """MemTracker and the profiler leave state in the process that light mode's steps pay
    for (docs/benchmarks.md): light's own rounds must all run before either is made."""
    import memlens.core.preset_factory
    from benchmarks import overhead
    from benchmarks._common import Settings

    log: list[str] = []

    class Fake(overhead._Variant):
        def __init__(self, name, config, preset=None, tool=None):
            super().__init__(name, config)
            if tool is not None:
                log.append(f"made {name}")
            self.steps_only = []
            self.tool = tool

        def _block(self, k):
            log.append(self.name)
            if self.tool is not None:
                self.steps_only.append(0.01)
            return 0.01 * (1.04 if self.name == "light" else 1.0)

    class FakeMemlens(Fake):
        def close(self):
            pass

    monkeypatch.setattr(overhead, "Plain", Fake)
    monkeypatch.setattr(overhead, "Memlens", FakeMemlens)
    monkeypatch.setattr(memlens.core.preset_factory, "build_preset",
                        lambda config, device: object())
    times = overhead.measure_preset("mlp", Settings(quick=True, threads=1, reps=2, warmup=1))

    first_tool = log.index("made memtracker")
    assert log.count("light") == 2 + 2 + 1 + 1  # its own rounds, then the six-way ones
    assert log[:first_tool].count("light") == 2 + 1  # its own rounds (1 warm-up) first
    assert "memtracker" not in log[:first_tool] and "profiler" not in log[:first_tool]
    assert log.index("made profiler") > first_tool
    assert len(times["light_pair"]) == len(times["plain_pair"]) == 2
    assert len(times["memtracker"]) == len(times["light"]) == 2
    light = {f.name: f.value for f in overhead.figures_for("mlp", times)}
    assert math.isclose(light["overhead_mlp_light"], 1.04)


def test_instruction_count_counts_memlens_python_only():
    """benchmarks/_instructions_probe's count: memlens's own bytecode on this thread, per step; the
    caller's code and torch's are not counted, and twice the work counts twice."""
    from benchmarks._instructions_probe import InstructionCount
    from memlens.core.units import format_bytes

    def nothing(i):
        return sum(range(i + 3))  # no memlens code

    def once(i):
        return format_bytes(1536 + i)

    def twice(i):
        return format_bytes(1536 + i), format_bytes(1536 + i)

    assert InstructionCount().count(nothing, 5) == {"instructions": 0.0, "calls": 0.0,
                                                     "top": []}
    one, two = InstructionCount().count(once, 5), InstructionCount().count(twice, 5)
    assert one["instructions"] > 0 and one["calls"] >= 1
    assert two["instructions"] == 2 * one["instructions"] and two["calls"] == 2 * one["calls"]
    assert one["top"][0][0] == "format_bytes"

"""Lesson time verdicts beside real load: two busy loops in other processes hold the
machine's cores while lessons whose arms do the same work run (an A/A lesson: eval_mode with
no eval phase does nothing), with the report's own choice of threads and with 2 compute
threads an arm forced. A "confirmed", "contradicted", "larger" or "smaller" there is false.

The busy loops are this group's own children, ended (by their ids) before it returns.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks._common import Figure, Settings

JUDGED = ("confirmed", "contradicted", "larger", "smaller")
BUSY_LOOPS = 2


def _same_work_lesson():
    from memlens.core.lessons.catalog import Claim, Lesson, Metric

    return Lesson(
        "same_work", "A/A: eval_mode without an eval phase", "eval_mode off", "eval_mode on",
        off={"eval_mode": False}, on={"eval_mode": True}, base={"eval_every": 0},
        metrics=(Metric("step time", "time", "step", "step_ms",
                        claim=Claim("about 20% faster", "lower", -0.20)),))


def _busy_loops() -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(BUSY_LOOPS)]


def _end(loops: list[subprocess.Popen]) -> None:
    for p in loops:
        p.kill()
    for p in loops:
        p.wait(timeout=30)


def _until_loaded(load: float, limit_s: float = 60.0) -> None:
    """Until the 1-minute load average the report reads shows the loops (at most
    `limit_s`: it rises over about a minute)."""
    t0 = time.monotonic()
    while os.getloadavg()[0] < load and time.monotonic() - t0 < limit_s:
        time.sleep(1.0)


def run(s: Settings) -> list[Figure]:
    from memlens.core.lessons.adaptive import Budget
    from memlens.core.lessons.runner import LessonRunner

    presets = ["mlp"] if s.quick else ["mlp", "gan"]
    budget = Budget(step_s=8.0 if s.quick else 20.0, max_blocks=40 if s.quick else 120)
    lesson = _same_work_lesson()
    rows, notes = [], []
    loops = _busy_loops()
    try:
        _until_loaded(BUSY_LOOPS - 0.5)
        for forced in ({}, {"threads": 2}):
            report = LessonRunner(presets, quick=True, settings=forced, lessons=(lesson,),
                                  budget=budget).run()
            for r in report.rows:
                rows.append(r)
                notes.append(f"{r.preset} threads {r.machine.get('threads')}: "
                             f"{r.verdict} ({(r.change or 0) - 1:+.0%})")
    finally:
        _end(loops)
    false = sum(r.verdict in JUDGED for r in rows)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return [
        Figure("lessons_false_time_verdicts_under_load",
               f"false time verdicts, {BUSY_LOOPS} busy loops", false, "", 0, "lower",
               f"{len(rows)} A/A lessons; " + "; ".join(notes)),
        Figure("lessons_load_during", "load average beside them (1 min)", load, "",
               note=f"{os.cpu_count()} CPUs"),
    ]

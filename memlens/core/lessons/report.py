"""A lessons report on disk: lessons.json (every row), lessons.md (the table, the verdicts)
and one chart per lesson and preset (SVG here; PNG where a renderer is given)."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import groupby
from pathlib import Path

from memlens.core.lessons.chart import chart_svg, format_value
from memlens.core.lessons.report_folder import (
    CHARTS,
    LESSONS_JSON,
    LESSONS_MD,
    REPORT_FORMAT,
    written_run_folders,
)
from memlens.core.lessons.verdict import MIN_TIME_BLOCKS
from memlens.core.model_file import preset_label
from memlens.core.runfolder.atomic import atomic_write_text

REPORT_VERSION = 1


def report_dict(report) -> dict:
    return {
        "format": REPORT_FORMAT, "version": REPORT_VERSION,
        "presets": report.presets, "steps": report.steps, "block": report.block,
        "quick": report.quick, "budget_s": report.budget_s, "device": report.device,
        "stopped": report.stopped,
        "wall_s": round(report.wall_s, 1), "environment": report.environment,
        "notes": {
            "memory": "exact bytes at the named phase boundary (the same figures `run` "
                      "writes in memory.csv / steps.csv); no interval: nothing to sample",
            "time": "the arms take turns block by block (ABBA), the first 2 steps of "
                    "each left out; off, on: the median of the arm's block medians; change: "
                    "the median of on / off over the rounds (a round's two blocks ran side "
                    "by side); ci_low..ci_high: its 95% percentile bootstrap over the "
                    "rounds, widened to the run's own noise (the same statistic between an "
                    "arm's own blocks one to four rounds apart, where nothing changed); "
                    "within noise when that includes 1, or when an arm ran on more compute "
                    "threads than the machine had free cores (a row's machine: cores, "
                    "threads, load average), with the reason in the note; a lesson with a "
                    "claimed time adds rounds until the interval excludes 1 or the claimed "
                    "size, or budget_s of step time is spent; fewer than "
                    f"{MIN_TIME_BLOCKS} rounds: no interval and the verdict 'too few "
                    "samples', the change as measured",
            "peak_cpu": "CPU step peak outside precise mode is the largest phase-boundary "
                        "sample, a lower bound: its verdict is 'lower bound', never judged "
                        "(the lessons whose claim is about a peak run in precise mode: "
                        "no_grad_eval's peak inside the eval forward, zero_grad's, AMP's and "
                        "accumulate's step peaks are the allocator's own, exact); CUDA's is "
                        "max_memory_allocated",
        },
        "rows": [r.to_dict() for r in report.rows],
    }


def groups(rows: list) -> list[tuple[tuple[str, str], list]]:
    """Rows by (lesson, preset), in report order."""
    return [(k, list(g)) for k, g in groupby(rows, key=lambda r: (r.lesson, r.preset))]


def chart_name(lesson: str, preset: str) -> str:
    return f"{preset}-{lesson}"


def write_report(report, out: str | Path,
                 png: Callable[[str, Path], None] | None = None) -> list[Path]:
    """Write the report into `out`; `png(svg_text, path)` renders each chart as PNG too.
    lessons.json lists every file written and the arms' run folders in `out` (the report's
    own record: what --force may delete, report_folder). Returns the files written."""
    out = Path(out)
    charts = {key: Path(CHARTS) / chart_name(*key) for key, _rows in groups(report.rows)}
    suffixes = (".svg", ".png") if png is not None else (".svg",)
    files = [Path(LESSONS_JSON), *(c.with_suffix(x) for c in charts.values() for x in suffixes),
             Path(LESSONS_MD)]
    doc = report_dict(report)
    doc["files"] = [f.as_posix() for f in files]
    doc["run_folders"] = written_run_folders(
        [folder for r in report.rows for folder in r.runs.values() if folder], out)
    atomic_write_text(out / LESSONS_JSON, json.dumps(doc, indent=1))
    for (lesson, preset), rows in groups(report.rows):
        svg = chart_svg(rows)
        base = out / charts[(lesson, preset)]
        atomic_write_text(base.with_suffix(".svg"), svg)
        if png is not None:
            png(svg, base.with_suffix(".png"))
    atomic_write_text(out / LESSONS_MD, markdown(report, charts, png is not None))
    return [out / f for f in files]


def environment_line(env: dict) -> str:
    """Where the report was made, in one line: the CPU (model, ISA, native bf16), torch, its
    threads and the machine's load at the start and the end."""
    cpu = env.get("cpu") or {}
    load = env.get("load_average") or {}

    def avg(v):
        return f"{v[0]:.2f}" if v else "n/a"

    device = env.get("device_name") if str(env.get("device", "")).startswith("cuda") else (
        f"{cpu.get('cpu', 'CPU')} ({cpu.get('isa', '?')}, bf16 "
        f"{'native' if cpu.get('native_bf16') else 'emulated'})")
    cores = f" on {env['cores']} cores" if env.get("cores") else ""
    chosen = env.get("threads_note", "")
    threads = env.get("threads", "?")
    return (f"Environment: {device}; torch {env.get('torch', '?')}, "
            f"{threads} thread{'' if threads == 1 else 's'}{cores}; load average (1 min) "
            f"{avg(load.get('start'))} at the start, {avg(load.get('end'))} at the end."
            + (f" {chosen[0].upper() + chosen[1:]}." if chosen else ""))


def machine_text(machine: dict) -> str:
    """`load 1.9 -> 2.1 on 2 cores, 1 compute thread an arm`."""
    load = machine.get("load_average") or {}

    def avg(v):
        return "n/a" if v is None else f"{v:.1f}"

    threads = machine.get("threads", "?")
    return (f"load {avg(load.get('start'))} -> {avg(load.get('end'))} on "
            f"{machine.get('cores', '?')} cores, {threads} compute "
            f"thread{'' if threads == 1 else 's'} an arm")


def change_text(r) -> str:
    if r.change is None:
        return "n/a"
    text = f"{(r.change - 1) * 100:+.0f}%"
    if r.kind == "time" and r.ci_low is not None and r.ci_high is not None:
        text += f" ({(r.ci_low - 1) * 100:+.0f}% to {(r.ci_high - 1) * 100:+.0f}%)"
    elif r.kind == "time":
        text += " (too few samples)"
    return text


def markdown(report, charts: dict | None = None, with_png: bool = False) -> str:
    charts = charts or {}
    lines = [
        "# memlens lessons report", "",
        f"Presets: {', '.join(preset_label(p) for p in report.presets)}; "
        f"{report.steps} steps an arm in blocks of {report.block}, interleaved, and for a "
        f"time claim more rounds until it is decided or {report.budget_s:.0f} s of steps "
        "are spent; "
        f"device {report.device or 'n/a'}; "
        f"{report.wall_s:.0f} s" + (" (stopped: partial)" if report.stopped else "") + ".",
        "",
        environment_line(report.environment),
        "",
        "Memory: exact bytes. Time: the arms take turns block by block; off and on are "
        "each arm's median block, the change the median of on/off over the rounds (a "
        "round's two blocks ran side by side, so where the machine's speed jumps it can "
        "differ from the ratio of the two medians), with "
        "its 95% bootstrap interval widened to the run's own noise (an arm's blocks "
        "against its own a few rounds later); \"within noise\" when that includes 0%, "
        "or when an arm ran on more compute threads than there were free cores (the "
        "reason in the note); \"too few samples\" when the budget ended with fewer than "
        f"{MIN_TIME_BLOCKS} rounds (the change as measured, no interval).",
        "",
        *(["On CPU outside precise mode a step peak is the largest phase-boundary sample, "
           "a lower bound (CUDA's is max_memory_allocated): shown, with \"lower bound\" "
           "for a verdict. The lessons whose claim is about a peak run in precise mode, "
           "where it is exact (the eval forward's and the step's).",
           ""] if report.device.startswith("cpu") else []),
        "| preset | lesson | metric | off | on | change | claim | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes: list[str] = []  # each note once, numbered in the verdict column
    for r in report.rows:
        growth = "growth" in r.metric
        mark = ""
        if r.note:
            if r.note not in notes:
                notes.append(r.note)
            mark = f" [{notes.index(r.note) + 1}]"
        lines.append(
            f"| {r.preset} | {r.lesson} ({r.off_label} → {r.on_label}) | {r.metric} | "
            f"{format_value(r.kind, r.off, growth)} | {format_value(r.kind, r.on, growth)} | "
            f"{change_text(r)} | {r.claim or '—'} | {r.verdict or '—'}{mark} |")
    if notes:
        lines += ["", *(f"[{i}] {n[0].upper() + n[1:]}." for i, n in enumerate(notes, 1))]
    timed = [(key, rows[0].machine) for key, rows in groups(report.rows)
             if rows[0].machine and any(r.kind == "time" for r in rows)]
    if timed:
        lines += ["", "The machine while each lesson with a time figure ran (1-minute load "
                  "average as it began and ended, the arms' own thread in it):", ""]
        lines += [f"- {preset} {lesson}: {machine_text(m)}" for (lesson, preset), m in timed]
    if charts:
        lines += ["", "## Charts", ""]
        for (lesson, preset), rel in charts.items():
            ext = ".png" if with_png else ".svg"
            lines.append(f"![{lesson} on {preset}]({rel.with_suffix(ext).as_posix()})")
    return "\n".join(lines) + "\n"

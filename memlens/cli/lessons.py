"""`python main.py lessons`: the article's claims measured headless, a report written to a folder.

The measuring is memlens.core.lessons (Qt-free); the charts' PNGs are their SVGs rendered by
Qt on its offscreen platform whatever DISPLAY says (memlens.app.lessons.svg_png, imported
only when a PNG is written): no display is needed.
"""

from __future__ import annotations

import sys
import time

from memlens.cli.args import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    add_out,
    add_quiet,
    add_sets,
    command_parser,
    parse_sets,
    refuse,
)


def add_parser(subparsers) -> None:
    from memlens.core.lessons.adaptive import FULL_BUDGET, QUICK_BUDGET
    from memlens.core.lessons.catalog import LESSON_NAMES
    from memlens.core.lessons.runner import FULL_STEPS, QUICK_STEPS
    from memlens.core.options import PRESETS

    p = command_parser(
        subparsers, "lessons",
        "Run each lesson (a technique off and on, interleaved in blocks in one "
        "process) and write lessons.json, lessons.md and a chart per lesson (PNG and SVG). "
        "Ctrl-C stops and writes what was measured.",
    )
    p.add_argument("--preset", default="mlp", metavar="NAME|FILE.py|all",
                   help=f"the preset to measure on: {', '.join(PRESETS)}, a model file "
                   "(docs/model-files.md), or all the built-ins (default: mlp)")
    p.add_argument("--steps", type=int, help=f"steps an arm (default: {FULL_STEPS}; --quick: "
                   f"{QUICK_STEPS})")
    p.add_argument("--quick", action="store_true",
                   help="a few steps: the memory figures of the full report, and a small time "
                   "budget a lesson for its time claims (the full report: a larger one)")
    p.add_argument("--budget", type=float, metavar="SECONDS",
                   help="step time a lesson may spend on more rounds until its time claims "
                   f"are decided (default: {FULL_BUDGET.step_s:.0f}; --quick: "
                   f"{QUICK_BUDGET.step_s:.0f}; 0: the base steps only)")
    p.add_argument("--lesson", dest="lessons", action="extend", nargs="+", default=[],
                   metavar="NAME", help="only these lessons: " + ", ".join(LESSON_NAMES))
    add_sets(p, "settings for every run, e.g. --set device=cpu batch_size=64 threads=1")
    add_out(p, "report folder")
    add_quiet(p)


def _settings(args) -> dict:
    from memlens.core.config import RunConfig
    from memlens.core.lessons.catalog import LESSON_NAMES
    from memlens.core.model_file import resolve_preset, with_model_file
    from memlens.core.options import PRESETS, ConfigError

    if args.steps is not None and args.steps < 2:
        raise ConfigError("--steps: at least 2 steps an arm are needed to compare")
    if args.budget is not None and not args.budget >= 0:
        raise ConfigError(f"--budget {args.budget}: give seconds, 0 or more (0: the base "
                          "steps only)")
    unknown = [n for n in args.lessons if n not in LESSON_NAMES]
    if unknown:
        raise ConfigError(f"--lesson {unknown[0]!r}: no such lesson; lessons: "
                          f"{', '.join(LESSON_NAMES)}")
    values = parse_sets(args.sets)
    if "preset" in values or "steps" in values:
        raise ConfigError("--set: use --preset and --steps for those")
    presets = list(PRESETS) if args.preset == "all" else [resolve_preset(args.preset)]
    for preset in presets:  # every key and value, and a model file's CONFIG, checked now
        with_model_file(RunConfig().with_values({"preset": preset, **values}),
                        lambda base: base.with_values(values))
    return {"presets": presets, "settings": values}


def _budget(args):
    from dataclasses import replace

    from memlens.core.lessons.adaptive import FULL_BUDGET, QUICK_BUDGET

    if args.budget is None:
        return None
    return replace(QUICK_BUDGET if args.quick else FULL_BUDGET, step_s=args.budget)


def png_renderer(notes: list[str]):
    """The PNG writer, or None where Qt cannot be loaded (SVG only; said in `notes`)."""
    try:
        from PySide6.QtSvg import QSvgRenderer  # noqa: F401

        from memlens.app.lessons.svg_png import svg_to_png
    except ImportError as exc:
        notes.append(f"charts written as SVG only: Qt's SVG renderer is not available ({exc})")
        return None
    return svg_to_png


def main(args) -> int:
    from memlens.core.lessons.report import write_report
    from memlens.core.lessons.report_folder import claim_report_folder
    from memlens.core.lessons.runner import LessonRunner
    from memlens.core.options import ConfigError
    from memlens.core.run_guard import SignalStop
    from memlens.core.runfolder.atomic import ExportError

    try:
        chosen = _settings(args)
        runner = LessonRunner(chosen["presets"], steps=args.steps, quick=args.quick,
                              settings=chosen["settings"], names=tuple(args.lessons) or None,
                              progress=_progress(args.quiet), budget=_budget(args))
        plan = runner.plan()
        if not plan:
            raise ConfigError("no lesson applies to that preset and lesson choice")
        runner.check_fits()
        out = runner.out = claim_report_folder(args.out, args.force, said=_said)
    except (ConfigError, OSError) as exc:
        return refuse("lessons", exc)
    print(f"memlens lessons: {len(plan)} lessons, {runner.steps} steps an arm -> {out}",
          file=sys.stderr)
    try:
        with SignalStop(runner) as signals:  # Ctrl-C and SIGTERM: stop, write what was measured
            report = runner.run()
    except (ConfigError, ExportError) as exc:
        return refuse("lessons", exc)
    notes: list[str] = []
    try:
        written = write_report(report, out, png=png_renderer(notes))
    except ExportError as exc:
        return refuse("lessons", exc)
    _print_table(report)
    for note in notes:
        print(f"  note: {note}")
    print(f"wrote {written[-1]} and {len(written) - 1} more files in {out} "
          f"({report.wall_s:.0f} s)")
    if report.stopped:
        by = f" by {signals.received.name}" if signals.received is not None else ""
        print(f"stopped{by}: the report holds what was measured before the stop",
              file=sys.stderr)
        return signals.exit_code or EXIT_INTERRUPTED
    return EXIT_OK


def _said(text: str) -> None:
    print(f"memlens lessons: {text}", file=sys.stderr)


def _progress(quiet: bool, stream=None):
    """On a terminal one line, redrawn; in a log (no terminal) one line as each lesson
    starts, no carriage returns: a log reads a line per lesson."""
    from memlens.cli.progress import TTY_EVERY_S

    stream = stream if stream is not None else sys.stderr
    tty = stream.isatty()
    last = {"at": 0.0, "lesson": None}

    def progress(p) -> None:
        if quiet:
            return
        new = last["lesson"] != (p.index, p.lesson)
        if not tty:
            if new:
                last["lesson"] = (p.index, p.lesson)
                steps = f"up to {p.steps_total}" if p.adaptive else str(p.steps_total)
                print(f"  lesson {p.index + 1}/{p.count}: {p.lesson} on {p.preset}, "
                      f"{steps} steps", file=stream, flush=True)
            return
        now = time.monotonic()
        done = p.steps_done >= p.steps_total
        if not (new or done or now - last["at"] >= TTY_EVERY_S):
            return
        last["at"], last["lesson"] = now, (p.index, p.lesson)
        stream.write("\r  " + p.text().ljust(70) + ("\n" if done else ""))
        stream.flush()

    return progress


def _print_table(report) -> None:
    from memlens.core.lessons.chart import format_value
    from memlens.core.lessons.report import change_text

    for r in report.rows:
        growth = "growth" in r.metric
        print(f"  {r.preset:<11} {r.lesson:<18} {r.metric:<34} "
              f"{format_value(r.kind, r.off, growth):>14} -> "
              f"{format_value(r.kind, r.on, growth):<14} {change_text(r):<22} {r.verdict}")

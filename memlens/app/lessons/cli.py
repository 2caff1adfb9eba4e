"""`python main.py lessons`: the article's claims measured headless, a report written to a folder.

It lives in app/ for one reason: the charts' PNGs are the SVGs rendered by Qt (imported only
when a PNG is written); the measuring is memlens.core.lessons, Qt-free.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 2, 130


def add_parser(subparsers) -> None:
    from memlens.core.lessons.catalog import LESSON_NAMES
    from memlens.core.lessons.runner import FULL_STEPS, QUICK_STEPS
    from memlens.core.options import PRESETS

    p = subparsers.add_parser(
        "lessons", help="measure the article's claims: each technique off vs on",
        description="Run each lesson (a technique off and on, interleaved in blocks in one "
        "process) and write lessons.json, lessons.md and a chart per lesson (PNG and SVG). "
        "Ctrl-C stops and writes what was measured.",
    )
    p.add_argument("--preset", default="mlp", metavar="NAME|FILE.py|all",
                   help=f"the preset to measure on: {', '.join(PRESETS)}, a model file "
                   "(docs/model-files.md), or all the built-ins (default: mlp)")
    p.add_argument("--steps", type=int, help=f"steps an arm (default: {FULL_STEPS}; --quick: "
                   f"{QUICK_STEPS})")
    p.add_argument("--quick", action="store_true",
                   help="a few steps: the memory figures of the full report in under 2 minutes "
                   "a preset; time figures get too few samples to be judged")
    p.add_argument("--lesson", dest="lessons", action="extend", nargs="+", default=[],
                   metavar="NAME", help="only these lessons: " + ", ".join(LESSON_NAMES))
    p.add_argument("--set", dest="sets", action="extend", nargs="+", default=[],
                   metavar="KEY=VALUE",
                   help="settings for every run, e.g. --set device=cpu batch_size=64")
    p.add_argument("--out", metavar="DIR", help="report folder (default: a new folder in runs/)")
    p.add_argument("--quiet", action="store_true", help="no progress line")


def default_out() -> Path:
    base = Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-lessons"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def _settings(args) -> dict:
    from memlens.core.config import RunConfig
    from memlens.core.lessons.catalog import LESSON_NAMES
    from memlens.core.model_file import resolve_preset, with_model_file
    from memlens.core.options import PRESETS, ConfigError

    if args.steps is not None and args.steps < 2:
        raise ConfigError("--steps: at least 2 steps an arm are needed to compare")
    unknown = [n for n in args.lessons if n not in LESSON_NAMES]
    if unknown:
        raise ConfigError(f"--lesson {unknown[0]!r}: no such lesson; lessons: "
                          f"{', '.join(LESSON_NAMES)}")
    values = {}
    for text in args.sets:
        key, sep, raw = text.partition("=")
        if not sep:
            raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. batch_size=32")
        values[key.strip()] = raw
    if "preset" in values or "steps" in values:
        raise ConfigError("--set: use --preset and --steps for those")
    presets = list(PRESETS) if args.preset == "all" else [resolve_preset(args.preset)]
    for preset in presets:  # every key and value, and a model file's CONFIG, checked now
        with_model_file(RunConfig().with_values({"preset": preset, **values}),
                        lambda base: base.with_values(values))
    return {"presets": presets, "settings": values}


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
    from memlens.core.lessons.runner import LessonRunner
    from memlens.core.options import ConfigError
    from memlens.core.runfolder.atomic import ExportError

    try:
        chosen = _settings(args)
    except ConfigError as exc:
        print(f"memlens lessons: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = Path(args.out) if args.out else default_out()
    if (out / "lessons.json").exists():
        print(f"memlens lessons: {out} already holds a report; choose another --out "
              "(nothing is overwritten)", file=sys.stderr)
        return EXIT_BAD_INPUT
    last = [0.0]

    def progress(p) -> None:
        now = time.monotonic()
        if args.quiet or (now - last[0] < 0.2 and p.steps_done < p.steps_total):
            return
        last[0] = now
        sys.stderr.write("\r  " + p.text().ljust(70))
        sys.stderr.flush()

    runner = LessonRunner(chosen["presets"], steps=args.steps, quick=args.quick, out=out,
                          settings=chosen["settings"], names=tuple(args.lessons) or None,
                          progress=progress)
    try:
        plan = runner.plan()
    except ConfigError as exc:
        print(f"memlens lessons: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not plan:
        print("memlens lessons: no lesson applies to that preset and lesson choice",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"memlens lessons: {len(plan)} lessons, {runner.steps} steps an arm -> {out}",
          file=sys.stderr)
    try:
        report = runner.run()
    except ConfigError as exc:
        print(f"\nmemlens lessons: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not args.quiet:
        sys.stderr.write("\r" + " " * 74 + "\r")
    notes: list[str] = []
    try:
        written = write_report(report, out, png=png_renderer(notes))
    except ExportError as exc:
        print(f"memlens lessons: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    _print_table(report)
    for note in notes:
        print(f"  note: {note}")
    print(f"wrote {written[-1]} and {len(written) - 1} more files in {out} "
          f"({report.wall_s:.0f} s)")
    if report.stopped:
        print("stopped: the report holds what was measured before the stop", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def _print_table(report) -> None:
    from memlens.core.lessons.chart import format_value
    from memlens.core.lessons.report import change_text

    for r in report.rows:
        growth = "growth" in r.metric
        print(f"  {r.preset:<11} {r.lesson:<18} {r.metric:<34} "
              f"{format_value(r.kind, r.off, growth):>14} -> "
              f"{format_value(r.kind, r.on, growth):<14} {change_text(r):<22} {r.verdict}")

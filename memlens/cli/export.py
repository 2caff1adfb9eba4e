"""`python main.py export RUN_DIR --format ...`: convert a saved run folder for other tools."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memlens.cli.args import EXIT_OK, command_parser, count, refuse


def _formats(text: str) -> list[str]:
    """The names as given (checked): "all" stays "all", so a run that cannot give one
    format gets the others, while a format asked for by name must be produced."""
    from memlens.core.exports import parse_formats

    names = [f.strip().lower() for f in text.split(",") if f.strip()]
    try:
        parse_formats(names)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return names


def add_parser(subparsers) -> None:
    from memlens.core.exports import DEFAULT_MAX_ENTRIES, DEFAULT_MAX_ROWS

    p = command_parser(
        subparsers, "export",
        "Convert a run folder for the tools people already use: snapshot.pickle "
        "(PyTorch memory_viz; needs a precise run), trace.json (ui.perfetto.dev, "
        "chrome://tracing), memory_timeline.json (the layout of torch.profiler's "
        "export_memory_timeline). See docs/exports.md.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="a run folder (steps.csv, memory.csv, run.json)")
    p.add_argument("--format", "-f", dest="formats", type=_formats, default=["all"],
                   metavar="FORMATS",
                   help="snapshot, trace, timeline (comma-separated) or all (default: all); "
                   "allocations writes allocations.csv, only when named")
    p.add_argument("--out", metavar="DIR", help="where to write the files (default: RUN_DIR)")
    p.add_argument("--max-entries", type=count, default=DEFAULT_MAX_ENTRIES, metavar="N",
                   help="snapshot: keep the last N trace entries, as CUDA's ring buffer "
                   f"does (default {DEFAULT_MAX_ENTRIES:,}; 0: all)")
    p.add_argument("--max-rows", type=count, default=DEFAULT_MAX_ROWS, metavar="N",
                   help="timeline: at most N rows, thinned keeping each stretch's peak "
                   f"(default {DEFAULT_MAX_ROWS:,}; 0: one row per event time)")


def main(args) -> int:
    from memlens.core.excerpt import printable
    from memlens.core.exports import export_run
    from memlens.core.runfolder.atomic import ExportError
    from memlens.core.runfolder.format import RunFolderError
    from memlens.core.runfolder.reader import load_run

    try:
        history = load_run(args.run_dir)
    except RunFolderError as exc:
        return refuse("export", exc)
    out = Path(args.out) if args.out else Path(args.run_dir)
    notes: list[str] = []
    try:
        written = export_run(history, out, args.formats, max_entries=args.max_entries,
                             max_rows=args.max_rows, notes=notes)
    except ExportError as exc:
        return refuse("export", exc)
    for path in written:
        print(printable(f"wrote {path}"))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return EXIT_OK

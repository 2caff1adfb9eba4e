"""`python -m benchmarks [--quick] [--json FILE] [--only GROUP,...]`: every figure, one table.

Each group runs in its own child process, so one group's memory, threads or Qt application
cannot colour the next one's figures, and a group that fails is reported while the others
still run. The exit status is 1 when a group failed with an error, else 0: a missed target
is printed as MISS but never fails the run (timing on a shared machine is too noisy for CI).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks._common import Figure, Settings, fmt, machine, run_child

GROUPS: tuple[str, ...] = ("overhead", "gui_load", "history_memory", "graph", "startup", "export",
                          "watch", "lessons_load")


def settings(args: argparse.Namespace) -> Settings:
    reps = args.reps or (3 if args.quick else 15)
    warmup = 1 if args.quick else 3
    return Settings(quick=args.quick, threads=args.threads, reps=reps, warmup=warmup)


def run_group(group: str, s: Settings) -> list[Figure]:
    """In the child process: set torch's threads the same for every side, run one group."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if group in ("overhead", "graph", "export"):
        import torch

        torch.set_num_threads(s.threads)
    if group in ("gui_load", "graph", "export", "watch"):
        _quiet_offscreen_warning()
    module = __import__(f"benchmarks.{group}", fromlist=["run"])
    return module.run(s)


def _quiet_offscreen_warning() -> None:
    """The offscreen platform warns on every window that it ignores size hints: noise."""
    from PySide6.QtCore import qInstallMessageHandler

    def handler(mode, context, message: str) -> None:
        if "propagateSizeHints" not in message:
            sys.stderr.write(message + "\n")

    qInstallMessageHandler(handler)


def _child(args: argparse.Namespace) -> int:
    figures = run_group(args.child, settings(args))
    Path(args.out).write_text(json.dumps([asdict(f) for f in figures]), encoding="utf-8")
    return 0


def _print_rows(figures: list[Figure]) -> None:
    for f in figures:
        print(f"  {f.label:<44} {f.target:>13} {fmt(f.value, f.unit):>14} {f.verdict:>5}"
              f"  {f.note}", flush=True)


def markdown(figures: list[Figure], heading: str, failed: list[str]) -> str:
    rows = ["| figure | key | target | measured | | note |", "|---|---|---|---|---|---|"]
    for f in figures:
        note = f.note.replace("|", "/")
        rows.append(f"| {f.label.strip()} | `{f.name}` | {f.target} | {fmt(f.value, f.unit)} "
                    f"| {'**MISS**' if f.hit is False else f.verdict} | {note} |")
    tail = f"\n\nGroups that failed: {', '.join(failed)}\n" if failed else "\n"
    return heading + "\n\n" + "\n".join(rows) + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: short, few repetitions (CI); figures are rough")
    parser.add_argument("--json", metavar="FILE", help="also write {figure_name: number}")
    parser.add_argument("--markdown", metavar="FILE",
                        help="also write the table as Markdown (for docs/benchmarks.md)")
    parser.add_argument("--only", metavar="GROUPS",
                        help=f"comma-separated groups to run: {', '.join(GROUPS)}")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads for every timed side (default 1: on a "
                             "shared machine more threads mostly add noise)")
    parser.add_argument("--reps", type=int, default=0,
                        help="interleaved repetitions per ratio (default 15; quick 3)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)

    groups = list(GROUPS)
    if args.only:
        groups = [g.strip() for g in args.only.split(",") if g.strip()]
        bad = [g for g in groups if g not in GROUPS]
        if bad:
            parser.error(f"unknown group {', '.join(bad)}; groups: {', '.join(GROUPS)}")
    s = settings(args)
    info = machine()
    import torch  # only for its version, in the table's heading

    heading = (f"memlens benchmarks{' (quick)' if s.quick else ''}: {info['nproc']} CPUs, "
               f"{info['cpu']}, torch {torch.__version__}, Python {info['python']}, "
               f"torch threads {s.threads}, {s.reps} interleaved repetitions after "
               f"{s.warmup} warm-up, load average at start {info['load_avg']}")
    print(heading)
    print(f"  {'figure':<44} {'target':>13} {'measured':>14} {'':>5}  note")
    figures: list[Figure] = []
    failed: list[str] = []
    passthrough = ["--threads", str(args.threads), "--reps", str(s.reps)]
    if args.quick:
        passthrough.append("--quick")
    for group in groups:
        print(f"[{group}]", flush=True)
        t0 = time.perf_counter()
        rc, data = run_child(["benchmarks", "--child", group, *passthrough])
        if data is None:
            failed.append(group)
            print(f"  ERROR: group {group} failed (exit status {rc})", flush=True)
            continue
        rows = [Figure(**d) for d in data]
        _print_rows(rows)
        print(f"  ({group}: {time.perf_counter() - t0:.0f} s)", flush=True)
        figures += rows

    missed = [f for f in figures if f.hit is False]
    print(f"\n{sum(f.hit is True for f in figures)} targets hit, {len(missed)} missed"
          + (f": {', '.join(f.name for f in missed)}" if missed else "")
          + (f"; groups failed: {', '.join(failed)}" if failed else ""))
    if args.markdown:
        Path(args.markdown).write_text(markdown(figures, heading, failed), encoding="utf-8")
    if args.json:
        # A figure that could not be measured is null, not NaN (which is not JSON).
        flat = {f.name: (None if f.value is None or f.value != f.value else f.value)
                for f in figures}
        flat["targets_hit"] = sum(f.hit is True for f in figures)
        flat["targets_missed"] = len(missed)
        flat["groups_failed"] = len(failed)
        Path(args.json).write_text(json.dumps(flat, indent=1) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""`python main.py fix SCRIPT.py [--out DIR] [--steps N] [--write] [-- ARGS]`: watch the
script, make each diagnosis's mechanical fix on a copy, run both, print the saving
(core.fix; docs/fix.md)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

from memlens.cli.args import (
    EXIT_FAILED,
    EXIT_OK,
    add_script,
    command_parser,
    count,
    refuse,
    refuse_script_args,
)
from memlens.core.exits import EXIT_SIGNAL_BASE


def add_parser(subparsers) -> None:
    from memlens.core.fix.engine import DEFAULT_STEPS

    p = command_parser(
        subparsers, "fix",
        "Watch SCRIPT.py for --steps optimizer steps (as `watch` runs it), make the smallest "
        "source change for each diagnosis that has a mechanical fix on a copy of the script "
        "(DIR/fixed/), watch the copy for the same steps and arguments, and print per fix "
        "its diff, memory before -> after, the step-time ratio with its 95% interval and "
        "whether the script's printed results stayed the same. Writes DIR/fix.json and "
        "DIR/fix.diff. Your files change only with --write. The script's own arguments go "
        "after -- (any option fix does not know goes to the script too).",
    )
    add_script(p)
    p.add_argument("--out", metavar="DIR",
                   help="the fix folder (default: a new runs/<time>-fix-<script>); refused "
                   "if it holds an earlier fix")
    p.add_argument("--steps", type=count, default=DEFAULT_STEPS, metavar="N",
                   help=f"optimizer steps each run (default {DEFAULT_STEPS})")
    p.add_argument("--write", action="store_true",
                   help="apply the accepted fixes to your files, each backed up beside it "
                   "first (SCRIPT.py.orig, never overwritten), only if unchanged since the run")


def main(args) -> int:
    from pathlib import Path

    from memlens.core.fix.engine import FixInputError, fix_script
    from memlens.core.fix.write import FixWriteError, why_not_writable, write_fix

    refused = refuse_script_args("fix", args, [
        (args.steps < 1, "--steps 0: give the number of optimizer steps each run makes "
                         "(1 or more)")])
    if refused is not None:
        return refused
    if args.write:
        why = why_not_writable(Path(args.script))
        if why:  # refused before anything runs: the runs would be for nothing
            return refuse("fix", f"--write: {why}")

    def progress(stage: int, stages: int, what: str) -> None:
        print(f"memlens fix: [{stage}/{stages}] {what}", file=sys.stderr, flush=True)

    try:
        with _ended_by_sigterm():
            outcome = fix_script(Path(args.script), list(getattr(args, "passthrough", [])),
                                 out=args.out, steps=args.steps, progress=progress)
    except FixInputError as exc:
        return refuse("fix", exc)
    print(outcome.text(args.steps), end="")
    print(f"memlens fix: wrote {outcome.out}/fix.json and fix.diff"
          + (f", the patched copy in {outcome.out}/fixed/" if outcome.after else ""),
          file=sys.stderr)
    if outcome.after is not None and not outcome.patched_ok:
        print(f"memlens fix: {outcome.why_not}; your files were not changed", file=sys.stderr)
        return EXIT_FAILED
    if not args.write:
        return EXIT_OK
    if outcome.after is None:
        print("memlens fix: nothing to write: no fix was made", file=sys.stderr)
        return EXIT_OK
    try:
        written = write_fix(outcome.out)
    except FixWriteError as exc:
        return refuse("fix", exc)
    for path in written:
        print(f"memlens fix: wrote {path} (backup: {path}.orig)", file=sys.stderr)
    return EXIT_OK


@contextlib.contextmanager
def _ended_by_sigterm():
    """SIGTERM (the app's Close while a fix runs) ends fix as an exception, so the watched
    run it is waiting for is killed with it rather than left running alone."""
    def stop(signum, _frame):
        raise SystemExit(EXIT_SIGNAL_BASE + signum)

    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, stop) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, old)

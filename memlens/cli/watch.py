"""`python main.py watch SCRIPT.py [-- ARGS]`: run a script as Python would, recording it."""

from __future__ import annotations

from memlens.cli.args import add_out, add_script, command_parser, count, refuse, refuse_script_args
from memlens.core.options import MAX_STEPS


def add_parser(subparsers) -> None:
    p = command_parser(
        subparsers, "watch",
        "Run SCRIPT.py as `python SCRIPT.py ARGS` would (same sys.argv, "
        "__name__ == '__main__', its folder on sys.path, its exit code), finding its models "
        "and optimizers, and write a run folder as it goes. The options below are memlens's "
        "wherever they stand; every other argument goes to the script "
        "(main.py watch train.py --epochs 2), and everything after -- does.",
    )
    add_script(p)
    add_out(p)
    p.add_argument("--precise", action="store_true",
                   help="track every storage (exact in-step peak, allocations.npy); slower")
    p.add_argument("--capture-every", type=int, default=0, metavar="N",
                   help="capture the autograd graph from the loss passed to backward every N "
                   "steps (run.json `graphs`: nodes, bytes saved for backward)")
    p.add_argument("--at", dest="ats", action="append", default=[], metavar="STEP:KEY=VALUE",
                   help="change a technique at the first step boundary at or after STEP "
                   "(repeat --at for more): zero_grad=set_to_none|zeros|off, "
                   "detach_state=true|false, no_grad_eval=true|false, eval_mode=true|false, "
                   "amp=off|bf16|fp16, or KEY=script (as the script wrote it); "
                   "docs/watch.md#toggling-techniques")
    p.add_argument("--control", metavar="FILE",
                   help="a file of JSON-lines commands read at each step boundary (technique "
                   "changes, pause, resume, stop): how the app's File > Watch a script "
                   "drives the run")
    p.add_argument("--detail", default=None, metavar="every|auto|N",
                   help="which steps measure what is saved for backward (activations, AMP "
                   "casts): auto (the default: every step where it costs under 2%% of one, "
                   "else the first, every Nth, at each change and every step once a loop "
                   "keeps what it saved; the others carry it, memory.csv `carried`), every, "
                   "or every Nth")
    p.add_argument("--stop-after", type=count, default=0, metavar="N",
                   help="end the script where its step N+1 would begin (exit code 0, the run "
                   "folder complete; 0: run to its end)")


def main(args) -> int:
    from memlens.core.watch.script import run_script

    refused = refuse_script_args("watch", args, [
        (not 0 <= args.capture_every <= MAX_STEPS,
         f"--capture-every {args.capture_every}: give a number of steps from 0 (never) to "
         f"{MAX_STEPS:_}")], out_hint=" for a new folder in runs/")
    if refused is not None:
        return refused
    from memlens.core.options import ConfigError
    from memlens.core.watch.detail import parse_detail
    from memlens.core.watch.toggles import parse_changes

    try:
        at = parse_changes(args.ats)
    except ConfigError as exc:
        return refuse("watch", exc)
    try:
        if args.detail is not None:
            parse_detail(args.detail)  # a bad one: one line, before the script runs
    except ValueError as exc:
        return refuse("watch", f"--detail {args.detail}: {exc}")
    from memlens.integrations.attach import attach_framework_callback
    from memlens.integrations.relaunch import relaunched_ranks

    return run_script(args.script, getattr(args, "passthrough", []), out=args.out,
                      precise=args.precise, capture_every=args.capture_every, force=args.force,
                      model_found=attach_framework_callback, at=at, control=args.control,
                      around=relaunched_ranks, stop_after=args.stop_after,
                      detail=args.detail)

"""`python main.py shot`: run the real window offscreen for N steps and save a screenshot.

The README's pictures come from here, so they show what a user sees: the same window, the
same loop, toggles scheduled with --at exactly as live flips would apply (memlens.app.shot).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from memlens.cli.args import add_config_arguments, build_config, command_parser, refuse

# The largest window a shot makes: an 8K screen. Far larger ones ask the raster engine for
# an image it cannot allocate, and it crashes rather than fails.
MAX_SIZE = (7680, 4320)
MIN_SIZE = (400, 300)


def add_parser(subparsers) -> None:
    p = command_parser(
        subparsers, "shot",
        "Open the real window offscreen, run a preset for N steps (toggles "
        "scheduled with --at apply at step boundaries, as live flips do) and save the window "
        "as a PNG. A training error is shown as the app shows it (paused, explained).",
    )
    add_config_arguments(p)
    p.add_argument("--steps", type=int, default=60, help="steps to run (default 60)")
    p.add_argument("--out", required=True, metavar="FILE.png", help="where to save the PNG")
    p.add_argument("--size", default="1480x920", metavar="WxH", help="window size in pixels")
    p.add_argument("--hover", type=float, metavar="STEP",
                   help="show the values at this step, as hovering there does")
    p.add_argument("--resume", action="store_true",
                   help="when the run pauses on a training error, resume it as the Resume button "
                   "does (pair it with an --at change that fixes the cause)")
    p.add_argument("--baseline", action="extend", nargs="+", default=None, metavar="KEY=VALUE",
                   help="first run the same settings with these changes (and no --at), pin it, "
                   "then run the main one over it: a before/after picture")
    p.add_argument("--tab", choices=("timeline", "graph"), default="timeline",
                   help="which centre tab to show")
    p.add_argument("--open", metavar="PATH", dest="open_path",
                   help="run nothing: open this run folder or snapshot.pickle as File > Open "
                   "does and save the window showing it")
    p.add_argument("--at-event", type=int, metavar="N",
                   help="with --open SNAPSHOT: list what was alive after event N, as a click "
                   "on the plot there does (0 is before the first event)")
    p.add_argument("--theme", choices=("light", "dark"), default="light",
                   help="colour theme of the picture (the app itself follows the system's)")
    p.add_argument("--timeout", type=float, default=900.0, metavar="S",
                   help="give up waiting for the run after S seconds (the shot is still saved)")
    p.add_argument("--precise", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--synthetic", action="store_true", help=argparse.SUPPRESS)


def _size(text: str) -> tuple[int, int]:
    w, sep, h = text.lower().partition("x")
    ok = sep and w.isdigit() and h.isdigit()
    if not ok or not (MIN_SIZE[0] <= int(w) <= MAX_SIZE[0]
                      and MIN_SIZE[1] <= int(h) <= MAX_SIZE[1]):
        raise ValueError(f"--size {text!r}: expected WIDTHxHEIGHT from "
                         f"{MIN_SIZE[0]}x{MIN_SIZE[1]} to {MAX_SIZE[0]}x{MAX_SIZE[1]}")
    return int(w), int(h)


def _timeout(seconds: float) -> float:
    if not (0 < seconds < float("inf")):
        raise ValueError(f"--timeout {seconds:g}: give a number of seconds > 0")
    return seconds


def check_out(text: str) -> Path:
    """--out: a .png file whose folder exists or can be made, not a folder itself."""
    out = Path(text).expanduser()
    if out.suffix.lower() != ".png":
        raise ValueError(f"--out {text!r}: the screenshot is a .png file")
    if out.is_dir():
        raise ValueError(f"--out {text!r} is a folder; give the path of a .png file")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"--out {text!r}: {str(parent)!r} is a file, not a folder")
            break
    return out


def main(args) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from dataclasses import replace

    from memlens.core.options import ConfigError

    try:
        config = build_config(args)
        baseline = None
        if args.baseline is not None:
            baseline = replace(config, schedule=()).with_sets(args.baseline)
        size = _size(args.size)
        _timeout(args.timeout)
        out = check_out(args.out)
        if args.at_event is not None and args.open_path is None:
            raise ValueError(f"--at-event {args.at_event}: give the snapshot with --open")
    except (ConfigError, ValueError) as exc:
        return refuse("shot", exc)
    from memlens.app import shot

    if args.open_path is not None:
        return shot.shoot_opened(args.open_path, out, size, args.tab, args.theme,
                                 args.at_event)
    return shot.shoot_run(config, baseline, out, size, args)

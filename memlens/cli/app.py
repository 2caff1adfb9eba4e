"""`python main.py` or `python main.py app`: the desktop window (opening or following a run)."""

from __future__ import annotations

import sys
from pathlib import Path

from memlens.cli.args import EXIT_FAILED, command_parser, refuse


def add_parser(subparsers) -> None:
    p = command_parser(subparsers, "app", "Open the desktop app: the lab, opened runs and "
                       "snapshots, runs followed as another process writes them.")
    p.add_argument("--open", metavar="PATH", dest="open_path",
                   help="open a run folder or a snapshot.pickle, as File > Open does")
    p.add_argument("--follow", metavar="DIR",
                   help="follow a run folder another process is writing (one that does not "
                   "exist yet is waited for)")


def main(args) -> int:
    open_path = getattr(args, "open_path", None)
    follow = getattr(args, "follow", None)
    if open_path is not None:
        from memlens.core.runfolder.open_target import OpenError, check_openable

        try:
            check_openable(open_path)
        except OpenError as exc:
            return refuse("app", f"cannot open {open_path}: {exc}")
    if follow is not None:
        target = Path(follow).expanduser()
        if not follow.strip() or (target.exists() and not target.is_dir()):
            return refuse("app", f"--follow {follow!r}: follow a run folder (a folder another "
                          "process writes), not a file")
    # Before Qt: a missing system library gets package names, not Qt's abort (exit 134).
    from memlens.app.platform_check import check

    report = check()
    if not report.ok:
        print(report.message, file=sys.stderr)
        return EXIT_FAILED
    from memlens.app.window.launch import launch

    return launch(open_path=open_path, follow=follow)

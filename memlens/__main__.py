"""`python -m memlens`, the `memlens` console script and `python main.py`: the app, or a
headless subcommand of the same core."""

from __future__ import annotations

import importlib
import sys

# Subcommand -> module with `add_parser(subparsers)` and `main(args) -> int`. Imported lazily
# so `python main.py` pays only for what it uses.
COMMANDS = {
    "run": "memlens.core.cli_run",
    "graph": "memlens.core.graph.cli",
    "export": "memlens.core.exports.cli",
    "shot": "memlens.app.shot",
    "watch": "memlens.core.watch.cli",
    "lessons": "memlens.app.lessons.cli",
}


def main(argv: list[str] | None = None) -> int:
    import argparse

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="memlens",
        description="See what a PyTorch training loop does to memory and the autograd graph.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    app_parser = sub.add_parser("app", help="open the desktop app (the default)")
    app_parser.add_argument("--open", metavar="PATH", dest="open_path",
                            help="open a run folder or a snapshot.pickle, as File > Open does")
    app_parser.add_argument("--follow", metavar="DIR",
                            help="follow a run folder another process is writing")
    modules = {name: importlib.import_module(m) for name, m in COMMANDS.items()}
    for module in modules.values():
        module.add_parser(sub)
    # Everything after "--" belongs to the program a command runs (`watch SCRIPT -- ARGS`).
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    args.passthrough = passthrough
    if passthrough and args.command != "watch":
        parser.error(f"arguments after -- are for `watch` only: {' '.join(passthrough)}")
    if args.command in (None, "app"):
        open_path = getattr(args, "open_path", None)
        if open_path is not None:
            from memlens.core.runfolder.open_target import OpenError, check_openable

            try:
                check_openable(open_path)
            except OpenError as exc:
                print(f"memlens app: cannot open {open_path}: {exc}", file=sys.stderr)
                return 2
        # Before Qt: a missing system library gets package names, not Qt's abort (exit 134).
        from memlens.app.platform_check import check

        report = check()
        if not report.ok:
            print(report.message, file=sys.stderr)
            return 1
        from memlens.app.main_window import launch

        return launch(open_path=open_path, follow=getattr(args, "follow", None))
    return modules[args.command].main(args)


if __name__ == "__main__":
    sys.exit(main())

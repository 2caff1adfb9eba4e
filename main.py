"""memlens entry point: `python main.py` opens the app; subcommands run the same core headless."""

from __future__ import annotations

import importlib
import sys

# Subcommand -> module with `add_parser(subparsers)` and `main(args) -> int`. Imported lazily
# so `python main.py` pays only for what it uses.
COMMANDS = {
    "run": "core.cli_run",
    "graph": "core.graph.cli",
    "export": "core.exports.cli",
    "shot": "app.shot",
    "lessons": "app.lessons_cli",
}


def main(argv: list[str] | None = None) -> int:
    import argparse

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="memlens",
        description="See what a PyTorch training loop does to memory and the autograd graph.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("app", help="open the desktop app (the default)")
    modules = {}
    for name, module_name in COMMANDS.items():
        try:
            modules[name] = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue  # that subcommand is not built yet
            raise
        modules[name].add_parser(sub)
    args = parser.parse_args(argv)
    if args.command in (None, "app"):
        from app.main_window import launch

        return launch()
    return modules[args.command].main(args)


if __name__ == "__main__":
    sys.exit(main())

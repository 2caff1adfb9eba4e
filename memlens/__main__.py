"""`python -m memlens`, the `memlens` console script and `python main.py`: the app, or one of
the headless commands (memlens.cli). Only the command that runs is imported."""

from __future__ import annotations

import argparse
import importlib
import sys

from memlens.cli import COMMANDS

SCRIPT_COMMANDS = ("watch", "fix")  # commands that run a user's script with its own arguments


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Everything after "--" belongs to the program a command runs (`watch SCRIPT -- ARGS`).
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = argparse.ArgumentParser(
        prog="memlens",
        description="See what a PyTorch training loop does to memory and the autograd graph.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    module = None
    for name, (path, help_text) in COMMANDS.items():
        if name == chosen:
            module = importlib.import_module(path)
            module.add_parser(sub)
        else:  # listed in --help; its own arguments are read only when it runs
            sub.add_parser(name, help=help_text, add_help=False)
    if chosen is not None and chosen not in COMMANDS:
        parser.error(f"unknown command {chosen!r}; commands: {', '.join(COMMANDS)}")
    if chosen in SCRIPT_COMMANDS:  # what is not memlens's after the script is the script's
        args, extra = parser.parse_known_args(argv)
        passthrough = extra + passthrough
    else:
        args = parser.parse_args(argv)
    args.passthrough = passthrough
    if passthrough and args.command not in SCRIPT_COMMANDS:
        parser.error(f"arguments after -- are for `watch` and `fix` only: "
                     f"{' '.join(passthrough)}")
    if module is None:  # no command: the app, as `app` with no arguments
        from memlens.cli import app as module
    return module.main(args)


if __name__ == "__main__":
    sys.exit(main())

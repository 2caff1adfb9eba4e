"""`python -m memlens`, the `memlens` console script and `python main.py`: the app, or one of
the headless commands (memlens.cli). Only the command that runs is imported."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
from collections import Counter

from memlens.cli import COMMANDS
from memlens.core.exits import EXIT_INTERRUPTED

SCRIPT_COMMANDS = ("watch", "fix")  # commands that run a user's script with its own arguments


def main(argv: list[str] | None = None) -> int:
    """Run the command; a Ctrl-C that reaches here (before a command's own handling is in
    place, as while torch loads) ends it with one line and exit 130, never a traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        sys.stderr.write("\nmemlens: stopped by Ctrl-C (SIGINT)\n")
        return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
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
    before = set(threading.enumerate())
    code = module.main(args)
    if args.command != "watch":  # a watched script's threads are its own, as unwatched
        _end_if_threads_left(args.command or "app", code, before)
    return code


OWN_THREADS = "memlens-"  # the names of memlens's own threads


def _end_if_threads_left(command: str, code: int, before: set[threading.Thread]) -> None:
    """A command's work is done, but threads started meanwhile (a model file's poller, a
    logger) would keep Python from exiting, forever for a thread that loops: name them and
    end the process with the command's exit code. Thread pools' workers and memlens's own
    threads (`memlens-...`: the app's AMP check, which ends in seconds) are left out: they
    end by themselves."""
    left = [t for t in threading.enumerate()
            if t not in before and t.is_alive() and not t.daemon
            and not t.name.startswith(OWN_THREADS)
            and not getattr(getattr(t, "_target", None), "__module__", "").startswith(
                "concurrent.futures")]
    if not left:
        return
    counts = Counter(t.name for t in left)
    names = ", ".join(n if k == 1 else f"{n} ({k} threads)" for n, k in counts.most_common(5))
    print(f"memlens {command}: done (exit code {code}), but threads started by the model "
          f"file or its libraries still run ({names}): ending the process, as they would "
          "keep it from exiting", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())

"""What the commands share: their exit codes, their arguments' shapes, and the one line a
refused input gets."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence

from memlens.core.exits import (  # noqa: F401 - the commands take them from here
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TRAINING_ERROR,
)


def command_parser(subparsers, name: str, description: str, **kwargs) -> argparse.ArgumentParser:
    """The command's parser, its one line of help from memlens.cli.COMMANDS."""
    from memlens.cli import COMMANDS

    return subparsers.add_parser(name, help=COMMANDS[name][1], description=description,
                                 **kwargs)


def say(command: str, message: object, file=None) -> None:
    """One line naming the command (stderr unless `file`), printable whatever the message
    quotes of a file or a path (core.excerpt.printable)."""
    from memlens.core.excerpt import printable

    print(printable(f"memlens {command}: {message}"), file=file or sys.stderr)


def refuse(command: str, message: object) -> int:
    """Bad input: one line on stderr naming the command, and exit status 2."""
    say(command, message)
    return EXIT_BAD_INPUT


def add_config_arguments(p: argparse.ArgumentParser, *, at: bool = True,
                         sets_help: str | None = None) -> None:
    """--preset, --config, --set and --at, the same for every command that runs a loop."""
    from memlens.core.options import PRESETS

    p.add_argument("--preset", metavar="NAME|FILE.py",
                   help=f"model and data: {', '.join(PRESETS)} (default: mlp), or a model file "
                   "(docs/model-files.md)")
    p.add_argument("--config", metavar="F.toml", help="settings file ([techniques] table, at=[])")
    add_sets(p, sets_help)
    if at:
        p.add_argument("--at", dest="ats", action="extend", nargs="+", default=[],
                       metavar="STEP:KEY=VALUE",
                       help="change a technique at a step, as a live toggle does: "
                       "--at 50:zero_grad=off")


def add_sets(p: argparse.ArgumentParser, help_text: str | None = None) -> None:
    p.add_argument("--set", dest="sets", action="extend", nargs="+", default=[],
                   metavar="KEY=VALUE", help=help_text or
                   "override settings: --set batch_size=64 zero_grad=off (or repeat --set)")


def add_out(p: argparse.ArgumentParser, what: str = "run folder", *,
            force: bool = True) -> None:
    """--out DIR (a folder that holds a run is refused) and --force."""
    p.add_argument("--out", metavar="DIR", help=f"{what} (default: a new folder in runs/); "
                   "refused if it holds another run or report")
    if force:
        p.add_argument("--force", action="store_true",
                       help="with --out: first delete the files memlens wrote there, as the "
                       "earlier run's run.json or report's lessons.json lists them (never a "
                       "file they do not account for: such a folder is refused); says what "
                       "it deleted")


def add_script(p: argparse.ArgumentParser) -> None:
    """The script a command runs as `python SCRIPT.py` would (watch, fix)."""
    p.add_argument("script", metavar="SCRIPT.py", help="the training script")


def refuse_script_args(command: str, args, numbers: Sequence[tuple[bool, str]] = (),
                       out_hint: str = "") -> int | None:
    """A script command's bad input refused, the first found: the script
    (core.watch.script.check_script), then the command's `numbers` (each (bad, why)), then an
    empty --out. None when all is well."""
    from memlens.core.watch.script import check_script

    why = check_script(args.script)
    if why:
        return refuse(command, why)
    for bad, why in numbers:
        if bad:
            return refuse(command, why)
    if args.out is not None and not args.out.strip():
        return refuse(command, f"--out '': give a folder name, or leave --out out{out_hint}")
    return None


def add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress line")


def loads_model_once(main: Callable[..., int]) -> Callable[..., int]:
    """A command's main that runs a loop, in a run's scope (core.model_file.one_load_per_run):
    its preflight and its run take one load of a model file."""

    @functools.wraps(main)
    def in_one_run(args) -> int:
        from memlens.core.model_file import one_load_per_run

        with one_load_per_run():
            return main(args)

    return in_one_run


def count(text: str) -> int:
    """A whole number >= 0 for argparse (1_000 and 1000 alike)."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; use 0 for no limit")
    return value


def parse_sets(sets: list[str]) -> dict[str, str]:
    """--set KEY=VALUE texts as a dict (checked by the option table when applied)."""
    from memlens.core.options import ConfigError, shown

    values = {}
    for text in sets:
        key, sep, raw = text.partition("=")
        if not sep:
            raise ConfigError(f"--set {shown(text)}: expected KEY=VALUE, e.g. batch_size=32")
        values[key.strip()] = raw
    return values


def build_config(args, *, extra: dict | None = None):
    """RunConfig from --config, --preset, --set, --steps, --precise, --at (in that order),
    with a model file's CONFIG under them; `extra` settings last."""
    from memlens.core.config import RunConfig, ScheduledChange
    from memlens.core.model_file import with_model_file

    def build(base):
        cfg = RunConfig.from_toml(args.config, base) if args.config else base
        values: dict = {}
        if args.preset is not None:
            values["preset"] = args.preset
        if getattr(args, "steps", None) is not None:
            values["steps"] = args.steps
        if getattr(args, "precise", False):
            values["precise"] = True
        cfg = cfg.with_values(values).with_sets(args.sets)
        ats = getattr(args, "ats", [])
        if ats:
            cfg = cfg.with_schedule([ScheduledChange.parse(a) for a in ats])
        return cfg.with_values(extra) if extra else cfg

    return with_model_file(build(RunConfig()), build)

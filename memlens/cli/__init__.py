"""memlens's commands, in one place: each module has `add_parser(subparsers)` and
`main(args) -> int`, and they share their argument shapes and exit codes (args)."""

# name -> (module, one line of help): the help lists every command without importing one;
# only the command that runs is imported (start-up pays for what it uses).
COMMANDS: dict[str, tuple[str, str]] = {
    "app": ("memlens.cli.app", "open the desktop app (the default)"),
    "run": ("memlens.cli.run", "run a training loop headless and write its timeline"),
    "graph": ("memlens.cli.graph",
              "write the autograd graph of a training step (DOT, SVG or PNG)"),
    "export": ("memlens.cli.export",
               "write a saved run as snapshot.pickle, trace.json, memory_timeline.json"),
    "shot": ("memlens.cli.shot",
             "run the app window offscreen for N steps and save a PNG screenshot"),
    "watch": ("memlens.cli.watch", "run your own training script unchanged and record it"),
    "fix": ("memlens.cli.fix",
            "fix a watched script's diagnoses on a copy, run both and show the saving"),
    "lessons": ("memlens.cli.lessons", "measure the article's claims: each technique off vs on"),
    "ranks": ("memlens.cli.ranks", "a torchrun job's ranks side by side: memory, step time"),
}

"""`python main.py graph`: write the autograd graph of one training step as DOT, SVG or PNG."""

from __future__ import annotations

import sys
from pathlib import Path

from memlens.cli.args import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    add_config_arguments,
    build_config,
    command_parser,
    loads_model_once,
    refuse,
)
from memlens.core.sinks import Sink

EXIT_NOT_CAPTURED = 1


def add_parser(subparsers) -> None:
    p = command_parser(
        subparsers, "graph",
        "Run a preset up to step N and write the autograd graph of that step, "
        "captured after forward and before backward, as torchviz's make_dot draws it "
        "(grey ops, blue parameters, orange saved tensors, green output). Errors in earlier "
        "steps are reported and the run goes on, so a broken setting still shows its graph.",
    )
    add_config_arguments(p, at=False)
    p.add_argument("--step", type=int, default=0, metavar="N",
                   help="which step's graph (default 0, the first)")
    p.add_argument("--eval", action="store_true",
                   help="the eval phase's graph of step N instead of the training graph "
                   "(empty under no_grad_eval=true, the default)")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="where to write: .dot (torchviz make_dot source), .svg or .png")


def graph_config(args):
    """The run: settings as given, then only as many steps as needed to reach --step."""
    from memlens.core.options import MAX_STEPS, ConfigError

    if not 0 <= args.step < MAX_STEPS:
        raise ConfigError(f"--step {args.step}: the step must be from 0 to {MAX_STEPS - 1:_} "
                          "(the run goes through every step before it)")
    # Captures come from --step alone; eval runs only when its graph is wanted.
    return build_config(args, extra={"steps": args.step + 1, "capture_every": 0,
                                     "eval_every": args.step + 1 if args.eval else 0})


class _CaptureAt(Sink):
    """A run sink that asks for a capture of step N and keeps that step's graph."""

    def __init__(self, controls, step: int, kind: str) -> None:
        self.controls, self.step, self.kind = controls, step, kind
        self.snapshot = None
        self.errors: list = []
        if step == 0:
            controls.request_capture()

    def on_steps(self, rows) -> None:
        if any(record.step == self.step - 1 for record, _ in rows):
            self.controls.request_capture()

    def on_event(self, event) -> None:
        if event.kind == "error":
            self.errors.append(event)
            if event.step == self.step - 1:  # no row for a failed step: ask here
                self.controls.request_capture()

    def on_graph(self, snapshot) -> None:
        if snapshot.step == self.step and snapshot.kind == self.kind:
            self.snapshot = snapshot


@loads_model_once
def main(args) -> int:
    from memlens.core.excerpt import excerpt
    from memlens.core.options import ConfigError
    from memlens.core.runfolder.atomic import ExportError

    try:
        cfg = graph_config(args)
        from memlens.core.graph.export import format_of
        from memlens.core.preflight import check_run
        from memlens.core.training import resolve_device

        fmt = format_of(args.out)
        check_run(cfg, resolve_device(cfg.device))  # never allocate what cannot fit
    except (ConfigError, ExportError) as exc:
        print(f"memlens graph: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    from memlens.core.controls import RunControls
    from memlens.core.graph.export import export_graph
    from memlens.core.loop import run_training

    controls = RunControls(cfg.techniques, cfg.schedule)
    sink = _CaptureAt(controls, args.step, "eval" if args.eval else "train")
    try:
        run_training(cfg, controls, sink, on_error="continue")
    except ConfigError as exc:  # e.g. device=cuda without a GPU
        print(f"memlens graph: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    snap = sink.snapshot
    if snap is None and sink.errors:  # the model raised before that step: bad input
        e = sink.errors[0]
        return refuse("graph", f"step {args.step} was not captured: the model raised at step "
                      f"{e.step} ({e.phase}): {excerpt(e.message.splitlines()[0])}; fix the "
                      "model (or its model file) and run again")
    for e in sink.errors:
        print(f"  [error at step {e.step}, {e.phase}] {e.message.splitlines()[0][:160]}",
              file=sys.stderr)
    if snap is None:
        print(f"memlens graph: step {args.step} was not captured (the run did not reach its "
              "forward pass)", file=sys.stderr)
        return EXIT_NOT_CAPTURED
    try:
        result = export_graph(snap, Path(args.out), fmt)
    except ExportError as exc:
        print(f"memlens graph: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(snap.summary())
    for note in snap.notes:
        print(f"  note: {note}")
    print(f"wrote {result.path} ({result.how}, {result.seconds:.2f} s)")
    return EXIT_OK

"""`python main.py run`: the training lab headless, writing a run folder as it goes."""

from __future__ import annotations

import sys

from memlens.cli.args import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TRAINING_ERROR,
    add_config_arguments,
    add_out,
    add_quiet,
    build_config,
    command_parser,
    loads_model_once,
)

MODEL_FILE_ERROR = "ModelFileError"  # the error event's key (memlens.core.explain.error_title)


def add_parser(subparsers) -> None:
    import argparse

    from memlens.core.options import settings_help

    p = command_parser(
        subparsers, "run",
        "Run a preset training loop, measuring memory at every phase boundary.",
        epilog=settings_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(p)
    p.add_argument("--steps", type=int, help="number of steps")
    p.add_argument("--precise", action="store_true", help="track every storage (exact peak)")
    add_out(p)
    p.add_argument("--export", metavar="FORMATS", default="",
                   help="also write snapshot,trace,timeline (comma-separated, or all); "
                   "allocations: allocations.csv, only when named")
    p.add_argument("--on-error", choices=("stop", "continue"), default="stop",
                   help="at a training error: stop (exit 3), or record it and go on")
    add_quiet(p)


@loads_model_once
def main(args) -> int:
    from memlens.core.options import ConfigError
    from memlens.core.runfolder.atomic import ExportError

    try:
        cfg = build_config(args)
        formats = [f.strip() for f in args.export.split(",") if f.strip()]
        if formats:
            _check_formats(formats)
        for warning in cfg.schedule_warnings():
            print(f"memlens run: warning: {warning}", file=sys.stderr)
        out, writer, history = _prepare(cfg, args)
    except (ConfigError, OSError) as exc:  # OSError: ExportError, or runs/ cannot be made
        print(f"memlens run: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("memlens run: stopped before the first step", file=sys.stderr)
        return EXIT_INTERRUPTED

    from memlens.cli.progress import Progress
    from memlens.core.controls import RunControls
    from memlens.core.loop import run_training
    from memlens.core.model_file import preset_label
    from memlens.core.run_guard import SignalStop, StoppedBy, WriteGuard
    from memlens.core.sinks import FanOut

    controls = RunControls(cfg.techniques, cfg.schedule)
    guard = WriteGuard(writer, controls)
    print(f"memlens: {preset_label(cfg.preset)}, {cfg.steps} steps -> {out}", file=sys.stderr)
    with SignalStop(controls) as signals:
        def reason() -> str | None:
            if signals.received is not None:
                return signals.received.name
            return "write_error" if guard.failure is not None else None

        sink = StoppedBy(FanOut(history, guard, Progress(cfg.steps, args.quiet)), reason)
        try:
            summary = run_training(cfg, controls, sink, on_error=args.on_error)
        except ConfigError as exc:  # e.g. out of memory while building the model
            guard.on_finish({"steps_done": 0, "stopped_by": "setup_error", "message": str(exc)})
            print(f"memlens run: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if signals.received is not None:
        steps = history.steps.column("step")
        where = f"at step {int(steps[-1])}" if len(steps) else "before the first step"
        print(f"memlens run: stopped {where} ({signals.received.name}); files complete up to "
              f"it: {out}", file=sys.stderr)
        return signals.exit_code
    if guard.failure is not None:
        exc = guard.failure
        print(f"memlens run: cannot write the run folder {str(out)!r}: "
              f"{exc.strerror or exc}; stopped at step {summary.steps_done}, files complete "
              "up to the last step written. Free disk space or choose another --out.",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    _print_summary(summary, history)
    if formats:
        from memlens.core.exports import export_run

        notes: list[str] = []
        try:
            for path in export_run(history, out, formats, notes=notes):
                print(f"  wrote {path}")
            for note in notes:
                print(f"  note: {note}")
        except (ExportError, ValueError) as exc:
            print(f"memlens run: export failed: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if summary.stopped_by == "error":
        e = summary.error
        complete = (f"Files are complete up to step {e.step - 1}" if e.step > 0 else
                    "No step completed; the files hold what step 0 measured before the error")
        print(f"\nTraining error at step {e.step} ({e.phase}): {e.message}\n\n{e.explanation}\n"
              f"\n{complete}: {out}", file=sys.stderr)
        # A model file breaking its contract mid-run is bad input, not a training error.
        return EXIT_BAD_INPUT if e.key == MODEL_FILE_ERROR else EXIT_TRAINING_ERROR
    return EXIT_OK


def _prepare(cfg, args):
    """Everything that can refuse a run, before any file is made: the device, the memory
    check, the folder. Then the folder with its headers and a preliminary run.json, and the
    run's history (its older rows spill to a hidden file beside the run's; the writer reads
    it for the effects of toggles)."""
    from memlens.core.history import RunHistory
    from memlens.core.model_file import preset_label
    from memlens.core.preflight import check_run
    from memlens.core.recorder.output import choose_folder
    from memlens.core.runfolder.header import run_header
    from memlens.core.runfolder.writer import RunWriter
    from memlens.core.training import resolve_device

    check_run(cfg, resolve_device(cfg.device))
    out = choose_folder(args.out, preset_label(cfg.preset), force=args.force)
    history = RunHistory(spill_dir=out)  # made at the first spill, after the writer's files
    writer = RunWriter(out, precise=cfg.precise, history=history,
                       meta=run_header("lab", config=cfg.to_dict()))
    return out, writer, history


def _check_formats(formats: list[str]) -> None:
    from memlens.core.exports import parse_formats
    from memlens.core.options import ConfigError

    try:
        parse_formats(formats)
    except ValueError as exc:
        raise ConfigError(f"--export: {exc}") from None


def _print_summary(summary, history) -> None:
    from memlens.core.effects import toggle_effect
    from memlens.core.records import MEMORY_CATEGORIES
    from memlens.core.units import format_bytes

    env = history.meta.get("environment", {})
    print(f"steps: {summary.steps_done} ({summary.stopped_by}), wall {summary.wall_s:.1f} s, "
          f"mean step {summary.mean_step_ms:.1f} ms")
    print(f"final loss: {summary.final_loss:.4f}")
    print(f"memory ({env.get('memory_label', '')}):")
    exact_mode = bool(env.get("precise")) or env.get("device", "").startswith("cuda")
    if len(history.samples):
        last = history.samples.rows(len(history.samples) - 1)[0]
        idx = history.samples.index
        for c in MEMORY_CATEGORIES:
            if c == "temporaries" and not exact_mode:
                # light mode on CPU does not measure them: 0 B would read as "none"
                print(f"  {c:<12} {'—':>10} (not measured in light mode: --precise does)")
                continue
            print(f"  {c:<12} {format_bytes(last[idx[c]]):>10}")
        print(f"  {'total':<12} {format_bytes(last[idx['total']]):>10}")
    exact = "exact" if exact_mode else "lower bound"
    print(f"  {'peak':<12} {format_bytes(summary.peak_bytes):>10} ({exact})")
    for e in history.events():
        if e.kind == "toggle":  # the effect as the app's "What just happened" says it
            print(f"  [toggle at step {e.step}] {toggle_effect(history, e).text()}")
        elif e.kind == "leak":
            print(f"  [leak at step {e.step}] {e.label()}")
        elif e.kind == "refused":
            print(f"  [refused at step {e.step}] {e.message}: {e.explanation}")

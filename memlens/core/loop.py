"""The training loop: phases, live techniques, measurement at every phase boundary.

One plain function serves the GUI worker, the headless CLI, the lessons and the tests. It
runs in the calling thread, reads techniques from a RunControls at each step boundary, and
hands plain records to a sink. Training errors become events; nothing recorded before them
is lost. A step itself is core.training's (the lab's driver of the one recorder).
"""

from __future__ import annotations

from memlens.core.config import RunConfig, TechniqueToggles
from memlens.core.controls import RunControls, StopRequested
from memlens.core.excerpt import safe_str
from memlens.core.explain import error_title, explain_error
from memlens.core.recorder.step import HEAP_EVERY_S
from memlens.core.records import NATIVE_BUILD_EVENT, RunEvent, RunSummary
from memlens.core.sinks import FanOut, RunSink
from memlens.core.training import TrainingSession, resolve_device

__all__ = ["TrainingSession", "resolve_device", "run_training"]


def _announce_native_build(config: RunConfig, sink: RunSink) -> None:
    """A precise CPU run on a machine where the set-up did not build the native recorder
    compiles it first (once per torch, a minute or so): say so, as the run's first event."""
    from memlens.core.native import needs_build

    if config.precise and resolve_device(config.device).type == "cpu" and needs_build():
        sink.on_event(RunEvent(
            0, 0.0, "setup", key=NATIVE_BUILD_EVENT,
            message="building precise mode's allocation recorder for this torch "
                    "(once per torch; half a minute to a few minutes)",
            explanation="memlens compiles its C++ helpers the first time they are needed "
                        "(./dev does it at set-up). The run starts when the build is done; "
                        "without a compiler it runs on the slower Python tracker.",
        ))


def _announce_cuda_only(config: RunConfig, sink: RunSink) -> None:
    """CUDA-only settings set on a run that trains elsewhere do nothing: say so, once."""
    from memlens.core.options import RUN_OPTIONS

    device = resolve_device(config.device)
    if device.type == "cuda":
        return
    values = config.to_dict()
    unused = [f"{o.key}={o.format(values[o.key])}" for o in RUN_OPTIONS
              if o.cuda_only and values[o.key] != o.default]
    if unused:
        sink.on_event(RunEvent(
            0, 0.0, "setup", key="cuda-only setting",
            message=f"{', '.join(unused)} has no effect: this run trains on {device.type}",
            explanation="These settings drive PyTorch's CUDA allocator recording, which "
                        "exists only on a CUDA device. Run with device=cuda on a machine "
                        "with a GPU, or leave them at 0.",
        ))


def _apply_changes(session: TrainingSession, controls: RunControls, sink: RunSink, step: int,
                   toggles: TechniqueToggles, changes: list) -> TechniqueToggles:
    """The step boundary's technique changes, as toggle events; a change this machine cannot
    run (AMP bf16 on a CPU without it for this model) is refused with an event saying why,
    and the run goes on as it was."""
    for key, old, new in changes:
        refusal = session.amp_refusal(new) if key == "amp" else None
        if refusal is not None:
            toggles = controls.refuse(key, old)
            sink.on_event(RunEvent(step, session.now(), "refused", key=key, old=old, new=new,
                                   message=f"{key} -> {new} refused: the run goes on with "
                                           f"{key}={old}",
                                   explanation=refusal[0].upper() + refusal[1:] + "."))
            continue
        session.preset.on_toggle(key, old, new)
        sink.on_event(RunEvent(step, session.now(), "toggle", key=key, old=old, new=new))
        note = session.amp_note(new) if key == "amp" else None
        if note is not None:
            sink.on_event(note)
    return toggles


def _refuse_failed_amp(session: TrainingSession, controls: RunControls, sink: RunSink, step: int,
                       toggles: TechniqueToggles, exc: Exception) -> bool:
    """A step that failed because this CPU cannot run its bf16 kernels (a layer the probe did
    not know): AMP goes off with an event saying why, and the step is run again in fp32.
    False for any other error."""
    from memlens.core.cpu_support import bf16_support, is_unsupported_error

    if toggles.amp != "bf16" or session.device.type != "cpu" or not is_unsupported_error(exc):
        return False
    first = (str(exc).strip().splitlines() or [""])[0]
    controls.refuse("amp", "off")
    session.preset.recover()
    session.held = None
    session.reset_accumulation()
    sink.on_event(RunEvent(
        step, session.now(), "refused", key="amp", old="off", new="bf16",
        message="amp=bf16 failed on this CPU: the run goes on with amp=off",
        explanation=f"This CPU ({bf16_support().cpu_text()}) cannot run this model under bf16 "
                    f"autocast in oneDNN ({first}). The step was run again in fp32; AMP on "
                    "this model needs a CPU with AVX512-BF16/AMX or CUDA."))
    return True


def run_training(
    config: RunConfig,
    controls: RunControls | None = None,
    sink: RunSink | None = None,
    *,
    on_error: str = "stop",
    heap_every_s: float = HEAP_EVERY_S,
) -> RunSummary:
    """Run `config.steps` steps.

    on_error: "stop" ends the run at a training error; "pause" records it, pauses the controls
    and waits (the GUI); "continue" records it and goes on with the next step.
    heap_every_s: the process heap and RSS at most this often (TrainingSession's; 0: every
    step's forward).
    """
    controls = controls or RunControls(config.techniques, config.schedule)
    sink = sink if sink is not None else FanOut()
    session = _start(config, controls, sink, heap_every_s)
    stopped_by, error, step = "completed", None, 0
    try:
        while step < config.steps:
            if controls.paused:  # what is measured is all there while the user looks
                session.flush()
            if not controls.wait_while_paused() or controls.stop_requested:
                stopped_by = "stopped"
                break
            toggles, changes = controls.begin_step(step)
            toggles = _apply_changes(session, controls, sink, step, toggles, changes)
            every = config.capture_every
            capture = controls.take_capture_request() or bool(every and step % every == 0)
            try:
                _step(session, step, toggles, capture)  # its row goes to the sink
            except StopRequested:
                session.take_step_samples()  # what the step measured before the stop
                stopped_by = "stopped"
                break
            except Exception as exc:  # a training error is data, not a crash
                session.take_step_samples()  # what the step measured before the error
                if _refuse_failed_amp(session, controls, sink, step, toggles, exc):
                    continue  # the same step again, in fp32
                error = _training_error(session, config, sink, step, toggles, exc, on_error)
                if on_error in ("pause", "continue"):
                    if on_error == "pause":
                        controls.pause()
                    step += 1
                    continue
                stopped_by = "error"
                break
            step += 1
    finally:
        _close(session, sink)
    tally = session.steps.tally
    summary = RunSummary(
        steps_done=tally.done, stopped_by=stopped_by, wall_s=session.now(),
        final_loss=tally.final_loss, peak_bytes=max(tally.peak, session.measured_peak()),
        mean_step_ms=tally.mean_step_ms, error=error,
    )
    sink.on_finish(summary.to_dict())
    return summary


def _start(config: RunConfig, controls: RunControls, sink: RunSink,
           heap_every_s: float) -> TrainingSession:
    """The session, its run.json header, its first notes and its "start" sample."""
    _announce_native_build(config, sink)
    _announce_cuda_only(config, sink)
    try:
        session = TrainingSession(config, controls, sink, heap_every_s=heap_every_s)
    except (MemoryError, RuntimeError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        from memlens.core.preflight import is_out_of_memory, setup_out_of_memory

        if not is_out_of_memory(exc):
            raise
        raise setup_out_of_memory(exc, config) from None
    sink.on_start(session.meta())
    note = session.amp_note(config.techniques.amp)
    if note is not None:
        sink.on_event(note)
    session.start_sample()
    session.flush()
    return session


def _step(session: TrainingSession, step: int, toggles: TechniqueToggles, capture: bool):
    recorder = session.cuda_recorder
    if recorder is not None:
        recorder.on_step_begin(step)
    record = session.step(step, toggles, capture)
    if recorder is not None:
        recorder.on_step_end(step)
    return record


def _training_error(session: TrainingSession, config: RunConfig, sink: RunSink, step: int,
                    toggles: TechniqueToggles, exc: Exception, on_error: str) -> RunEvent:
    """The error's event, explained; the preset recovered for the next step."""
    phase = session.current_phase
    error = RunEvent(step, session.now(), "error", key=error_title(exc), phase=phase,
                     message=f"{type(exc).__name__}: {safe_str(exc)}",
                     explanation=explain_error(exc, config.preset, phase, toggles, on_error))
    sink.on_event(error)
    session.preset.recover()
    session.held = None  # a failed step's graph is not kept for the next one
    session.reset_accumulation()
    return error


def _close(session: TrainingSession, sink: RunSink) -> None:
    session.close()
    session.steps.finish()
    recorder = session.cuda_recorder
    if recorder is not None:
        if recorder.recording or recorder.snapshot is not None:
            on_cuda = getattr(sink, "on_cuda_snapshot", None)
            if on_cuda is not None:
                on_cuda(recorder)
        recorder.close()

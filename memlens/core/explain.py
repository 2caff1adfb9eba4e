"""Plain explanations for training errors and leaks, in the user's terms and with the fix."""

from __future__ import annotations

from memlens.core.config import TechniqueToggles
from memlens.core.excerpt import safe_str
from memlens.core.options import is_model_file
from memlens.core.units import byte_figure


def error_title(exc: BaseException) -> str:
    msg = safe_str(exc)
    if isinstance(exc, FloatingPointError):
        return "non-finite loss"
    if "backward through the graph a second time" in msg:
        return "backward through a freed graph"
    if "modified by an inplace operation" in msg:
        return "in-place modification of a saved tensor"
    if _is_oom(exc):
        return "out of memory"
    return type(exc).__name__


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (torch_oom(), MemoryError)) or "out of memory" in safe_str(exc).lower()


def torch_oom() -> type:
    import torch

    return getattr(torch, "OutOfMemoryError", MemoryError)


# What the caller of run_training does after a training error (its `on_error`), in words.
AFTER_ERROR = {
    "pause": "The run is paused with every measurement up to here kept; change a setting "
             "and resume, or reset.",
    "stop": "The run stopped here (the CLI exits with status 3) with every measurement up to "
            "here kept; change the setting and run again.",
    "continue": "The error is recorded and the run goes on with the next step.",
}


def explain_error(exc: BaseException, preset: str, phase: str, toggles: TechniqueToggles,
                  on_error: str = "pause") -> str:
    """One paragraph: the likely cause here, what to switch to fix it, and what the run does
    next (`on_error`, memlens.core.loop.run_training's: the app pauses, the CLI stops)."""
    return f"{_cause(exc, preset, phase, toggles)} {AFTER_ERROR[on_error]}"


def _cause(exc: BaseException, preset: str, phase: str, toggles: TechniqueToggles) -> str:
    msg = safe_str(exc)
    if "backward through the graph a second time" in msg:
        if preset == "lstm" and not toggles.detach_state:
            return (
                "The LSTM's hidden state is carried across batches without detach, so this "
                "step's loss still reaches back into the previous batch's graph, whose saved "
                "tensors the previous backward already freed. Truncated BPTT needs "
                "`hidden = hidden.detach()` at each batch: switch detach_state on. "
                "(retain_graph=True does not fix it: the old graph saved the weights that "
                "optimizer.step() has since changed in place, so backward fails on that "
                "instead, after keeping every earlier graph alive.)"
            )
        if is_model_file(preset) and not toggles.detach_state:
            return (
                "Your model file's state (from init_state) is carried across batches without "
                "detach, so this step's loss still reaches back into the previous batch's "
                "graph, whose saved tensors the previous backward already freed. Truncated "
                "BPTT needs `state = state.detach()` at each batch: switch detach_state on "
                "and resume."
            )
        if preset == "gan" and not toggles.detach_state:
            return (
                "The discriminator's loss used the generator's output without detach, so its "
                "backward ran through the generator too and freed the generator's graph; the "
                "generator's own backward then needed that graph a second time. Use "
                "`D(fake.detach())` in the D step: switch detach_state on."
            )
        return (
            "backward() reached a part of the autograd graph that an earlier backward already "
            "freed: some tensor from a previous step is still connected to this loss. Detach "
            "carried state, or pass retain_graph=True only if you really need two backwards."
        )
    if "modified by an inplace operation" in msg and toggles.retain_graph and (
        preset in ("lstm", "gan") and not toggles.detach_state
    ):
        return (
            "retain_graph=True kept the previous step's graph alive, and without detach this "
            "step's loss is still connected to it, so backward runs into the old graph. That "
            "graph saved the weights as they were then, but optimizer.step() has since changed "
            "them in place, so the old gradients cannot be computed. retain_graph does not "
            "fix a missing detach: switch detach_state on (and retain_graph off)."
        )
    if "modified by an inplace operation" in msg:
        return (
            "A tensor that autograd saved for backward was changed in place (an `x += ...`, "
            "`relu_`, or an optimizer step) before backward used it. Use the out-of-place "
            "form, clone the tensor first, or run the optimizer step after every backward "
            "that needs the old values."
        )
    if isinstance(exc, FloatingPointError):
        hint = ("fp16 overflow: fp16 needs the GradScaler and a moderate learning rate; "
                "try amp=bf16") if toggles.amp == "fp16" else (
                "the learning rate is probably too high, or gradients grew without clearing "
                "(zero_grad=off adds every step's gradients together)")
        return f"The loss became NaN or infinite ({msg}). Likely cause: {hint}."
    if _is_oom(exc):
        return (
            f"Memory ran out during {phase or 'the step'}. Check the memory plot for growth "
            "before this step: a leak (total_loss += loss, a cache of intermediates, hidden "
            "state without detach, retain_graph) grows memory every step. Otherwise lower "
            "batch_size or width, use amp, or accumulate gradients over smaller micro-batches."
        )
    if is_model_file(preset):
        return _explain_model_file_error(exc, preset, phase)
    return f"The {phase or 'step'} raised {type(exc).__name__}."


def _explain_model_file_error(exc: BaseException, preset: str, phase: str) -> str:
    from memlens.core.model_file import CONTRACT, ModelFileError, frame_text, user_frame

    if isinstance(exc, ModelFileError):
        return (f"Your model file does not follow the contract: {CONTRACT}. Fix the file and "
                "start a new run (the file is read when a run starts).")
    frame = user_frame(exc, preset)
    where = (f"at {frame_text(frame)}" if frame is not None
             else "in code it called (no line of the file itself is in the traceback)")
    return (f"Your model file raised {type(exc).__name__} during {phase or 'the step'}, "
            f"{where}. Every measurement up to here is kept. Fix the file and start a new run "
            "(the file is read when a run starts); or change a technique and resume, if the "
            "error comes from a setting.")


def explain_leak(toggles: TechniqueToggles, grew: str, per_step: float,
                 period: int = 1) -> str:
    """Name the likely cause of steady memory growth from the toggles in force, and what it
    holds: saved tensors (eval under grad, a cache) in tensor bytes, or autograd nodes in the
    process heap (training, where backward has freed the saved tensors). `period`: steps
    between evals (growth through eval comes once a period). Its byte figures are marks
    (units.byte_figure) that the event made of it writes in the display of the moment."""
    size = f"{byte_figure(per_step)} per step"
    causes = []
    if toggles.leak_loss_sum:
        if not toggles.no_grad_eval:
            causes.append(
                "`total_loss += loss` in eval, run under grad, keeps each eval forward's "
                "saved tensors alive through the sum "
                f"({byte_figure(per_step * period)} per eval); "
                "use `loss.item()`, or run eval under torch.no_grad()")
        causes.append(
            "`total_loss += loss` in training keeps every step's autograd nodes alive through "
            "the sum: backward has freed their saved tensors, so what grows is process heap "
            "(memory.csv's heap column, a few KB a step), not tensor memory; use "
            "`total_loss += loss.item()`")
    if toggles.retain_graph and not toggles.detach_state:
        causes.append("carried state without detach plus retain_graph=True chains every "
                      "step's graph to the next, saved tensors and all; detach the carried "
                      "state")
    if toggles.leak_cache:
        causes.append("the loss keeps its intermediates in a list that is never cleared "
                      f"({byte_figure(per_step)} of tensors a step); store .detach() copies "
                      "or .item() values, or clear the list")
    if not causes:
        causes.append("something holds tensors across steps: a list of losses or outputs, "
                      "a graph kept by retain_graph, or a state tensor without detach")
    return f"Memory ({grew}) grows {size}. Likely cause: " + "; ".join(causes) + "."


"""The lessons as data: the settings of the two arms and the metrics read from their runs.

A lesson runs one preset twice, technique off and on, in interleaved blocks. A metric names
what to read from each run's records (a memory column at a phase, a step column, the error
count); the runner reads it the same way for both arms. A claim is the article's, in a few
words, with the direction it says `on` moves the figure and, where it gives one, the size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memlens.core.options import is_model_file

ALL_PRESETS = ("mlp", "cnn", "lstm", "gan", "transformer")
# Memory metrics: `last` is the value at the last completed step's sample of `phase`;
# `max` the largest over the run; `growth` bytes a step, the mean change from one completed
# step to the next; `median_growth` the median of those changes (a process figure, the heap:
# malloc's own bookkeeping moves it now and then by more than a step's leak).
REDUCERS = ("last", "max", "growth", "median_growth")


@dataclass(frozen=True)
class Claim:
    text: str  # the article's claim in a few words
    direction: str  # "lower" | "higher": where `on` moves the figure against `off`
    change: float | None = None  # the claimed relative change, e.g. -0.30; None: none given


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # "memory" (exact bytes) | "time" (ms, medians) | "count"
    # "sample": memory.csv rows at `phase`; "step": steps.csv; "errors"; "data": the bytes
    # of the data set the run holds (run.json's sizes.data_bytes); "allocs": precise mode's
    # alloc/free events, the largest live total inside `phase` (the allocator's own peak
    # there, kernel scratch included)
    source: str
    column: str = ""
    phase: str = ""
    reduce: str = "last"
    per_sample: bool = False  # time: divide by the arm's batch size
    less_data: bool = False  # memory: less the data set the run holds (sizes.data_bytes)
    # memory: a difference up to this many bytes is "not seen" (a process figure's noise;
    # tensor bytes are exact: 0)
    floor: float = 0.0
    note: str = ""  # what a learner is told beside the figure, always
    claim: Claim | None = None


@dataclass(frozen=True)
class Lesson:
    name: str
    title: str
    off_label: str
    on_label: str
    off: dict[str, Any]
    on: dict[str, Any]
    metrics: tuple[Metric, ...]
    presets: tuple[str, ...] = ALL_PRESETS
    base: dict[str, Any] = field(default_factory=dict)
    needs_cuda: bool = False
    # The off arm's batch is this many times the preset's (accumulate: B·k in one batch).
    off_batch_scale: int = 1
    # At most this many steps an arm (0: no cap): a lesson whose `on` arm grows every step
    # must not fill the machine's memory on a long report.
    max_steps: int = 0
    # At least this many steps an arm: a figure that appears only after some steps (the
    # accumulate arm's peak needs a step after its first optimizer step) gets them.
    min_steps: int = 0
    # Which model files it applies to: "any", "with_state" (files that define init_state),
    # "batch_size" (files whose make_batch follows the batch_size setting) or "none".
    model_files: str = "any"
    # False: the off arm runs all its steps, then the on arm (no time figure to interleave
    # for): a process-wide figure (the heap) is then each arm's own, not also the other's.
    interleaved: bool = True


_LOWER_MEMORY = "lower"
ACCUMULATE_K = 4
# The process heap's growth a step that is "not seen": malloc's own churn (a median change
# of a few bytes a step) stays under it; one autograd node kept a step is about as much.
HEAP_FLOOR = 512

LESSONS: tuple[Lesson, ...] = (
    # Precise mode: an OOM is decided by the peak inside the eval forward, which only the
    # allocator's own events show on a CPU. The boundary figures (sampled after the eval
    # forward, when no_grad has already freed what the forward made) are shown beside it.
    Lesson(
        "no_grad_eval", "Validation under no_grad() + eval()",
        "grad + train()", "no_grad + eval()",
        off={"no_grad_eval": False, "eval_mode": False},
        on={"no_grad_eval": True, "eval_mode": True},
        base={"eval_every": 1, "precise": True},
        metrics=(
            Metric("eval-forward peak", "memory", "allocs", phase="eval", reduce="max",
                   claim=Claim("about 30% less memory", _LOWER_MEMORY, -0.30)),
            Metric("eval-forward activations", "memory", "sample", "activations",
                   phase="eval_forward"),
            Metric("eval-forward total", "memory", "sample", "total", phase="eval_forward"),
            Metric("eval time", "time", "step", "eval_ms",
                   claim=Claim("about 20% faster", "lower", -0.20)),
        ),
    ),
    # Precise mode: the claim is about the step peak, exact only there on a CPU.
    Lesson(
        "zero_grad", "zero_grad(set_to_none=True) vs zeros",
        "zeros", "set_to_none",
        off={"zero_grad": "zeros"}, on={"zero_grad": "set_to_none"},
        base={"eval_every": 0, "precise": True},
        metrics=(
            Metric("grads at zero_grad", "memory", "sample", "grads", phase="zero_grad",
                   claim=Claim("set_to_none frees the grads", _LOWER_MEMORY)),
            Metric("step peak", "memory", "step", "peak_bytes", reduce="max",
                   claim=Claim("set_to_none saves memory", _LOWER_MEMORY)),
            Metric("step time", "time", "step", "step_ms"),
        ),
    ),
    *(
        Lesson(
            f"amp_{dtype}", f"Mixed precision: autocast {dtype}",
            "float32", dtype,
            off={"amp": "off"}, on={"amp": dtype},
            # Precise mode: the claim is about the step peak (what decides an OOM), exact
            # only there on a CPU. What backward holds after the forward is shown beside
            # it: the activations autocast made smaller, and the low-precision copies of
            # the weights it keeps beside them (on a small model the copies outweigh the
            # saving, and the peak does not move).
            base={"eval_every": 0, "precise": True},
            needs_cuda=dtype == "fp16",
            metrics=(
                Metric("saved for backward after forward", "memory", "sample",
                       "activations+amp_casts", phase="forward"),
                Metric("activations after forward", "memory", "sample", "activations",
                       phase="forward"),
                Metric("AMP casts after forward", "memory", "sample", "amp_casts",
                       phase="forward"),
                Metric("step peak", "memory", "step", "peak_bytes", reduce="max",
                       claim=Claim("AMP saves memory", _LOWER_MEMORY)),
                Metric("step time", "time", "step", "step_ms",
                       claim=Claim("AMP is faster", "lower")),
            ),
        )
        for dtype in ("bf16", "fp16")
    ),
    # Precise mode: the claim is about the step peak, which only precise mode measures
    # exactly on a CPU. The peak is read less the data set the preset holds (its batches,
    # made once): the one-batch arm's 4·B batches would make that 4× larger, which is not
    # the lesson. No time figure: per-sample times of the two arms, run side by side in one
    # process, did not reproduce (an A/A pair disagreed), so none is reported.
    Lesson(
        "accumulate", f"Gradient accumulation, k={ACCUMULATE_K}",
        f"one batch of {ACCUMULATE_K}·B", f"{ACCUMULATE_K} micro-batches of B",
        off={"accumulate": 1}, on={"accumulate": ACCUMULATE_K},
        base={"eval_every": 0, "precise": True}, off_batch_scale=ACCUMULATE_K,
        model_files="batch_size", min_steps=2 * ACCUMULATE_K,
        metrics=(
            Metric("step peak less the data set", "memory", "step", "peak_bytes",
                   reduce="max", less_data=True,
                   claim=Claim(f"{ACCUMULATE_K}× the batch at one micro-batch's memory",
                               _LOWER_MEMORY)),
            Metric("step peak", "memory", "step", "peak_bytes", reduce="max"),
            Metric("data set held", "memory", "data"),
        ),
    ),
    Lesson(
        "detach_state", "detach() of carried state",
        "no detach", "detach",
        off={"detach_state": False}, on={"detach_state": True},
        base={"eval_every": 0}, presets=("lstm", "gan"), model_files="with_state",
        metrics=(
            Metric("training errors", "count", "errors",
                   claim=Claim("without detach: backward fails", "lower")),
            Metric("memory growth per step", "memory", "sample", "total", phase="optimizer",
                   reduce="growth", claim=Claim("detach keeps memory flat", _LOWER_MEMORY)),
        ),
    ),
    Lesson(
        "retain_graph", "retain_graph=True without detach",
        "retain_graph=False", "retain_graph=True",
        off={"retain_graph": False}, on={"retain_graph": True},
        base={"eval_every": 0, "detach_state": False}, presets=("lstm",), max_steps=16,
        metrics=(
            Metric("training errors", "count", "errors",
                   claim=Claim("backward can go through the old graph again", "lower")),
            Metric("saved bytes held across the step", "memory", "step", "retained_bytes",
                   claim=Claim("the graph is kept: memory held", "higher")),
            Metric("memory growth per step", "memory", "sample", "total", phase="optimizer",
                   reduce="growth", claim=Claim("memory grows every step", "higher")),
            Metric("step time", "time", "step", "step_ms",
                   claim=Claim("step time grows", "higher")),
        ),
    ),
    # In training, backward frees the graph's saved tensors: no tensor bytes grow, but the
    # sum keeps every step's autograd nodes, on the process heap. The claim is judged on the
    # heap (the arms run one after the other, so each arm's heap is its own), the tensor
    # bytes shown beside it. Not the resident memory: it moves in jumps as malloc maps more,
    # and over a report's steps it grew by as much without the leak as with it (mlp).
    Lesson(
        "leak_loss_sum", "total_loss += loss in training",
        "loss.item()", "total_loss += loss",
        off={"leak_loss_sum": False}, on={"leak_loss_sum": True},
        base={"eval_every": 0}, interleaved=False, min_steps=8,
        metrics=(
            Metric("heap growth per step", "memory", "sample", "heap", phase="forward",
                   reduce="median_growth", floor=HEAP_FLOOR,
                   claim=Claim("total_loss += loss leaks", "higher")),
            Metric("tensor memory growth per step", "memory", "sample", "total",
                   phase="optimizer", reduce="growth",
                   note=("backward frees the graph's saved tensors, so no tensor bytes grow: "
                         "the sum keeps every step's autograd nodes, on the process heap "
                         "(memory.csv's heap column); `run` names it as a \"graph kept "
                         "across steps\" event with the nodes a step")),
        ),
    ),
    Lesson(
        "leak_loss_sum_eval", "total_loss += loss in validation under grad",
        "loss.item()", "total_loss += loss",
        off={"leak_loss_sum": False}, on={"leak_loss_sum": True},
        base={"eval_every": 1, "no_grad_eval": False, "eval_mode": False},
        metrics=(
            Metric("memory growth per step", "memory", "sample", "total", phase="eval",
                   reduce="growth", claim=Claim("total_loss += loss leaks", "higher")),
        ),
    ),
)

LESSON_NAMES = tuple(lesson.name for lesson in LESSONS)


def lessons_for(preset: str, cuda: bool, names: tuple[str, ...] | None = None
                ) -> list[Lesson]:
    """The lessons that apply to a preset on this device (fp16 only on CUDA). A model file
    gets the lessons every preset has, detach_state when it carries state, and accumulate
    when its batches follow the batch_size setting (read from its source, not run)."""
    if is_model_file(preset):
        from memlens.core.model_file import read_file_shape

        shape = read_file_shape(preset)
        kinds = {"any", *(["with_state"] if shape.carries_state else []),
                 *(["batch_size"] if shape.batch_size_arg else [])}
        applies = [lesson for lesson in LESSONS if lesson.model_files in kinds]
    else:
        applies = [lesson for lesson in LESSONS if preset in lesson.presets]
    return [lesson for lesson in applies if (cuda or not lesson.needs_cuda)
            and (names is None or lesson.name in names)]

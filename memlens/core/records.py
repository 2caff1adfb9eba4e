"""Plain-number records that cross from the training thread to everyone else (no tensors)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from memlens.core.units import format_figures, has_figures

# A step runs these phases in this order; `eval` only every `eval_every` steps.
PHASES: tuple[str, ...] = ("zero_grad", "forward", "backward", "optimizer", "eval")
# A memory sample names the phase that just finished; `start` is the state before step 0;
# `eval_forward` is taken inside the eval phase, at the end of its forward, while the eval
# loss (and, under grad, its graph) is alive, as a user's validation loop holds it.
SAMPLE_PHASES: tuple[str, ...] = ("start", *PHASES[:-1], "eval_forward", "eval")
# A sample's phase as the number memory.csv and the history store.
SAMPLE_PHASE_CODE: dict[str, int] = {name: i for i, name in enumerate(SAMPLE_PHASES)}

# The key of the info event that says the native helpers are built before this run starts.
NATIVE_BUILD_EVENT = "native build"

# Tensor-memory categories, in the order plots stack them. Each storage is in one only:
#   params       the models' parameters
#   grads        their .grad tensors
#   optimizer    optimizer state (momentum, Adam's moments and step counters)
#   activations  tensors autograd saved for backward and still holds (not parameters,
#                buffers or AMP weight casts)
#   other        what the loop carries between steps: the data set, carried state (lstm's
#                hidden), what a leak holds; the same in light and precise mode
#   buffers      the models' buffers (BatchNorm running stats, the transformer's mask)
#   amp_casts    autocast's cached low-precision copies of the weights, kept for backward
#   temporaries  precise mode and CUDA only: live storages none of the above hold (the
#                logits and loss the loop keeps bound, kernel scratch); light mode cannot
#                see them and reports 0
#   gathered     sharded training (FSDP): the full parameters FSDP all-gathers for a
#                block's forward and backward, 0 once it reshards (params: the rank's shard)
#   buckets      DDP: its gradient buckets, a flat copy of the gradients for the all-reduce
# The last five came later: appended, so the category codes of older files still hold.
MEMORY_CATEGORIES: tuple[str, ...] = ("params", "grads", "optimizer", "activations", "other",
                                      "buffers", "amp_casts", "temporaries", "gathered",
                                      "buckets")
# The categories memory.csv held before `gathered` and `buckets`: its columns before
# total_bytes (the later ones come after rss_bytes; core.runfolder.format).
FIRST_CATEGORIES: tuple[str, ...] = MEMORY_CATEGORIES[:8]
LATER_CATEGORIES: tuple[str, ...] = MEMORY_CATEGORIES[8:]
# What each category holds, in the user's words: the app's legend tooltip and the docs.
CATEGORY_HELP: dict[str, str] = {
    "params": "the models' parameters",
    "grads": "the parameters' .grad tensors",
    "optimizer": "optimizer state: momentum buffers, Adam's two moments and step counters",
    "activations": "tensors autograd saved for backward and still holds (not parameters, "
                   "buffers or AMP weight copies), each storage once",
    "other": "what the loop carries between steps: the data set, carried state (lstm's "
             "hidden), what a leak holds (total_loss += loss, a cache); the same in light "
             "and precise mode",
    "buffers": "the models' buffers: BatchNorm running statistics, the transformer's mask",
    "amp_casts": "autocast's cached bf16/fp16 copies of the weights that backward needs",
    "temporaries": "precise mode and CUDA only: live storages no other category holds (the "
                   "logits and loss the loop keeps bound, kernel scratch); 0 in light mode, "
                   "which cannot see them",
    "gathered": "sharded training (FSDP): the full parameters FSDP all-gathers for a block's "
                "forward and backward, on top of the rank's shard (params); 0 again once it "
                "reshards. Why a sharded model still peaks high",
    "buckets": "DDP: its gradient buckets, a flat copy of the gradients for the all-reduce, "
               "as large as the parameters that train (with gradient_as_bucket_view=True the "
               "gradients are views into them, counted as grads)",
}


class Buckets(NamedTuple):
    """DDP's gradient buckets of a run, in bytes: `fixed` are copies beside the gradients;
    `views` hold the gradients themselves (gradient_as_bucket_view=True: counted as grads
    while a .grad shows them, as buckets after zero_grad(set_to_none=True))."""

    fixed: int = 0
    views: int = 0

    def at(self, grads: int) -> int:
        """The bucket bytes no category holds, where the gradients hold `grads` bytes."""
        return self.fixed + max(0, self.views - grads) if self.views else self.fixed


NO_BUCKETS = Buckets()


# What a watch's step without detail carries from the steps that measured it: what is saved
# for backward (core.watch.detail); every other category is measured at every step.
CARRIED_CATEGORIES: tuple[str, ...] = ("activations", "amp_casts")


@dataclass(slots=True)
class MemorySample:
    """Memory at one phase boundary. Category figures are tensor bytes, each storage once.

    Read-only by convention: not frozen, because a frozen dataclass is several times slower
    to make and the training thread makes four or five of these a step.
    """

    step: int
    phase: str
    time_s: float
    params: int
    grads: int
    optimizer: int
    activations: int
    other: int
    # CUDA allocator figures; None on CPU, where no allocator counter exists.
    allocated: int | None = None
    reserved: int | None = None
    # glibc mallinfo2 in-use bytes of the whole process (CPU only, where available).
    heap: int | None = None
    buffers: int = 0
    amp_casts: int = 0
    temporaries: int = 0
    # The process's resident memory (/proc/self/statm), read where the heap is (on CUDA too).
    rss: int | None = None
    gathered: int = 0
    buckets: int = 0
    # What is saved for backward (CARRIED_CATEGORIES) is carried from the steps that measured
    # it (a watch's step without detail: core.watch.detail), not measured at this sample.
    carried: bool = False

    @property
    def total(self) -> int:
        return (self.params + self.grads + self.optimizer + self.activations + self.other
                + self.buffers + self.amp_casts + self.temporaries + self.gathered
                + self.buckets)


@dataclass(slots=True)
class StepRecord:
    """One training step (one micro-batch): timings in ms, memory in bytes."""

    step: int
    time_s: float
    loss: float
    grad_norm: float
    step_ms: float
    zero_grad_ms: float
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    eval_ms: float
    allocated_bytes: int  # CUDA: memory_allocated(); CPU: tensor bytes (sum of categories)
    peak_bytes: int  # CUDA: max_memory_allocated() this step; CPU: see peak_is_exact
    reserved_bytes: int | None  # CUDA only
    graph_nodes: int  # autograd nodes reachable from this step's loss
    saved_bytes: int  # bytes saved for backward by this step's forward (each storage once)
    retained_bytes: int  # saved-for-backward bytes still alive after the step (leaks)
    eval_loss: float = float("nan")
    optimizer_stepped: bool = True
    peak_is_exact: bool = False  # False: peak is the max of the phase samples, a lower bound


def _heading(text: str, limit: int) -> str:
    """The text's first `limit` characters, cut at a word with "…" when it goes on (the
    whole text is in the event's details)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2:]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:(") + "…"


@dataclass(slots=True)
class RunEvent:
    """Something that happened at a step: a toggle, an error, a leak warning."""

    step: int
    time_s: float
    # "toggle" | "refused" (a technique change this machine cannot run: `old` is the value
    # kept, `new` the one refused) | "error" | "leak" | "info" | "diagnosis" | "setup" (about
    # the machine or the set-up, such as a first build of the native helpers: listed, but it
    # marks no step on the timeline)
    kind: str
    key: str = ""
    old: Any = None
    new: Any = None
    phase: str = ""
    message: str = ""
    explanation: str = ""
    # kind "diagnosis" only (a watched script, core.watch): bytes involved, file:line, the fix
    bytes: int | None = None
    where: str = ""
    fix: str = ""
    # (message, explanation) with their byte figures as units.byte_figure marks, where
    # they have any: message and explanation are those written in the display of the
    # moment, and rerender() writes them again in the current one (View > Exact bytes).
    templates: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.templates is None and (has_figures(self.message)
                                       or has_figures(self.explanation)):
            self.templates = (self.message, self.explanation)
        if self.templates is not None:
            self.templates = tuple(self.templates)  # a list, read back from run.json
            self.rerender()

    def rerender(self) -> bool:
        """Write the byte figures again in the current bytes display; False if it has none."""
        if self.templates is None:
            return False
        self.message, self.explanation = (format_figures(t) for t in self.templates)
        return True

    @property
    def on_timeline(self) -> bool:
        """Whether it marks its step on the plots (all but notes about the set-up)."""
        return self.kind != "setup"

    def label(self) -> str:
        if self.kind == "toggle":
            from memlens.core.options import format_value

            if self.old == self.new:  # a watch's toggle to what the script already does
                return f"{self.key}={format_value(self.new)}: no-op"
            return f"{self.key}: {format_value(self.old)} -> {format_value(self.new)}"
        if self.kind == "error":
            return f"error in {self.phase or 'step'}: {self.key or _heading(self.message, 60)}"
        return _heading(self.message, 80)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.kind != "diagnosis":  # other events' run.json stays as it was
            for name in _DIAGNOSIS_FIELDS:
                del d[name]
        if self.templates is None:
            del d["templates"]
        return d


_DIAGNOSIS_FIELDS = ("bytes", "where", "fix")


@dataclass(slots=True)
class RunSummary:
    """What a finished (or stopped) run reports."""

    steps_done: int
    stopped_by: str  # "completed" | "stopped" | "error"
    wall_s: float
    final_loss: float
    peak_bytes: int
    mean_step_ms: float
    error: RunEvent | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["error"] = self.error.to_dict() if self.error else None
        return d


# Where an alloc/free row keeps its stack: ALLOC_COLUMNS.index("frame") in memlens.core.history
# (which imports this module; tests/core hold the two together).
ALLOC_FRAME_COLUMN = 8


class AllocBlock:
    """Precise mode's alloc/free events as one block: `table` is a float64 array with the
    columns of memlens.core.history.ALLOC_COLUMNS, its `frame` column an index into `frames` (the
    recorder's stack texts, "file:line:function|...") or -1 for none. `shared`: `frames` is
    the recorder's own list, the same object in each of its blocks, only ever appended to
    (the native recorder's; a consumer may then keep its mapping from one block to the next).
    Sinks may take it as it is (RunHistory, the allocations file) or as rows (`tuples()`)."""

    __slots__ = ("frames", "shared", "table")

    def __init__(self, table: Any, frames: list[str], shared: bool = False) -> None:
        self.table, self.frames, self.shared = table, frames, shared

    def __len__(self) -> int:
        return len(self.table)

    def frame_texts(self) -> list[str]:
        """The text of each row's stack ("" for none)."""
        frames = self.frames
        column = self.table[:, ALLOC_FRAME_COLUMN].astype(int).tolist()
        return ["" if i < 0 else frames[i] for i in column]

    def tuples(self) -> list[tuple]:
        """The rows as the Python tracker gives them: ints, the frames text last."""
        ints = self.table[:, :ALLOC_FRAME_COLUMN].astype("int64").tolist()
        return [(*r, f) for r, f in zip(ints, self.frame_texts(), strict=True)]


def edge_samples(step: int, params: int, buffers: int, rows: list[tuple],
                 buckets: Buckets = NO_BUCKETS, carried: bool = False) -> list[MemorySample]:
    """The native LightProbe's edge rows (core.recorder.probe.MemoryProbe.take_block: code,
    time_s, grads, optimizer, activations, other, heap, rss, gathered, tracked) as
    MemorySamples of `step`, with the probe's parameter, buffer and bucket bytes; `carried`:
    the rows are a step without detail's one sample (MemorySample.carried)."""
    return [MemorySample(step, SAMPLE_PHASES[code], t, params, grads, opt, act, other,
                         None, None, heap if heap >= 0 else None, buffers,
                         temporaries=_temporaries(params + buffers, grads, opt, act, other,
                                                  buckets.at(grads), tracked)
                         if tracked >= 0 else 0,
                         rss=rss if rss >= 0 else None, gathered=gathered,
                         buckets=buckets.at(grads), carried=carried)
            for code, t, grads, opt, act, other, heap, rss, gathered, tracked in rows]


def _temporaries(base: int, grads: int, opt: int, act: int, other: int, buckets: int,
                 tracked: int) -> int:
    """Precise mode (`tracked`: the bytes of every storage the allocator recorder sees
    alive): what no category holds, as MemoryProbe.sample counts it."""
    return max(0, tracked - (base + grads + opt + act + buckets) - other)


def edge_totals(params: int, buffers: int, rows: list[tuple],
                buckets: Buckets = NO_BUCKETS) -> list[int]:
    """Each edge row's total (edge_samples' MemorySample.total), without making samples."""
    base = params + buffers
    return [base + grads + opt + act + other + gathered + buckets.at(grads)
            + (_temporaries(base, grads, opt, act, other, buckets.at(grads), tracked)
               if tracked >= 0 else 0)
            for _, _, grads, opt, act, other, _, _, gathered, tracked in rows]


# The native LightProbe's samples of one step, not yet made MemorySamples: (step, params
# bytes, buffer bytes, rows as LightProbe.take gives them, DDP's buckets, whether the
# rows are carried: MemoryProbe.take_block). A watch hands these to the run folder's
# writer, which makes them samples on its own thread.
EdgeBlock = tuple[int, int, int, list[tuple], Any, bool]
SampleItem = MemorySample | EdgeBlock
# An ended step as a producer hands it on: its record and its samples not handed on before.
StepRow = tuple[StepRecord, "list[SampleItem] | tuple[()]"]


def samples_of(items) -> list[MemorySample]:
    """Sample items (MemorySamples, or EdgeBlocks) as MemorySamples, in order."""
    samples: list[MemorySample] = []
    for item in items:
        if isinstance(item, MemorySample):
            samples.append(item)
        else:
            samples += edge_samples(*item)
    return samples

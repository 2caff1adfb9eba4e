"""The one recorder under every producer of a run.

The lab's loop (presets, model files, the lessons' arms, the benchmarks: core.training) and
the watch of a user's script (core.watch) are drivers: each says what makes a step (the
loop's phases, or the script's module calls and optimizer steps). How a step is measured is
the recorder's, the same for both: the saved-tensor tracker and the native helpers, the
memory probe and its native wiring, precise mode's tracker and its phase categories, the
phase clock, graph node counts, the grad norm, AMP's weight copies, graph captures, the
step's memory figures and its StepRecord, and run.json's environment block.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from memlens.core.cpu_support import cpu_info
from memlens.core.recorder.probe import MemoryProbe
from memlens.core.records import StepRecord

GRAPH_NODE_LIMIT = 200_000  # stop counting beyond this (a leaked graph can be huge)
# Which category a new storage most likely is, by the phase that made it (precise mode).
PHASE_CATEGORY = {"start": "other", "zero_grad": "grads", "forward": "activations",
                  "backward": "grads", "optimizer": "optimizer", "eval": "activations"}
_NUMPY_DOT_DTYPES = (torch.float32, torch.float64)
_dot = np.dot


def count_graph_nodes(roots: list[Tensor], limit: int = GRAPH_NODE_LIMIT) -> int:
    """Autograd nodes reachable from the given outputs (each node once), up to `limit`."""
    stack = [r.grad_fn for r in roots if r.grad_fn is not None]
    seen = set(stack)
    push, add = stack.append, seen.add
    while stack and len(seen) < limit:
        for nxt, _ in stack.pop().next_functions:
            if nxt is not None and nxt not in seen:
                add(nxt)
                push(nxt)
    return min(len(seen), limit)


def sum_of_squares(grads: list[Tensor]) -> float:
    """The squared 2-norm of all gradients together, as clip_grad_norm_ computes the norm.

    CPU float32/float64 gradients go through numpy's BLAS dot, one call per tensor: on this
    path torch's per-tensor norm kernels cost about twice as much for the small tensors of a
    typical model. Anything else (CUDA, half precision) takes one foreach kernel; sparse
    gradients are taken one by one.
    """
    if not grads:
        return 0.0
    total = 0.0
    for g in grads:
        if g.dtype not in _NUMPY_DOT_DTYPES or g.device.type != "cpu" or g.is_sparse:
            break
        a = g.detach().numpy().reshape(-1)
        total += float(_dot(a, a))
    else:
        return total
    with torch.no_grad():
        try:
            return float(device_sum_of_squares(grads))
        except (RuntimeError, NotImplementedError):  # sparse gradients: their values
            return float(sum(
                float(torch.linalg.vector_norm(
                    (g.coalesce().values() if g.is_sparse else g).detach().float())) ** 2
                for g in grads))


def device_sum_of_squares(grads: list[Tensor]) -> Tensor:
    """sum_of_squares as a float64 tensor on the first gradient's device, not read (on a GPU:
    queued, no wait). One foreach kernel; raises on sparse gradients."""
    with torch.no_grad():
        norms = torch._foreach_norm([g.detach() for g in grads])
        norm = torch.linalg.vector_norm(torch.stack([n.float().to(norms[0].device)
                                                     for n in norms]))
        return norm.double() ** 2  # the float32 norm squared in double, as float(norm) ** 2


def phase_clock(device: torch.device, synchronize: bool = True
                ) -> tuple[Callable[[], float], str]:
    """The phase clock and its label: wall clock; on CUDA with `synchronize`, synchronized at
    each phase edge so that a phase's time is its kernels' and not the next one's.

    On CPU the clock is time.perf_counter itself: it is read ten times a step between
    kernels, where each Python frame costs several microseconds (the kernels leave the
    interpreter cold), and a C function costs none.
    """
    if device.type != "cuda":
        return time.perf_counter, "wall clock (CPU ops are synchronous)"
    if not synchronize:
        return time.perf_counter, ("wall clock, not synchronized: a phase's time is when "
                                   "its Python ran (CUDA kernels run asynchronously)")
    sync, now = torch.cuda.synchronize, time.perf_counter

    def tick() -> float:
        sync()
        return now()

    return tick, "wall clock, CUDA synchronized at phase edges"


class Recorder:
    """How a run's steps are measured (see the module doc). One per run, made on the
    training thread; `close()` on that thread at the end."""

    def __init__(self, device: torch.device, t0: float, *, precise: bool = False,
                 dispatch_precise: bool = False, synchronize: bool = True) -> None:
        """`precise`: track every storage, on the native allocator recorder where it is
        built (CPU), else on the Python dispatch mode; `dispatch_precise` takes the
        dispatch mode always (a watch: no build inside a user's script). `synchronize`:
        the phase clock waits for CUDA at each edge (the lab's loop; a watch does not add
        waits to a user's program)."""
        from memlens.core.native import load
        from memlens.core.native.tracker import make_saved_tracker

        self.device, self.t0 = device, t0
        self.cuda = device.type == "cuda"
        self.native = load(build=False)  # never waits for a build (core.native)
        self.saved = make_saved_tracker()
        self.count_nodes = (self.native.count_graph_nodes if self.native is not None
                            else count_graph_nodes)
        self.precise = None
        self.precise_note: str | None = None  # why precise mode is not the native recorder
        if precise and dispatch_precise:
            from memlens.core.recorder.precise import StorageTracker

            self.precise = StorageTracker(t0)
            self.precise_note = "a watch tracks every storage through the Python dispatch mode"
        elif precise:
            from memlens.core.native.tracker import make_precise_tracker

            self.precise, self.precise_note = make_precise_tracker(t0, device)
        self._synchronize = synchronize
        self.tick, self.timing_label = phase_clock(device, synchronize)
        self.probe: MemoryProbe | None = None

    def set_device(self, device: torch.device) -> None:
        """The device the run trains on, where it is known only later (a watch finds it from
        the first model's parameters)."""
        self.device, self.cuda = device, device.type == "cuda"
        self.tick, self.timing_label = phase_clock(device, self._synchronize)

    # --- the probe ------------------------------------------------------------------------------
    def make_probe(self, source: Any, *, light: bool = True) -> MemoryProbe:
        """The memory probe over `source` (a preset, or what a watch found: parameters,
        buffers, optimizers, carried tensors). On CPU the native helpers scan gradients
        (GradWatch) and, with `light`, take each phase edge's figures in one C call
        (LightProbe: the same rules as MemoryProbe.sample), precise mode's too where its
        allocator recorder is the native one."""
        from memlens.core.native.tracker import NativeSavedTracker, NativeStorageTracker

        probe = MemoryProbe(source, self.device, self.saved, self.precise)
        if self.native is not None and not self.cuda:
            grads = self.native.GradWatch(probe.param_list)
            probe.use_grad_watch(grads)
            # precise mode's edges too where the allocator recorder is native (not the
            # dispatch mode's: its storages are in Python)
            edges = self.precise is None or isinstance(self.precise, NativeStorageTracker)
            if light and edges and isinstance(self.saved, NativeSavedTracker):
                probe.use_light_probe(self.native.LightProbe(grads, self.saved.native), self.t0)
        if self.precise is not None:
            for p in probe.param_list:
                self.precise.track(p, "params", at_start=True)
        self.probe = probe
        return probe

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # --- within a step --------------------------------------------------------------------------
    def begin_step(self) -> None:
        """A step starts: its peak and its saved-for-backward bytes count from here."""
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.precise is not None:
            self.precise.reset_peak()
        self.saved.new_step()

    def begin_phase(self, step: int, phase: str) -> None:
        """Precise mode files the storages a phase makes under its likely category."""
        category = PHASE_CATEGORY.get(phase)
        if self.precise is not None and category is not None:
            self.precise.begin_phase(step, phase, category)

    def note_amp_casts(self, casts: dict) -> None:
        """AMP's weight copies a forward saved (recorder.amp_casts): amp_casts, not
        activations, while saved."""
        self.probe.amp_casts.update(casts)

    def prune_amp_casts(self) -> None:
        """Only the weight copies still saved: a freed one's address may hold an activation."""
        probe = self.probe
        if probe is not None and probe.amp_casts:
            live = self.saved.live
            probe.amp_casts = {k: n for k, n in probe.amp_casts.items() if k in live}

    def grad_norm(self, sum_sq: float, grads: Callable[[], list[Tensor]],
                  scale: float = 1.0) -> float:
        """The gradients' 2-norm from a sum of squares a native hook took (or -1 where it
        took none: then from `grads()`), divided by a loss scale (GradScaler's)."""
        if sum_sq < 0:
            sum_sq = sum_of_squares(grads())
        return math.sqrt(sum_sq) / scale

    def begin_capture(self, models: dict):
        from memlens.core.graph.capture import GraphCapture

        capture = GraphCapture(models)
        capture.begin()
        return capture

    # --- the step's end --------------------------------------------------------------------------
    def step_memory(self, peak_seen: int, end_total: int
                    ) -> tuple[int, int, int | None, bool]:
        """(allocated, peak, reserved, peak is exact) for the step that ends now: CUDA's
        allocator, precise mode's tracker, else the samples (the peak a lower bound)."""
        if self.cuda:
            return (torch.cuda.memory_allocated(self.device),
                    max(peak_seen, torch.cuda.max_memory_allocated(self.device)),
                    torch.cuda.memory_reserved(self.device), True)
        if self.precise is not None:
            return end_total, max(peak_seen, self.precise.peak_bytes), None, True
        return end_total, peak_seen, None, False

    def end_saved(self) -> tuple[int, int]:
        """The step's saved-for-backward bytes and those still held after it (a retained or
        leaked graph: from now on they count as retained)."""
        saved = self.saved
        saved.end_step()
        return saved.step_saved_bytes, saved.retained_bytes

    def step_record(self, *, step: int, loss: float, grad_norm: float,
                    phase_ms: dict[str, float], nodes: int, peak_seen: int, end_total: int,
                    saved_bytes: int | None = None, eval_loss: float = math.nan,
                    stepped: bool = True, step_ms: float | None = None) -> StepRecord:
        """The step's row: its times, its memory (step_memory), its saved bytes (end_saved;
        `saved_bytes` where the driver took them earlier, after the training forward)."""
        allocated, peak, reserved, exact = self.step_memory(peak_seen, end_total)
        step_saved, retained = self.end_saved()
        ms = phase_ms
        return StepRecord(
            step=step, time_s=self.now(), loss=loss, grad_norm=grad_norm,
            step_ms=sum(ms.values()) if step_ms is None else step_ms,
            zero_grad_ms=ms["zero_grad"], forward_ms=ms["forward"],
            backward_ms=ms["backward"], optimizer_ms=ms["optimizer"], eval_ms=ms["eval"],
            allocated_bytes=allocated, peak_bytes=peak, reserved_bytes=reserved,
            graph_nodes=nodes, saved_bytes=step_saved if saved_bytes is None else saved_bytes,
            retained_bytes=retained, eval_loss=eval_loss, optimizer_stepped=stepped,
            peak_is_exact=exact)

    def measured_peak(self, peak_seen: int) -> int:
        """The largest memory seen so far, with the in-step peaks where they are known."""
        peak = peak_seen
        if self.precise is not None:
            peak = max(peak, self.precise.peak_bytes)
        if self.cuda:
            peak = max(peak, torch.cuda.max_memory_allocated(self.device))
        return peak

    # --- run.json -------------------------------------------------------------------------------
    def environment(self, *, parameters: int, sizes: dict | None = None,
                    memory_label: str = "") -> dict:
        """run.json's environment block: the same keys for every producer of a run."""
        probe = self.probe
        return {
            "torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "device": str(self.device),
            "device_name": (torch.cuda.get_device_name(self.device) if self.cuda
                            else cpu_info()["cpu"]),
            "memory_source": probe.source if probe is not None else "",
            "memory_label": memory_label or (probe.label if probe is not None else ""),
            "timing": self.timing_label,
            "precise": self.precise is not None,
            "precise_backend": self.precise.backend if self.precise is not None else "",
            "precise_note": self.precise_note or "",
            "heap_source": "" if self.cuda else "glibc mallinfo2 (process heap)",
            "parameters": parameters,
            "sizes": dict(sizes or {}),
            "threads": torch.get_num_threads(),
            "cpu": cpu_info(),
        }

    def close(self) -> None:
        """Stop precise mode's listening (on the training thread)."""
        if self.precise is not None:
            self.precise.close()

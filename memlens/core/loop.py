"""The training loop: phases, live techniques, measurement at every phase boundary.

One plain function serves the GUI worker, the headless CLI and the tests. It runs in the
calling thread, reads techniques from a RunControls at each step boundary, and hands plain
records to a sink. Training errors become events; nothing recorded before them is lost.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from memlens.core.config import RunConfig, TechniqueToggles
from memlens.core.controls import RunControls, StopRequested
from memlens.core.cpu_support import cpu_info
from memlens.core.explain import error_title, explain_error, explain_leak
from memlens.core.presets import Preset, build_preset
from memlens.core.recorder.amp_casts import amp_cast_storages
from memlens.core.recorder.probe import MemoryProbe
from memlens.core.records import (
    NATIVE_BUILD_EVENT,
    PHASE_CODE,
    SAMPLE_PHASES,
    MemorySample,
    RunEvent,
    RunSummary,
    StepRecord,
)
from memlens.core.sinks import FanOut

# Which category a new storage most likely is, by the phase that made it (precise mode).
_PHASE_CATEGORY = {"start": "other", "zero_grad": "grads", "forward": "activations",
                   "backward": "grads", "optimizer": "optimizer", "eval": "activations"}
_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# A do-nothing context the step enters where no AMP or precise mode is on: one object made
# once (nullcontext keeps no state), not one a step.
_NO_CONTEXT = contextlib.nullcontext()
_NUMPY_DOT_DTYPES = (torch.float32, torch.float64)
_ZERO_GRAD, _FORWARD, _BACKWARD, _OPTIMIZER, _EVAL_FORWARD, _EVAL = (
    PHASE_CODE[p] for p in ("zero_grad", "forward", "backward", "optimizer", "eval_forward",
                            "eval"))
_dot = np.dot
GRAPH_NODE_LIMIT = 200_000  # stop counting beyond this (a leaked graph can be huge)
# Steps shorter than SHORT_STEP_MS are "short" until one takes longer than LONG_STEP_MS
# (hysteresis). A long step has stop hooks on its models (a stop answered inside a long
# phase) and hands each sample on as its phase ends (a live view sees forward's rise before
# backward runs). A short step answers a stop at its next phase edge soon enough, and in
# light mode hands its samples on at its end: the GUI draws at 30 Hz, and a sample handed
# on right after a phase's kernels costs several times what it costs at the step's end.
SHORT_STEP_MS = 30.0
LONG_STEP_MS = 60.0
ALLOC_FLUSH_ROWS = 2048  # precise mode: alloc/free rows held before handing them on
ALLOC_FLUSH_S = 0.25
LEAK_WINDOW = 8  # steps of steady growth before a leak is reported
LEAK_MIN_BYTES = 32 * 1024  # per step


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        from memlens.core.options import ConfigError

        raise ConfigError("device: 'cuda' was asked for but torch sees no CUDA GPU; "
                          "use device=auto or device=cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


_TORCH_THREADS: list[int] = []  # torch's own default, read before memlens first changes it


def use_threads(n: int) -> None:
    """torch's CPU threads for a run: n, or for 0 torch's default (one per core). Process-wide,
    as torch's setting is: a later run with 0 gets the default back."""
    if not _TORCH_THREADS:
        _TORCH_THREADS.append(torch.get_num_threads())
    n = n or _TORCH_THREADS[0]
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


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


def global_grad_norm(grads: list[Tensor]) -> float:
    """The 2-norm of all gradients together, as clip_grad_norm_ computes it.

    CPU float32/float64 gradients go through numpy's BLAS dot, one call per tensor: on this
    path torch's per-tensor norm kernels cost about twice as much for the small tensors of a
    typical model, and the norm runs every step. Anything else (CUDA, half precision) uses
    torch._foreach_norm.
    """
    if not grads:
        return 0.0
    total = 0.0
    for g in grads:
        if g.dtype not in _NUMPY_DOT_DTYPES or g.device.type != "cpu":
            break
        a = g.numpy().reshape(-1)
        total += float(_dot(a, a))
    else:
        return math.sqrt(total)
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))).item()


def _timing(device: torch.device) -> tuple[Callable[[], float], str]:
    """The phase clock and its label: wall clock; on CUDA, synchronized at each phase edge
    so that a phase's time is its kernels' and not the next one's.

    On CPU the clock is time.perf_counter itself: the loop reads it ten times a step between
    kernels, where each Python frame costs several microseconds (the kernels leave the
    interpreter cold), and a C function costs none.
    """
    if device.type != "cuda":
        return time.perf_counter, "wall clock (CPU ops are synchronous)"
    sync, now = torch.cuda.synchronize, time.perf_counter

    def tick() -> float:
        sync()
        return now()

    return tick, "wall clock, CUDA synchronized at phase edges"


class _LeakWatch:
    """Reports steady growth of end-of-step memory once, naming the likely cause.

    With an eval phase every `period` steps, a leak through eval (its graph kept alive)
    grows memory once a period, not every step; the watch then compares steps a period
    apart, over at least three periods.
    """

    def __init__(self, period: int = 1) -> None:
        self.period = max(1, period)
        periods = max(3, LEAK_WINDOW // self.period)  # LEAK_WINDOW steps without eval
        # (total, activations, other) of the last steps the window spans
        self.history: collections.deque[tuple[int, int, int]] = collections.deque(
            maxlen=periods * self.period + 1)
        self.reported = False

    def update(self, total: int, activations: int, other: int, toggles: TechniqueToggles
               ) -> str | None:
        hist = self.history
        hist.append((total, activations, other))
        if len(hist) < hist.maxlen:
            return None
        if total - hist[-1 - self.period][0] < LEAK_MIN_BYTES:  # the common case, cheaply
            self.reported = False
            return None
        h = list(hist)[:: self.period]
        growing = all(b[0] - a[0] >= LEAK_MIN_BYTES for a, b in itertools.pairwise(h))
        if not growing:
            self.reported = False
            return None
        if self.reported:
            return None
        self.reported = True
        steps = (len(h) - 1) * self.period
        per_step = (h[-1][0] - h[0][0]) / steps
        act = h[-1][1] - h[0][1]
        grew = "activations saved for backward" if act > (h[-1][0] - h[0][0]) / 2 else "other"
        return explain_leak(toggles, grew, per_step, self.period)


class TrainingSession:
    """A preset plus its measurement; runs steps. Use run_training() unless you need steps."""

    def __init__(self, config: RunConfig, controls: RunControls, sink: Any,
                 preset: Preset | None = None) -> None:
        """`preset`: an already built preset for this config (the benchmarks time several
        ways of running one model); by default the session builds its own."""
        self.config = config
        self.controls = controls
        self.sink = sink
        self.device = resolve_device(config.device)
        self._cuda = self.device.type == "cuda"
        use_threads(config.threads)
        self.t0 = time.perf_counter()
        self.preset: Preset = preset if preset is not None else build_preset(config, self.device)
        refusal = self.amp_refusal(config.techniques.amp)
        if refusal is not None:
            from memlens.core.options import ConfigError

            raise ConfigError(f"amp=bf16: {refusal}")
        self._amp_noted = False  # the note that this CPU emulates bf16, once a run
        native = self._wire_native()
        self.precise = None
        self.precise_note = None  # why precise mode is not on the native recorder, if not
        if config.precise:
            from memlens.core.native.tracker import make_precise_tracker

            self.precise, self.precise_note = make_precise_tracker(self.t0, self.device)
        self.probe = MemoryProbe(self.preset, self.device, self.saved, self.precise)
        self._wire_grad_watch(native)
        # A phase edge's sample: taken and handed on at once, or, in light mode once steps
        # are short, kept by the native LightProbe until the step's end (take_step_samples).
        self._edge = self._sample_now
        self._step = 0
        self.phase = ""
        self._step_samples: list[MemorySample] = []
        self.sample_peak = 0  # the largest total of any sample handed on (measured_peak)
        # The last training forward's result (losses, outputs), held as a user's loop holds
        # `loss = ...` and `logits = ...`: until the next forward rebinds them.
        self.held = None
        self.tick, self.timing_label = _timing(self.device)
        self.scaler = None
        self.micro = 0  # micro-batches since the last optimizer step
        self.leaks = _LeakWatch(config.eval_every or 1)
        self.cuda_recorder = None
        self._flushed_at = time.perf_counter()
        if self.device.type == "cuda" and config.cuda_snapshot_steps:
            from memlens.core.exports.cuda_recorder import CudaSnapshotRecorder

            self.cuda_recorder = CudaSnapshotRecorder(
                config.cuda_snapshot_start, config.cuda_snapshot_steps, device=self.device)
        self._stop_hooks: list = []
        self._short_steps = False  # until a step shows phase edges come often enough
        self.install_stop_hooks()
        # One saved-tensor hooks context for every step (it keeps no state between uses).
        self._saved_hooks = self.saved.hooks()
        if self.precise is not None:
            for p in self.preset.parameters():
                self.precise.track(p, "params", at_start=True)
            for t in self.preset.carried_tensors():
                self.precise.track(t, "other", at_start=True)
            for b in self.preset.buffers():
                self.precise.track(b, "buffers", at_start=True)

    def _wire_native(self):
        """The native helpers (where they are built; never waiting for a build here, see
        memlens.core.native) run the saved-tensor hooks and count graph nodes without a Python
        frame or object per tensor or node. Returns the native module, or None."""
        from memlens.core.native import load
        from memlens.core.native.tracker import make_saved_tracker

        self.saved = make_saved_tracker()
        native = load(build=False)
        self._count_nodes = native.count_graph_nodes if native else count_graph_nodes
        # CPU: each gradient's sum of squares taken by a hook as autograd writes it (see
        # GradWatch in core/native/grad_watch.h), put on at each step (a no-op while on), off at
        # close().
        self._grad_watch = (native.GradWatch(list(self.preset.parameters()))
                            if native is not None and self.device.type == "cpu" else None)
        return native

    def _wire_grad_watch(self, native) -> None:
        """install() and sum_of_squares() run every step: as plain C functions (bind_fast in
        core/native/fast_calls.h), or None without the watch. In light mode the native LightProbe
        takes the phase-edge samples."""
        from memlens.core.native.tracker import NativeSavedTracker

        self._watch_install = self._watch_sumsq = None
        if self._grad_watch is None:
            return
        self._watch_install, self._watch_sumsq = self._grad_watch.fast_functions()
        self.probe.use_grad_watch(self._grad_watch)
        if self.precise is None and isinstance(self.saved, NativeSavedTracker):
            self.probe.use_light_probe(native.LightProbe(self._grad_watch, self.saved.native),
                                       self.t0)

    def amp_refusal(self, amp: str) -> str | None:
        """Why autocast `amp` cannot run this preset on this device (a CPU whose oneDNN has no
        bf16 LSTM, say), or None where it can."""
        if amp != "bf16" or self.device.type != "cpu":
            return None
        from memlens.core.cpu_support import bf16_support, layer_kinds

        support = bf16_support()
        kind = support.blocked(layer_kinds(self.preset.models.values()))
        return support.refusal(kind) if kind else None

    def amp_note(self, amp: str) -> RunEvent | None:
        """Once a run, where bf16 runs but is emulated by this CPU: the note saying so."""
        if amp != "bf16" or self.device.type != "cpu" or self._amp_noted:
            return None
        from memlens.core.cpu_support import bf16_support

        note = bf16_support().emulated_note()
        if not note:
            return None
        self._amp_noted = True
        return RunEvent(self._step, self.now(), "setup", key="bf16 emulated",
                        message="bf16 is emulated on this CPU: its steps are slower than fp32",
                        explanation=note[0].upper() + note[1:] + ".")

    # --- metadata -------------------------------------------------------------------------
    def meta(self) -> dict:
        n_params = sum(p.numel() for p in self.preset.parameters())
        env = {
            "torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "device": str(self.device),
            "device_name": (torch.cuda.get_device_name(self.device)
                            if self.device.type == "cuda" else platform.processor() or "cpu"),
            "memory_source": self.probe.source, "memory_label": self.probe.label,
            "timing": self.timing_label, "precise": self.config.precise,
            "precise_backend": self.precise.backend if self.precise is not None else "",
            "precise_note": self.precise_note or "",
            "heap_source": "glibc mallinfo2 (process heap)" if self.device.type == "cpu" else "",
            "parameters": n_params,
            "threads": torch.get_num_threads(),
            **({"cpu": cpu_info()} if self.device.type == "cpu" else {}),
            "sizes": {"batch_size": self.preset.batch_size, "width": self.preset.width,
                      "seq_len": self.preset.seq_len},
        }
        cfg = self.config.to_dict()
        return {"config": cfg, "schedule": cfg["schedule"], "environment": env}

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def sample(self, step: int, phase: str, carried: list | None = None):
        s = self.probe.sample(step, phase, self.now(), carried)
        self.sink.on_sample(s)
        self.sample_peak = max(self.sample_peak, s.total)
        return s

    def _sample_now(self, code: int, carried: list) -> None:
        """A phase edge's sample, taken and handed to the sink at once."""
        self._step_samples.append(self.sample(self._step, SAMPLE_PHASES[code], carried))

    def take_step_samples(self) -> list[MemorySample]:
        """The samples of the current step's edges so far, in order. Those the native edge
        kept reach the sink here: at the step's end, or (run_training) at an error or a stop
        inside it, so that nothing measured before either is lost."""
        if self.probe.edge is not None:
            kept = self.probe.take_samples(self._step)
            on_sample = self.sink.on_sample
            for s in kept:
                on_sample(s)
            self._step_samples.extend(kept)
        out, self._step_samples = self._step_samples, []
        if out:
            self.sample_peak = max(self.sample_peak, max(s.total for s in out))
        return out

    def measured_peak(self) -> int:
        """The largest memory any sample so far saw, with the in-step peaks where they are
        known (CUDA, precise mode): a failed or stopped step's count too, so a summary's
        peak is never below a total it printed."""
        peak = self.sample_peak
        if self.precise is not None:
            peak = max(peak, self.precise.peak_bytes)
        if self._cuda:
            peak = max(peak, torch.cuda.max_memory_allocated(self.device))
        return peak

    def flush_allocations(self) -> None:
        if self.precise is not None and hasattr(self.sink, "on_allocations"):
            self._flushed_at = time.perf_counter()
            rows = self.precise.drain()
            if rows:
                self.sink.on_allocations(rows)

    def _maybe_flush_allocations(self) -> None:
        """Precise mode hands alloc/free rows on in batches of many steps: turning stacks
        into text and storing rows costs less per row in one go, and a viewer a quarter of
        a second behind loses nothing. run_training flushes at every end of a run."""
        if self.precise is not None and (
                self.precise.pending >= ALLOC_FLUSH_ROWS
                or time.perf_counter() - self._flushed_at >= ALLOC_FLUSH_S):
            self.flush_allocations()

    def _enter_phase(self, step: int, phase: str) -> None:
        """A phase edge: names the phase (for an error's event), aborts here if a stop was
        asked, and has precise mode file new storages under the phase."""
        self.phase = phase
        if self.controls.stopping:
            raise StopRequested
        if self.precise is not None:
            self.precise.begin_phase(step, phase, _PHASE_CATEGORY[phase])

    def install_stop_hooks(self) -> None:
        """A stop asked for mid-step aborts at the next model call or phase. Hooks go on the
        top-level models only: a module with any hook leaves PyTorch's fast call path, and
        hooking every child cost more than the rest of the stop machinery together. Where
        steps are short, the phase edges alone answer a stop within a few milliseconds and
        the hooks come off (see SHORT_STEP_MS)."""
        if not self._short_steps and not self._stop_hooks:
            check = self.controls.check_stop
            self._stop_hooks = [model.register_forward_pre_hook(lambda *_: check())
                                for model in self.preset.models.values()]

    def tune_for_step_length(self, step_ms: float) -> None:
        """Short steps: no stop hooks, samples kept to the step's end where the native
        LightProbe keeps them; long steps: hooks on, each sample handed on at once."""
        if step_ms < SHORT_STEP_MS and not self._short_steps:
            self._short_steps = True
            self._remove_stop_hooks()
            if self.probe.edge is not None:
                self._edge = self.probe.edge
        elif step_ms > LONG_STEP_MS and self._short_steps:
            self._short_steps = False
            self.install_stop_hooks()
            self._edge = self._sample_now

    def close(self) -> None:
        """Remove the session's hooks from the models and stop precise mode's listening, on
        the training thread (install_stop_hooks() and the next step put them back)."""
        self._remove_stop_hooks()
        if self._grad_watch is not None:
            self._grad_watch.uninstall()
        if self.precise is not None:
            self.precise.close()

    @property
    def current_phase(self) -> str:
        """The phase the step is in (or ended in): where an error happened."""
        return self.phase

    def reset_accumulation(self) -> None:
        """Start a new accumulation cycle: after a failed step its micro-batches are gone."""
        self.micro = 0

    def _remove_stop_hooks(self) -> None:
        for h in self._stop_hooks:
            h.remove()
        self._stop_hooks = []

    # --- one step -------------------------------------------------------------------------
    def step(self, step: int, toggles: TechniqueToggles, capture: bool) -> StepRecord:
        """One step (one micro-batch): its phases, timed, and a memory sample after each.

        The phase clock is a bare function (time.perf_counter on CPU) and the contexts are
        made once, not per step: between kernels the interpreter runs with cold caches, and
        each Python call here costs several microseconds (a function that does nothing,
        called between gan's backward and its next step: 5 us).
        """
        p = self.preset
        p.step_index = step
        self._step = step
        tick, precise, edge = self.tick, self.precise, self._edge
        carried = p.carried_tensors()
        cuda = self._cuda
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        if precise is not None:
            precise.reset_peak()
        self.saved.new_step()
        if self._watch_install is not None:
            self._watch_install()
        if toggles.amp == "fp16" and self.scaler is None:
            self.scaler = torch.amp.GradScaler(self.device.type)
        elif toggles.amp != "fp16":
            self.scaler = None
        k = toggles.accumulate
        amp_dtype = _AMP_DTYPES.get(toggles.amp)
        autocast = self._autocast(amp_dtype)
        if amp_dtype is not None:
            # AMP's weight copies are told apart from activations at each sample (the
            # native edge keeps figures without them): sample as each phase ends.
            edge = self._sample_now
        eval_ms = 0.0
        with self._saved_hooks, (precise if precise is not None else _NO_CONTEXT):
            # zero_grad: at the start of each accumulation cycle, unless switched off.
            self._enter_phase(step, "zero_grad")
            t = tick()
            if self.micro == 0 and toggles.zero_grad != "off":
                for opt in p.optimizers:
                    opt.zero_grad(set_to_none=toggles.zero_grad == "set_to_none")
            zero_grad_ms = (tick() - t) * 1e3
            edge(_ZERO_GRAD, carried)

            self._enter_phase(step, "forward")
            graph = self._begin_capture() if capture else None
            try:
                t = tick()
                with autocast:
                    result = p.forward_train(toggles)
                forward_ms = (tick() - t) * 1e3
                # The new forward rebinds `loss` and `logits`: the last step's go only now.
                self.held = result
            except BaseException:
                if graph is not None:
                    graph.abort()
                raise
            loss_value = result.report_loss.item()
            if graph is not None:
                self.sink.on_graph(graph.finish(result.report_loss, step))
            if toggles.leak_cache:
                p.cache.extend(result.intermediates)
            roots = [loss for loss, _ in result.backward]
            nodes = self._count_nodes(roots, GRAPH_NODE_LIMIT)
            self.probe.amp_casts = (amp_cast_storages(roots, self.probe.param_list)
                                    if amp_dtype is not None else {})
            p.account_loss(result.report_loss, toggles, train=True, value=loss_value)
            carried = p.carried_tensors()  # forward replaces lstm's state, a leak adds some
            edge(_FORWARD, carried)
            saved_bytes = self.saved.step_saved_bytes  # all packed by now
            if not math.isfinite(loss_value):
                raise FloatingPointError(f"loss = {loss_value}")

            self._enter_phase(step, "backward")
            t = tick()
            for loss, inputs in result.backward:
                scaled = loss / k if k > 1 else loss
                if self.scaler is not None:
                    scaled = self.scaler.scale(scaled)
                scaled.backward(retain_graph=toggles.retain_graph, inputs=inputs)
            backward_ms = (tick() - t) * 1e3
            # A plain loop keeps `loss` and its outputs bound until the next forward
            # (self.held): with retain_graph its saved tensors stay alive that long.
            del result, loss, scaled
            edge(_BACKWARD, carried)
            grad_norm = self._grad_norm()

            self._enter_phase(step, "optimizer")
            self.micro += 1
            stepped = self.micro >= k
            t = tick()
            if stepped:
                for opt in p.optimizers:
                    if self.scaler is not None:
                        self.scaler.step(opt)
                    else:
                        opt.step()
                if self.scaler is not None:
                    self.scaler.update()
                self.micro = 0
            optimizer_ms = (tick() - t) * 1e3
            edge(_OPTIMIZER, carried)

            eval_loss = math.nan
            every = self.config.eval_every
            if every and (step + 1) % every == 0:
                self._enter_phase(step, "eval")
                eval_loss, eval_ms = self._eval(step, toggles, amp_dtype, capture)
                edge(_EVAL, p.carried_tensors())
        samples = self.take_step_samples()
        end = samples[-1]
        end_total = end.total
        peak = max([s.total for s in samples])
        if precise is not None:
            self._maybe_flush_allocations()
        self.saved.end_step()

        step_ms = zero_grad_ms + forward_ms + backward_ms + optimizer_ms + eval_ms
        self.tune_for_step_length(step_ms)
        if cuda:
            allocated = torch.cuda.memory_allocated(self.device)
            peak, exact = torch.cuda.max_memory_allocated(self.device), True
            reserved = torch.cuda.memory_reserved(self.device)
        elif precise is not None:
            allocated, peak, exact, reserved = end_total, precise.peak_bytes, True, None
        else:
            allocated, exact, reserved = end_total, False, None
        leak = self.leaks.update(end_total, end.activations, end.other, toggles)
        if leak:
            self.sink.on_event(RunEvent(step, self.now(), "leak", key="memory growth",
                                        message="memory keeps growing",
                                        explanation=leak))
        return StepRecord(
            step=step, time_s=self.now(), loss=loss_value, grad_norm=grad_norm,
            step_ms=step_ms, zero_grad_ms=zero_grad_ms, forward_ms=forward_ms,
            backward_ms=backward_ms, optimizer_ms=optimizer_ms, eval_ms=eval_ms,
            allocated_bytes=allocated, peak_bytes=peak, reserved_bytes=reserved,
            graph_nodes=nodes, saved_bytes=saved_bytes, retained_bytes=self.saved.retained_bytes,
            eval_loss=eval_loss, optimizer_stepped=stepped, peak_is_exact=exact,
        )

    def _eval(self, step: int, toggles: TechniqueToggles, amp_dtype, capture: bool
              ) -> tuple[float, float]:
        """The eval phase: (its loss, its forward's time in ms)."""
        p = self.preset
        if self.probe.amp_casts:
            # Only the copies still saved: a freed one's address may hold an eval activation.
            live = self.saved.live
            self.probe.amp_casts = {k: n for k, n in self.probe.amp_casts.items() if k in live}
        if toggles.eval_mode:
            p.set_train(False)
        grad_ctx = torch.no_grad() if toggles.no_grad_eval else contextlib.nullcontext()
        autocast = self._autocast(amp_dtype)
        # A capture shows the eval graph too: empty under no_grad, a full graph without it.
        graph = self._begin_capture() if capture else None
        try:
            t = self.tick()
            with grad_ctx, autocast:
                loss = p.forward_eval(toggles)
                value = loss.item()
                p.account_loss(loss, toggles, train=False, value=value)
            ms = (self.tick() - t) * 1e3
            # Memory as a validation loop holds it: the loss bound, its graph alive under grad.
            if amp_dtype is not None:
                if not toggles.no_grad_eval:
                    self.probe.amp_casts.update(
                        amp_cast_storages([loss], self.probe.param_list))
                self._sample_now(_EVAL_FORWARD, p.carried_tensors())
            else:
                self._edge(_EVAL_FORWARD, p.carried_tensors())
            if graph is not None:
                self.sink.on_graph(graph.finish(loss, step, kind="eval"))
                graph = None
        finally:
            if graph is not None:
                graph.abort()
            p.set_train(True)
        return value, ms

    def _autocast(self, dtype):
        """Autocast to `dtype` on this device, or, for dtype None, a context that does
        nothing."""
        if dtype is None:
            return _NO_CONTEXT
        return torch.autocast(self.device.type, dtype=dtype)

    def _grad_norm(self) -> float:
        total = self._watch_sumsq() if self._watch_sumsq is not None else -1.0
        norm = math.sqrt(total) if total >= 0 else global_grad_norm(self.probe.grads())
        if self.scaler is not None:  # report the true gradient, not the scaled one
            norm /= self.scaler.get_scale()
        return norm

    def _begin_capture(self):
        from memlens.core.graph.capture import GraphCapture

        cap = GraphCapture(self.preset.models)
        cap.begin()
        return cap


def _announce_native_build(config: RunConfig, sink: Any) -> None:
    """A precise CPU run on a machine where the set-up did not build the native recorder
    compiles it first (under a minute, once): say so, as the run's first event."""
    from memlens.core.native import needs_build

    if config.precise and resolve_device(config.device).type == "cpu" and needs_build():
        sink.on_event(RunEvent(
            0, 0.0, "setup", key=NATIVE_BUILD_EVENT,
            message="building precise mode's allocation recorder for this torch "
                    "(once, under a minute)",
            explanation="memlens compiles its C++ helpers the first time they are needed "
                        "(./dev does it at set-up). The run starts when the build is done; "
                        "without a compiler it runs on the slower Python tracker.",
        ))


def _announce_cuda_only(config: RunConfig, sink: Any) -> None:
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


def _apply_changes(session: TrainingSession, controls: RunControls, sink: Any, step: int,
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


def _refuse_failed_amp(session: TrainingSession, controls: RunControls, sink: Any, step: int,
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
    sink: Any = None,
    *,
    on_error: str = "stop",
) -> RunSummary:
    """Run `config.steps` steps.

    on_error: "stop" ends the run at a training error; "pause" records it, pauses the controls
    and waits (the GUI); "continue" records it and goes on with the next step.
    """
    controls = controls or RunControls(config.techniques, config.schedule)
    sink = sink if sink is not None else FanOut()
    _announce_native_build(config, sink)
    _announce_cuda_only(config, sink)
    try:
        session = TrainingSession(config, controls, sink)
    except (MemoryError, RuntimeError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        from memlens.core.preflight import is_out_of_memory, setup_out_of_memory

        if not is_out_of_memory(exc):
            raise
        raise setup_out_of_memory(exc, config) from None
    sink.on_start(session.meta())
    note = session.amp_note(config.techniques.amp)
    if note is not None:
        sink.on_event(note)
    session.sample(0, "start")
    session.flush_allocations()
    # Running figures, not lists: a run's memory must not grow with its length.
    stopped_by, error, done, final_loss, step_ms_sum = "completed", None, 0, math.nan, 0.0
    peak = 0
    step = 0
    try:
        while step < config.steps:
            if not controls.wait_while_paused() or controls.stop_requested:
                stopped_by = "stopped"
                break
            toggles, changes = controls.begin_step(step)
            toggles = _apply_changes(session, controls, sink, step, toggles, changes)
            every = config.capture_every
            capture = controls.take_capture_request() or bool(every and step % every == 0)
            recorder = session.cuda_recorder
            try:
                if recorder is not None:
                    recorder.on_step_begin(step)
                record = session.step(step, toggles, capture)
                if recorder is not None:
                    recorder.on_step_end(step)
            except StopRequested:
                session.take_step_samples()  # what the step measured before the stop
                stopped_by = "stopped"
                break
            except Exception as exc:  # a training error is data, not a crash
                session.take_step_samples()  # what the step measured before the error
                session.flush_allocations()
                if _refuse_failed_amp(session, controls, sink, step, toggles, exc):
                    continue  # the same step again, in fp32
                phase = session.current_phase
                error = RunEvent(step, session.now(), "error", key=error_title(exc),
                                 phase=phase, message=f"{type(exc).__name__}: {exc}",
                                 explanation=explain_error(exc, config.preset, phase, toggles,
                                                           on_error))
                sink.on_event(error)
                session.preset.recover()
                session.held = None  # a failed step's graph is not kept for the next one
                session.reset_accumulation()
                if on_error in ("pause", "continue"):
                    if on_error == "pause":
                        controls.pause()
                    step += 1
                    continue
                stopped_by = "error"
                break
            sink.on_step(record)
            done += 1
            final_loss = record.loss
            step_ms_sum += record.step_ms
            peak = max(peak, record.peak_bytes)
            step += 1
    finally:
        session.close()
        session.flush_allocations()
        if session.cuda_recorder is not None:
            if session.cuda_recorder.recording or session.cuda_recorder.snapshot is not None:
                sink_cuda = getattr(sink, "on_cuda_snapshot", None)
                if sink_cuda is not None:
                    sink_cuda(session.cuda_recorder)
            session.cuda_recorder.close()
    peak = max(peak, session.measured_peak())
    summary = RunSummary(
        steps_done=done, stopped_by=stopped_by, wall_s=session.now(),
        final_loss=final_loss, peak_bytes=peak,
        mean_step_ms=step_ms_sum / done if done else math.nan, error=error,
    )
    sink.on_finish(summary.to_dict())
    return summary

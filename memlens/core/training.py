"""The lab's driver of the recorder: a preset's step (zero_grad, forward, backward, optimizer,
eval) with the live techniques applied, measured by the one recorder (core.recorder).

A `TrainingSession` is a preset plus its recording; `core.loop.run_training` runs its steps.
What is measured, and how, is the recorder's; what makes a step is this module's.
"""

from __future__ import annotations

import contextlib
import math
import time

import torch

from memlens.core.config import RunConfig, TechniqueToggles
from memlens.core.controls import RunControls, StopRequested
from memlens.core.findings import GRAPH_KEPT, MEMORY_GROWTH
from memlens.core.leaks import LeakWatch
from memlens.core.preset_factory import build_preset
from memlens.core.presets import Preset
from memlens.core.recorder.amp_casts import amp_cast_storages
from memlens.core.recorder.keys import StorageBytes
from memlens.core.recorder.recorder import GRAPH_NODE_LIMIT, Recorder
from memlens.core.recorder.step import HEAP_EVERY_S, StepRecorder
from memlens.core.records import RunEvent, StepRecord
from memlens.core.runfolder.header import run_header
from memlens.core.sinks import RunSink

_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# A do-nothing context the step enters where no AMP or precise mode is on: one object made
# once (nullcontext keeps no state), not one a step.
_NO_CONTEXT = contextlib.nullcontext()
_TORCH_THREADS: list[int] = []  # torch's own default, read before memlens first changes it


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        from memlens.core.options import ConfigError

        raise ConfigError("device: 'cuda' was asked for but torch sees no CUDA GPU; "
                          "use device=auto or device=cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def default_threads() -> int:
    """torch's own default of CPU threads (one per core), whatever memlens set since."""
    return _TORCH_THREADS[0] if _TORCH_THREADS else torch.get_num_threads()


def use_threads(n: int) -> None:
    """torch's CPU threads for a run: n, or for 0 torch's default (one per core). Process-wide,
    as torch's setting is: a later run with 0 gets the default back."""
    if not _TORCH_THREADS:
        _TORCH_THREADS.append(torch.get_num_threads())
    n = n or _TORCH_THREADS[0]
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


class TrainingSession:
    """A preset plus its recording; runs steps. Use run_training() unless you need steps."""

    def __init__(self, config: RunConfig, controls: RunControls, sink: RunSink,
                 preset: Preset | None = None, heap_every_s: float = HEAP_EVERY_S) -> None:
        """`preset`: an already built preset for this config (the benchmarks time several
        ways of running one model); by default the session builds its own. `heap_every_s`:
        the process heap and RSS are read after a step's forward at most this often (0:
        every step, as a lesson that measures the heap's growth a step asks)."""
        self.config, self.controls, self.sink = config, controls, sink
        self.device = resolve_device(config.device)
        use_threads(config.threads)
        self.t0 = time.perf_counter()
        self.preset: Preset = preset if preset is not None else build_preset(config, self.device)
        refusal = self.amp_refusal(config.techniques.amp)
        if refusal is not None:
            from memlens.core.options import ConfigError

            raise ConfigError(f"amp=bf16: {refusal}")
        self._amp_noted = False  # the note that this CPU emulates bf16, once a run
        self.rec = rec = Recorder(self.device, self.t0, precise=config.precise)
        self.probe = rec.make_probe(self.preset)
        self.saved, self.precise = rec.saved, rec.precise
        # The lab's loop has no code of the user's between phases (only memlens's own
        # bookkeeping): a step's time is its phases'. The GUI's history takes every step as
        # it ends.
        self.steps = StepRecorder(rec, sink, self.preset.carried_tensors, other_is_step=False,
                                  heap_every_s=heap_every_s, flush_s=0.0)
        self.steps.use_probe(self.probe)
        # The probe's native grad scan also sums each gradient's squares as autograd writes
        # it (core/native/grad_watch.h): put on at each step (a no-op while on), off at close.
        grads = self.probe.grad_watch
        self._grad_watch = grads
        self._watch_install, self._watch_sumsq = (grads.fast_functions() if grads is not None
                                                  else (None, None))
        self.phase = ""
        # The last training forward's result (losses, outputs), held as a user's loop holds
        # `loss = ...` and `logits = ...`: until the next forward rebinds them.
        self.held = None
        self.scaler = None
        self.micro = 0  # micro-batches since the last optimizer step
        self.leaks = LeakWatch(config.eval_every or 1)
        self.cuda_recorder = None
        if self.device.type == "cuda" and config.cuda_snapshot_steps:
            from memlens.core.exports.cuda_recorder import CudaSnapshotRecorder

            self.cuda_recorder = CudaSnapshotRecorder(
                config.cuda_snapshot_start, config.cuda_snapshot_steps, device=self.device)
        self._stop_hooks: list = []
        self.install_stop_hooks()
        # One saved-tensor hooks context for every step (it keeps no state between uses).
        self._saved_hooks = self.saved.hooks()
        if self.precise is not None:
            for t in self.preset.carried_tensors():
                self.precise.track(t, "other", at_start=True)
            for b in self.preset.buffers():
                self.precise.track(b, "buffers", at_start=True)

    # --- AMP on this machine -----------------------------------------------------------------
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
        return RunEvent(self.steps.step, self.now(), "setup", key="bf16 emulated",
                        message="bf16 is emulated on this CPU: its steps are slower than fp32",
                        explanation=note[0].upper() + note[1:] + ".")

    # --- metadata ------------------------------------------------------------------------------
    def meta(self) -> dict:
        p = self.preset
        env = self.rec.environment(
            parameters=sum(t.numel() for t in p.parameters()),
            sizes={"batch_size": p.batch_size, "width": p.width, "seq_len": p.seq_len,
                   "data_bytes": _data_bytes(p.data_tensors())})
        return {**run_header("lab", config=self.config.to_dict()), "environment": env}

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # --- samples and stops -------------------------------------------------------------------
    def start_sample(self) -> None:
        """The run's `start` sample, before its first step."""
        self.steps.first_sample()

    def take_step_samples(self) -> list:
        """A step an error or a stop cut short: what it measured so far reaches the sink
        as samples (nothing measured before either is lost)."""
        return self.steps.abandon_step()

    def measured_peak(self) -> int:
        """The largest memory any sample so far saw, with the in-step peaks where they are
        known (CUDA, precise mode): a failed or stopped step's count too, so a summary's
        peak is never below a total it printed."""
        return self.rec.measured_peak(self.steps.run_peak)

    def flush(self) -> None:
        """Everything measured so far to the sink (precise mode's allocation rows too)."""
        self.steps.flush()

    def _enter(self, phase: str) -> None:
        """A phase edge: names the phase (for an error's event) and aborts here if a stop
        was asked. The driver enters the StepRecorder's phase itself, where its timing
        starts."""
        self.phase = phase
        if self.controls.stopping:
            raise StopRequested

    def install_stop_hooks(self) -> None:
        """A stop asked for mid-step aborts at the next model call or phase. Hooks go on the
        top-level models only: a module with any hook leaves PyTorch's fast call path, and
        hooking every child cost more than the rest of the stop machinery together. Where
        steps are short (the StepRecorder's short_steps), the phase edges alone answer a
        stop within a few milliseconds and the hooks come off."""
        if not self.steps.short_steps and not self._stop_hooks:
            check = self.controls.check_stop
            self._stop_hooks = [model.register_forward_pre_hook(lambda *_: check())
                                for model in self.preset.models.values()]

    def _tune_stop_hooks(self) -> None:
        if self.steps.short_steps:
            self._remove_stop_hooks()
        else:
            self.install_stop_hooks()

    def close(self) -> None:
        """Remove the session's hooks from the models and stop precise mode's listening, on
        the training thread (install_stop_hooks() and the next step put them back)."""
        self._remove_stop_hooks()
        if self._grad_watch is not None:
            self._grad_watch.uninstall()
        self.rec.close()

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

    # --- one step --------------------------------------------------------------------------------
    def step(self, step: int, toggles: TechniqueToggles, capture: bool) -> StepRecord:
        """One step (one micro-batch): its phases, timed and sampled by the StepRecorder,
        which hands the step's row to the sink as it ends."""
        p = self.preset
        p.step_index = step
        sr = self.steps
        sr.begin_step(step)
        if self._watch_install is not None:
            self._watch_install()
        if toggles.amp == "fp16" and self.scaler is None:
            self.scaler = torch.amp.GradScaler(self.device.type)
        elif toggles.amp != "fp16":
            self.scaler = None
        amp_dtype = _AMP_DTYPES.get(toggles.amp)
        sr.use_python_samples(amp_dtype is not None)
        precise = self.precise
        with self._saved_hooks, (precise if precise is not None else _NO_CONTEXT):
            self._zero_grad(toggles)
            result, loss_value, nodes, saved_bytes = self._forward(toggles, amp_dtype, capture)
            self._backward(toggles, result)
            del result
            grad_norm = self._grad_norm()
            stepped = self._optimizer(toggles)
            eval_loss = math.nan
            every = self.config.eval_every
            if every and (step + 1) % every == 0:
                eval_loss = self._eval(step, toggles, amp_dtype, capture)
                sr.sample("eval")  # the eval phase's end: its loss is gone
        record = sr.end_step(loss=loss_value, grad_norm=grad_norm, nodes=nodes,
                             saved_bytes=saved_bytes, eval_loss=eval_loss, stepped=stepped)
        self._tune_stop_hooks()
        self._check_leaks(step, toggles)
        return record

    def _zero_grad(self, toggles: TechniqueToggles) -> None:
        """At the start of each accumulation cycle, unless switched off."""
        self._enter("zero_grad")
        self.steps.enter("zero_grad")
        if self.micro == 0 and toggles.zero_grad != "off":
            for opt in self.preset.optimizers:
                opt.zero_grad(set_to_none=toggles.zero_grad == "set_to_none")
        self.steps.leave()

    def _forward(self, toggles: TechniqueToggles, amp_dtype, capture: bool):
        """(the forward's result, its loss, graph nodes, bytes saved for backward)."""
        p, sr = self.preset, self.steps
        self._enter("forward")
        graph = self.rec.begin_capture(p.models) if capture else None
        try:
            sr.enter("forward")
            with self._autocast(amp_dtype):
                result = p.forward_train(toggles)
            sr.leave(sample=False)  # the sample after the loss is read, as a loop reads it
            # The new forward rebinds `loss` and `logits`: the last step's go only now.
            self.held = result
        except BaseException:
            if graph is not None:
                graph.abort()
            raise
        loss_value = result.value()
        if graph is not None:
            self.sink.on_graph(graph.finish(result.graph_roots(), sr.step))
        if toggles.leak_cache:
            p.cache.extend(result.intermediates)
        roots = [loss for loss, _ in result.backward]
        nodes = self.rec.count_nodes(roots, GRAPH_NODE_LIMIT)
        self.probe.amp_casts = (amp_cast_storages(roots, self.probe.param_list)
                                if amp_dtype is not None else {})
        p.account_loss(result.summed() if toggles.leak_loss_sum else None, toggles, train=True,
                       value=loss_value)
        sr.sample("forward")  # forward replaces lstm's state, a leak adds
        saved_bytes = self.saved.step_saved_bytes  # all packed by now
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"loss = {loss_value}")
        return result, loss_value, nodes, saved_bytes

    def _backward(self, toggles: TechniqueToggles, result) -> None:
        self._enter("backward")
        self.steps.enter("backward")
        k = toggles.accumulate
        for loss, inputs in result.backward:
            scaled = loss / k if k > 1 else loss
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            scaled.backward(retain_graph=toggles.retain_graph, inputs=inputs)
        # A plain loop keeps `loss` and its outputs bound until the next forward
        # (self.held): with retain_graph its saved tensors stay alive that long.
        self.steps.leave()

    def _optimizer(self, toggles: TechniqueToggles) -> bool:
        """The optimizer step once every `accumulate` micro-batches; whether it stepped."""
        self._enter("optimizer")
        self.steps.enter("optimizer")
        self.micro += 1
        stepped = self.micro >= toggles.accumulate
        if stepped:
            for opt in self.preset.optimizers:
                if self.scaler is not None:
                    self.scaler.step(opt)
                else:
                    opt.step()
            if self.scaler is not None:
                self.scaler.update()
            self.micro = 0
        self.steps.leave()
        return stepped

    def _check_leaks(self, step: int, toggles: TechniqueToggles) -> None:
        total, activations, other = self.steps.last_figures
        leak = self.leaks.update(total, activations, other, toggles)
        if leak:
            self.sink.on_event(RunEvent(step, self.now(), "leak", key=MEMORY_GROWTH,
                                        message="memory keeps growing", explanation=leak))
        self._check_held_graph(step)

    def _check_held_graph(self, step: int) -> None:
        """`total_loss += loss` in training: no tensor bytes grow (backward freed the saved
        tensors), so the memory check above never fires, but the sum keeps every step's
        autograd nodes alive. Counted from the sum's grad_fn while it is a graph."""
        held = self.preset.total_loss
        if self.leaks.nodes_reported or not isinstance(held, torch.Tensor) or \
                held.grad_fn is None:
            return
        per_step = self.leaks.update_nodes(self.rec.count_nodes([held], GRAPH_NODE_LIMIT))
        if per_step:
            self.sink.on_event(RunEvent(
                step, self.now(), "leak", key=GRAPH_KEPT,
                message=f"total_loss keeps every step's graph: +{per_step} autograd nodes a step",
                explanation=(
                    "`total_loss += loss` adds the loss tensor, graph and all, to a running "
                    "sum. Backward has freed the graph's saved tensors, so no tensor category "
                    "grows, but the sum keeps each step's autograd nodes alive: process heap "
                    "(memory.csv's heap column) grows a few KB a step, for as long as the "
                    "sum lives. Use `total_loss += loss.item()`.")))

    def _eval(self, step: int, toggles: TechniqueToggles, amp_dtype, capture: bool) -> float:
        """The eval phase; its loss. Its time is its forward's."""
        p, sr = self.preset, self.steps
        self._enter("eval")
        self.rec.prune_amp_casts()
        if toggles.eval_mode:
            p.set_train(False)
        grad_ctx = torch.no_grad() if toggles.no_grad_eval else contextlib.nullcontext()
        # A capture shows the eval graph too: empty under no_grad, a full graph without it.
        graph = self.rec.begin_capture(p.models) if capture else None
        try:
            sr.enter("eval")
            with grad_ctx, self._autocast(amp_dtype):
                loss = p.forward_eval(toggles)
                value = loss.item()
                p.account_loss(loss, toggles, train=False, value=value)
            sr.leave(sample=False)
            # Memory as a validation loop holds it: the loss bound, its graph alive under grad.
            if amp_dtype is not None and not toggles.no_grad_eval:
                self.rec.note_amp_casts(amp_cast_storages([loss], self.probe.param_list))
            sr.sample("eval_forward")
            if graph is not None:
                self.sink.on_graph(graph.finish(loss, step, kind="eval"))
                graph = None
        finally:
            if graph is not None:
                graph.abort()
            p.set_train(True)
        return value

    def _autocast(self, dtype):
        """Autocast to `dtype` on this device, or, for dtype None, a context that does
        nothing."""
        if dtype is None:
            return _NO_CONTEXT
        return torch.autocast(self.device.type, dtype=dtype)

    def _grad_norm(self) -> float:
        total = self._watch_sumsq() if self._watch_sumsq is not None else -1.0
        scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        # the true gradient's norm, not the scaled one
        return self.rec.grad_norm(total, self.probe.grads, scale)



def _data_bytes(tensors) -> int:
    """The data set's bytes as memory is counted everywhere: each storage once."""
    held = StorageBytes()
    for t in tensors:
        held.add(t)
    return held.total

"""`watch()`: record a user's own training loop into a run folder, live, from its calls.

Phases come from the program: `zero_grad` (Optimizer/Module.zero_grad), `forward` (a root
module's call), `backward` (from the call of Tensor.backward / torch.autograd.backward),
`optimizer` (step hooks), user-labelled phases (`Watch.phase`), and the rest as `other`.
A step ends at an optimizer step once every live optimizer has stepped (so a GAN's D and G
make one step), at the first forward or zero_grad after a backward when no optimizer
exists, or at `Watch.step()` once the user calls it.

Nothing here holds a user's tensor or graph: forward calls and backward roots are followed
through markers kept in the autograd nodes' own metadata (they die with the node) and weak
counts (the saved-tensor tracker's bytes before and after a call).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import math
import os
import platform
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from memlens.core.recorder.precise import StorageTracker
from memlens.core.recorder.probe import MemoryProbe
from memlens.core.recorder.recorder import GRAPH_NODE_LIMIT, PHASE_CATEGORY, count_graph_nodes
from memlens.core.records import PHASE_CODE, PHASES, MemorySample, RunSummary, StepRecord
from memlens.core.watch import diagnoses as dx
from memlens.core.watch.hooks import TorchHooks

# A step's rows are handed to the writer thread (core.watch.writes) at most this long after
# the step ends, a batch at a time (a follower draws at 30 Hz anyway).
FLUSH_S = 0.1
GROWING_STEPS = 3  # optimizer steps without clearing, each with a larger grad norm: diagnosis 3
# The process heap (mallinfo2, memory.csv's heap_bytes) after a step's first forward, at
# most this often: mallinfo2 walks malloc's free lists, 20-100 us in a training process.
HEAP_EVERY_S = 0.2
_FORWARD = PHASE_CODE["forward"]
_SAMPLED = {p: PHASE_CODE[p] for p in PHASES}  # phases whose end is a memory sample
_EVAL_LAYERS = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)
_ACTIVE: list[Watch] = []  # at most one watch at a time: the hooks are process-wide


class _Found:
    """The models and optimizers found so far, shaped as MemoryProbe reads a preset."""

    def __init__(self) -> None:
        self.models: list[weakref.ref] = []
        self.optimizers_refs: list[weakref.ref] = []
        # The tensors the models were called with this step and the last (data batches,
        # carried state): `other`, as a preset's carried tensors are. Weak: memlens never
        # keeps one alive.
        # Storage pointer -> a weak reference to one tensor in it: a sample counts storages,
        # so one tensor of each is enough (a GAN's fake and fake.detach() share one).
        self.inputs: dict[int, weakref.ref] = {}
        self._earlier: dict[int, weakref.ref] = {}
        self._inputs_step = -1
        self.carried_refs: list[weakref.ref] = []  # both steps' (the native sample takes them)

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for r in self.optimizers_refs if (o := r()) is not None]

    def model_list(self) -> list[nn.Module]:
        return [m for r in self.models if (m := r()) is not None]

    def parameters(self) -> list[Tensor]:
        seen: set[int] = set()
        out = []
        groups = [list(m.parameters()) for m in self.model_list()]
        groups += [[p for g in o.param_groups for p in g["params"]] for o in self.optimizers]
        for params in groups:
            for p in params:
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
        return out

    def buffers(self) -> list[Tensor]:
        """The models' buffers (BatchNorm running stats, a mask), each once."""
        seen: set[int] = set()
        return [b for m in self.model_list() for b in m.buffers()
                if id(b) not in seen and not seen.add(id(b))]

    def carried_tensors(self) -> list[Tensor]:
        return [t for r in self.carried_refs if (t := r()) is not None]

    def note_inputs(self, step: int, args: tuple) -> None:
        if step != self._inputs_step:
            self._earlier = self.inputs if step == self._inputs_step + 1 else {}
            self.inputs = {}
            self._inputs_step = step
            self.carried_refs = list(self._earlier.values())
        for a in args[:8]:
            if isinstance(a, Tensor):
                self._note(a)
            elif isinstance(a, (tuple, list)):  # an LSTM's (h, c)
                for t in a[:4]:
                    if isinstance(t, Tensor):
                        self._note(t)

    def _note(self, t: Tensor) -> None:
        # By object: a sample counts each storage once (LightProbe, MemoryProbe), so a GAN's
        # fake and fake.detach() may both be here. A dead reference's id may be a new tensor.
        old = self.inputs.get(id(t))
        if old is None or old() is not t:
            ref = self.inputs[id(t)] = weakref.ref(t)
            self.carried_refs.append(ref)


class _Model:
    """What a root call needs to know of a module, looked up once (by id, checked by weak
    reference: a freed module's id may be a new one's)."""

    __slots__ = ("eval_layers", "is_model", "name", "param_ids", "ref")

    def __init__(self, module: nn.Module, is_model: bool) -> None:
        self.ref = weakref.ref(module)
        self.is_model = is_model
        self.name = ""
        self.param_ids: frozenset = frozenset(map(id, module.parameters())) if is_model else (
            frozenset())
        self.eval_layers = is_model and _has_eval_layers(module)


class _Mark:
    """Kept in an autograd node's metadata: alive exactly as long as the node is."""

    __slots__ = ("__weakref__", "kind", "step", "where")

    def __init__(self, step: int, kind: str, where: str) -> None:
        self.step, self.kind, self.where = step, kind, where


class _Call:
    """One root forward call: who, where, how long, and whether backward reached it.

    Followed by the native CallTracker where built (`handle`), else by a Python pre-hook on
    each output's node (__call__) and a marker in its metadata (`mark`)."""

    __slots__ = ("bytes", "fired", "grad", "handle", "mark", "model", "ms", "site", "step",
                 "train_layers", "watch")

    def __init__(self, watch: Watch, step: int, model: str, site: str, grad: bool,
                 train_layers: bool) -> None:
        self.watch, self.step, self.model, self.site = watch, step, model, site
        self.grad, self.train_layers = grad, train_layers
        self.fired = 0
        self.handle = -1
        self.ms = 0.0
        self.bytes = 0
        self.mark: weakref.ref | None = None

    def __call__(self, _grad_outputs) -> None:  # the Python pre-hook on an output's node
        self.fired += 1

    def reached(self) -> int:
        """How many backward passes reached this call's graph."""
        return self.watch._fired(self.handle) if self.handle >= 0 else self.fired

    def alive(self) -> bool:
        """Whether the call's graph is still alive."""
        if self.handle >= 0:
            return self.watch._alive(self.handle)
        return self.mark is not None and self.mark() is not None

    def release(self) -> None:
        if self.handle >= 0:
            self.watch._release(self.handle)
            self.handle = -1


class Watch:
    """A recording of the program's training, into `out` (see module doc)."""

    def __init__(self, models=None, optimizers=None, *, out=None, precise: bool = False,
                 capture_every: int = 0, script: str | None = None,
                 argv: list[str] | None = None) -> None:
        from memlens.core.runfolder.writer import RunWriter

        if _ACTIVE:
            raise RuntimeError("memlens.watch: a watch is already recording in this process; "
                               "close it first (one watch at a time)")
        if capture_every < 0:
            raise ValueError(f"capture_every must be >= 0, got {capture_every}")
        self.rank, self.world_size = _launcher_rank()
        self.folder = Path(out) if out else _default_folder(script)
        if self.world_size > 1:  # torchrun: one folder per rank under the run's folder
            self.folder = self.folder / f"rank{self.rank}"
        self.writer = RunWriter(self.folder, precise=precise)  # writes on its own thread
        self.precise_requested = precise
        # Precise mode: every storage, through the Python dispatch mode, for the whole run.
        self.precise = StorageTracker(time.perf_counter()) if precise else None
        self.capture_every = capture_every
        self.script, self.argv = script, list(argv if argv is not None else sys.argv)
        self.found = _Found()
        self._explicit_models = models is not None
        self._model_names: dict[int, str] = {}
        self._candidates: list[weakref.ref] = []  # every optimizer known to exist
        self._models_seen: dict[str, dict] = {}  # kept after the models are gone
        self._optimizers_seen: dict[int, str] = {}
        self._active_ids: dict[int, weakref.ref] = {}  # optimizers measured, by id
        self._required: set[int] = set()  # _required_optimizers' answer for _required_key
        self._required_key: tuple | None = None
        self._probe_stale = True  # a model or an optimizer was found since the probe was made
        # The training thread (the one that starts the watch): other threads' module calls
        # pass through (a background evaluation is not this loop's phases).
        self._thread = threading.get_ident()
        for m in _as_list(models):
            self._add_model(m)
        for o in _as_list(optimizers):
            self._add_optimizer(o, active=True)
        self._find_live_optimizers()
        self.saved, self._count_nodes, self._native = _saved_tracker()
        # (bytes saved this step, bytes kept from earlier steps) in one C call where native
        self._saved_counts = getattr(self.saved, "_counts", None)
        self.probe: MemoryProbe | None = None
        self._probe_key: tuple = ()
        self.device = torch.device("cpu")
        self.step_index = 0
        self.closed = False
        self.exit_code: int | None = None
        self.events: list = []
        self._manual_steps = False
        self.broken = False  # an error of memlens's own: recording stops, the script goes on
        self._capture = None  # a GraphCapture between a step's first forward and backward
        self._captured: set[int] = set()
        self._idle = True
        self._t0 = time.perf_counter()
        self._clock = time.perf_counter
        self._stack: list[str] = ["other"]
        self._since = self._t0
        self._step_t0 = self._t0
        self._phase_ms = dict.fromkeys(PHASES, 0.0)
        self._custom_ms: dict[str, float] = {}
        self.in_forward = False  # a root module call is running (TorchHooks reads it)
        self._root: tuple[nn.Module, _Call, tuple, float] | None = None
        self._calls: list[_Call] = []
        self._pending_calls: list[_Call] = []
        self._backward_depth = 0
        self._backward_marks: list[weakref.ref] = []
        self._reached: list[_Call] = []  # backwarded calls whose graph may still be alive
        self._backward_uncounted = False  # a backward ran under compiled autograd
        calls = native.CallTracker() if (native := self._native) is not None else None
        self._track, self._fired, self._alive, self._release = (
            calls.fast_functions() if calls is not None else (None, None, None, None))
        self._stepped: set[int] = set()
        self._ever_stepped: set[int] = set()
        self._called_params: set[int] = set()  # ids of the parameters of models called
        self._called_models: set[int] = set()  # ids of the models called under grad
        self._modules: dict[int, _Model] = {}  # every module called at the root, by id
        self._after_backward = False
        self._cleared = True
        self._grad_norms: list[float] = []
        self._norm_sq = math.nan
        self._loss = math.nan
        self._graph_nodes = 0
        self._step_peak = 0
        self._last_total = 0
        self._reported: set[tuple[str, str]] = set()
        self._summary_peak = 0
        self._losses: list[float] = []
        self._samples: list[MemorySample] = []  # this step's, written with its row
        self._rows: list[tuple[StepRecord, list[MemorySample]]] = []  # not written yet
        self._flushed_at = time.perf_counter()
        self._heap_read = False  # this step's heap figure is taken (after its first forward)
        self._heap_at = -math.inf
        self._step_activity = False  # a phase entered since the last step ended
        # CPU light mode: a phase edge's sample is one C call that keeps its figures until
        # the step's end (LightProbe.edge, see _use_edges); None where samples are Python's.
        self._edge = None
        self._amp_seen = False
        self._norms: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._step_ms: list[float] = []
        self._saved_ctx = self.saved.hooks()
        self._post("on_start", self._meta())
        self._saved_ctx.__enter__()
        if self.precise is not None:
            self.precise.__enter__()
        self.hooks = TorchHooks(self)
        self.hooks.install()
        _ACTIVE.append(self)
        atexit.register(self._at_exit)  # a watch never closed still ends its files

    def _at_exit(self) -> None:
        self.close()

    # --- the public interface ----------------------------------------------------------------
    def __enter__(self) -> Watch:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(error=exc)

    @contextlib.contextmanager
    def phase(self, name: str):
        """Label the code inside as phase `name` (a hand-written update: "optimizer")."""
        self._enter(name)
        try:
            yield
        finally:
            self._leave()

    def step(self) -> None:
        """Mark a step boundary here; from now on only these calls end steps. (A step with
        nothing in it is not one: the first call right after an automatic step end, say.)"""
        self._manual_steps = True
        if self._step_activity:
            self._end_step()

    def close(self, error: BaseException | None = None, exit_code: int | None = None) -> None:
        """Stop recording: remove every hook, write the last step and the summary."""
        if self.closed:
            return
        self.closed = True
        self.hooks.remove()
        for _n, _sum, grads in list(self._norms.values()):
            grads.uninstall()  # only the hooks still memlens's own
        with contextlib.suppress(Exception):
            self._saved_ctx.__exit__(None, None, None)
        if self.precise is not None:
            with contextlib.suppress(Exception):
                self.precise.__exit__(None, None, None)
        if _ACTIVE and _ACTIVE[-1] is self:
            _ACTIVE.pop()
        self._guard(self._last_step)
        if self.nothing_found:
            self._event("info", "nothing found",
                        "memlens found no model (nn.Module call) and no optimizer in this run",
                        NOTHING_FOUND_HELP)
        if exit_code is not None:
            self.exit_code = exit_code
        stopped_by = "error" if error is not None or (exit_code or 0) != 0 else "completed"
        summary = RunSummary(
            steps_done=self.step_index, stopped_by=stopped_by,
            wall_s=self._clock() - self._t0,
            final_loss=self._losses[-1] if self._losses else math.nan,
            peak_bytes=self._summary_peak,
            mean_step_ms=sum(self._step_ms) / len(self._step_ms) if self._step_ms else math.nan,
            extra={"exit_code": self.exit_code,
                   "error": f"{type(error).__name__}: {error}" if error is not None else None,
                   "custom_phases_ms": {k: round(v, 3) for k, v in self._custom_ms.items()},
                   "models": list(self._models_seen.values()),
                   "optimizers": list(self._optimizers_seen.values())},
        )
        if self.precise is not None and self.precise.pending:
            self._post("on_allocations", self.precise.drain())
        self._flush_edges()
        self._write_rows(self._clock())
        self._write_samples()  # those after the last step's end (a final sample)
        self._post("on_start", {"finished": True})  # meta: a follower sees the end
        self._post("on_finish", summary.to_dict())
        try:
            self.writer.close()
        except Exception as exc:  # a write that failed at the end: said, never raised
            self._fail(exc)
        atexit.unregister(self._at_exit)

    def _last_step(self) -> None:
        if self._stepped or self._after_backward:  # a last step cut short; forwards alone
            self._end_step(closing=True)  # after the last update (a final sample) make none
        self._pending_calls += self._calls
        self._calls = []
        self._settle(final=True)

    @property
    def write_error(self) -> BaseException | None:
        """The error that stopped the run folder's writes (a full disk), if one did."""
        return self.writer.failed

    @property
    def nothing_found(self) -> bool:
        return not self._models_seen and not self._optimizers_seen

    # --- discovery ----------------------------------------------------------------------------
    def _add_model(self, m: nn.Module) -> str:
        name = self._model_names.get(id(m))
        if name is None:
            base = dx.variable_name(m) or type(m).__name__
            taken = set(self._model_names.values())
            name, k = base, 2
            while name in taken:
                name, k = f"{base}{k}", k + 1
            self._model_names[id(m)] = name
            self.found.models.append(weakref.ref(m))
            self._probe_stale = True
            self._models_seen[name] = {"name": name, "class": type(m).__name__,
                                       "parameters": sum(p.numel() for p in m.parameters())}
        return name

    def _add_optimizer(self, o: torch.optim.Optimizer, active: bool) -> None:
        """A candidate may end steps (see _required_optimizers); an active optimizer (passed
        in, or one that stepped) is also measured."""
        known = self._active_ids.get(id(o))
        if known is not None and known() is o:
            return  # the usual case, every step: measured already (so a candidate too)
        if all(r() is not o for r in self._candidates):
            self._candidates.append(weakref.ref(o))
            self._required_key = None
        if active:
            self._active_ids[id(o)] = ref = weakref.ref(o)
            self.found.optimizers_refs.append(ref)
            self._probe_stale = True
            self._optimizers_seen[id(o)] = type(o).__name__

    def _find_live_optimizers(self) -> None:
        """Optimizers made before the watch began: all of them must step to end a step."""
        import gc

        base = torch.optim.Optimizer
        for obj in gc.get_objects():
            if issubclass(type(obj), base):  # type(): never a lazy object's __class__
                self._add_optimizer(obj, active=False)

    def _module(self, module: nn.Module) -> _Model:
        info = self._modules.get(id(module))
        if info is None or info.ref() is not module:
            is_model = next(module.parameters(), None) is not None and (
                not self._explicit_models or id(module) in self._model_names)
            info = self._modules[id(module)] = _Model(module, is_model)
            if is_model:
                info.name = self._add_model(module)
        return info

    def _ensure_probe(self) -> None:
        self._probe_stale = False
        key = (len(self.found.models), len(self.found.optimizers_refs))  # grow only
        if key == self._probe_key and self.probe is not None:
            return
        self._probe_key = key
        params = self.found.parameters()
        if params:
            self.device = params[0].device
        self._flush_edges()  # the old probe's figures first: samples stay in order
        self.probe = MemoryProbe(self.found, self.device, self.saved, self.precise)
        if self.precise is not None:
            for p in params:
                self.precise.track(p, "params", at_start=True)
        self._use_edges()
        # A new probe knows no gradients or optimizer state yet: "start" scans them all.
        self.probe.sample(self.step_index, "start", 0.0, [])
        self._post("on_start", self._meta())

    def _use_edges(self) -> None:
        """On CPU without precise mode, a phase edge's sample is LightProbe.edge: the figures
        MemoryProbe.sample would give (the same rules, the tests hold the two together), kept
        in C until the step's end. Python's sample made a MemorySample and rescanned every
        gradient's storage in Python at each edge: most of a watch's cost on a small model."""
        self._edge = None
        native = self._native
        if (native is None or self.device.type != "cpu" or self.precise is not None
                or self._amp_seen or not hasattr(self.saved, "native")):
            return
        grads = native.GradWatch(self.probe.param_list)  # no hooks: it only scans
        self.probe.use_grad_watch(grads)
        self.probe.use_light_probe(native.LightProbe(grads, self.saved.native), self._t0)
        self._edge = self.probe.edge

    def _flush_edges(self) -> None:
        """The native edges' figures since the last flush, as this step's samples (made
        MemorySamples on the writer thread: writes.samples_of)."""
        if self._edge is None:
            return
        rows = self.probe.take_rows()
        if not rows:
            return
        params, buffers = self.probe.params.total, self.probe.buffers.total
        base, peak, total = params + buffers, self._step_peak, 0
        for _, _, grads, opt, act, other, _ in rows:
            total = base + grads + opt + act + other
            if total > peak:
                peak = total
        self._last_total, self._step_peak = total, peak
        self._samples.append((self.step_index, params, buffers, rows))

    def _account(self, samples: list[MemorySample]) -> None:
        for s in samples:
            total = s.allocated if s.allocated is not None else s.total
            self._last_total = total
            self._step_peak = max(self._step_peak, total)
        self._samples += samples

    # --- phases ------------------------------------------------------------------------------
    def _charge(self, now: float) -> None:
        name = self._stack[-1]
        ms = self._phase_ms
        if name in ms:
            ms[name] += (now - self._since) * 1e3
        elif name != "other":
            self._custom_ms[name] = self._custom_ms.get(name, 0.0) + (now - self._since) * 1e3

    def _enter(self, name: str) -> None:
        self._step_activity = True
        now = self._clock()
        if self._idle:  # the first step starts at the program's first phase, not at import
            self._idle = False
            self._step_t0 = self._since = now
        self._charge(now)
        self._stack.append(name)
        self._since = now
        if self.precise is not None and name in PHASE_CATEGORY:
            self.precise.begin_phase(self.step_index, name, PHASE_CATEGORY[name])

    def _leave(self) -> str:
        self._charge(self._clock())
        stack = self._stack
        name = stack.pop() if len(stack) > 1 else "other"
        code = _SAMPLED.get(name)
        if code is not None and self.probe is not None:
            # The heap once a step, after its first forward (mallinfo2 walks malloc's lists).
            heap = code == _FORWARD and not self._heap_read
            if heap:
                self._heap_read = True
                now = self._clock()  # and at most HEAP_EVERY_S apart (see there)
                heap = now - self._heap_at >= HEAP_EVERY_S
                if heap:
                    self._heap_at = now
            if self._edge is not None:
                self._edge(code, self.found.carried_refs, heap)
            else:
                self._account([self.probe.sample(
                    self.step_index, name, self._clock() - self._t0, heap=heap)])
        self._since = self._clock()  # a sample's own cost is no phase's time
        return name

    def _note_amp_casts(self, nodes: list) -> None:
        """Autocast's weight copies this forward saved: amp_casts, not activations (as for
        presets, recorder.amp_casts); the probe counts those still saved at each sample."""
        from memlens.core.recorder.amp_casts import amp_cast_storages_of_nodes

        if self._edge is not None:  # the native edges do not take AMP copies apart: Python's
            self._flush_edges()     # samples from here on
            self._amp_seen = True
            self._edge = None
        self.probe.amp_casts.update(amp_cast_storages_of_nodes(nodes, self.probe.param_list))

    def _write_rows(self, now: float) -> None:
        """The steps ended since the last write: their samples, then their rows (a follower
        that reads a step's row finds its samples), one flush for each file."""
        self._flushed_at = now
        if self.writer.failed is not None and not self.broken:
            self._fail(self.writer.failed)
        if self._rows:
            rows, self._rows = self._rows, []
            self._post("on_steps", rows)

    def _post(self, method: str, *args) -> None:
        """A record for the run folder's writer (its own thread); a write that failed there
        stops the recording, never the script."""
        try:
            getattr(self.writer, method)(*args)
        except Exception as exc:
            if not self.broken:
                self._fail(exc)

    def _write_samples(self) -> None:
        """Samples after the last step's row (a final sample), at the end."""
        if self._samples:
            self._post("on_samples", self._samples)
            self._samples = []

    # --- listener callbacks (TorchHooks) -------------------------------------------------------
    def root_call(self, original, module: nn.Module, args: tuple, kwargs: dict) -> Any:
        """A module called outside any other's forward (TorchHooks): a model's forward, or a
        loss module's call. Calls the original and returns (or raises) what it did. (The
        guards are written out: this runs at every root call, frames cost.)"""
        if _compiling() or threading.get_ident() != self._thread:
            # traced by torch.compile (add nothing to the user's graph), or another thread's
            # call (a background evaluation: not this training loop's phases)
            return original(module, *args, **kwargs)
        info = self._modules.get(id(module))
        self.in_forward = True
        try:
            started = False
            if info is None or info.is_model or info.ref() is not module:  # else a loss module
                try:
                    started = self._forward_pre(module, args)
                except Exception as exc:
                    self._fail(exc)
            if not started:
                return original(module, *args, **kwargs)
            output = None
            try:
                output = original(module, *args, **kwargs)
            finally:  # a forward that raises is recorded up to there (no graph: eval)
                try:
                    self._forward_post(module, output)
                except Exception as exc:
                    self._fail(exc)
            return output
        finally:
            self.in_forward = False

    def _forward_pre(self, module: nn.Module, args: tuple) -> bool:
        """A root call begins: True where it is a model's forward, recorded."""
        if self.broken:
            return False
        info = self._module(module)
        if not info.is_model:  # a loss module or another parameter-free callable
            return False
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        if grad and self._after_backward and not self._manual_steps and (
                not self._has_optimizers()):
            self._end_step()
        if self._probe_stale:
            self._ensure_probe()
        if grad and id(module) not in self._called_models:
            self._called_models.add(id(module))
            self._called_params |= info.param_ids
        call = _Call(self, self.step_index, info.name, dx.call_site(3), grad,
                     info.eval_layers and module.training)
        if grad and self.capture_every and self._capture is None and (
                self.step_index % self.capture_every == 0
                and self.step_index not in self._captured):
            self._begin_capture()
        self.found.note_inputs(self.step_index, args)
        self._enter("forward" if grad else "eval")
        self._root = (module, call, self.saved.step_saved_bytes, self._since)
        return True

    def _forward_post(self, module: nn.Module, output: Any) -> None:
        root, self._root = self._root, None
        if root is None or root[0] is not module:
            return
        _, call, saved_before, t_start = root
        call.ms = (self._clock() - t_start) * 1e3
        if call.grad and self._track is not None:
            call.handle = self._track(output)
            if call.handle < 0:
                call.grad = False  # nothing in it can be backwarded: an eval forward
            elif torch.is_autocast_enabled(self.device.type):
                self._note_amp_casts(_output_nodes(output))
        elif call.grad:
            nodes = _output_nodes(output)
            if nodes and torch.is_autocast_enabled(self.device.type):
                self._note_amp_casts(nodes)
            if nodes:
                m = _Mark(self.step_index, "forward", call.site)
                call.mark = weakref.ref(m)
                for node in nodes:
                    node.metadata["memlens"] = m
                    node.register_prehook(call)
            else:
                call.grad = False  # nothing in it can be backwarded: an eval forward
        self._calls.append(call)
        self._leave()
        if call.grad:  # after the forward's sample: the Python tracker counts at a measure
            call.bytes = max(0, self.saved.step_saved_bytes - saved_before)
        if not call.grad and call.train_layers:
            self._report_eval_in_train(call)

    def zero_grad(self, call, owner) -> Any:
        if self.broken:
            return call()
        started = self._guard(self._before_zero_grad, owner)
        try:
            return call()
        finally:
            if started:
                self._guard(self._leave)

    def _before_zero_grad(self, owner) -> None:
        if self._after_backward and not self._has_optimizers() and not self._manual_steps:
            self._end_step()
        if isinstance(owner, torch.optim.Optimizer):
            self._add_optimizer(owner, active=False)
        self._cleared = True
        self._enter("zero_grad")

    def backward(self, call, tensors) -> Any:
        if self.broken:
            return call()
        self._backward_depth += 1
        if self._backward_depth > 1:
            try:
                return call()
            finally:
                self._backward_depth -= 1
        started = self._guard(self._before_backward, tensors)
        try:
            return call()
        except RuntimeError as exc:
            self._guard(self._explain_backward_error, exc)
            raise
        finally:
            self._backward_depth -= 1
            if started:
                self._guard(self._after_backward_call)

    def _before_backward(self, tensors) -> None:
        ca = sys.modules.get("torch._dynamo.compiled_autograd")
        if ca is not None and getattr(ca, "compiled_autograd_enabled", False):
            # compiled autograd runs no C++ node hooks: which forwards it reached is unknown
            self._backward_uncounted = True
        roots = [t for t in (tensors if isinstance(tensors, (list, tuple)) else [tensors])
                 if isinstance(t, Tensor)]
        if self._capture is not None and roots:  # before the loss is marked (see there)
            self._finish_capture(roots[0])
        self._note_roots(roots)
        if not self._cleared:  # cleared without zero_grad (p.grad = None)?
            self._check_cleared()
        self._enter("backward")

    def _after_backward_call(self) -> None:
        self._leave()
        self._after_backward = True

    # --- a fault of memlens's own stops the recording, never the user's program -------------
    def _guard(self, fn, *args) -> bool:
        if self.broken:
            return False
        try:
            fn(*args)
        except Exception as exc:
            self._fail(exc)
            return False
        return True

    def _fail(self, exc: Exception) -> None:
        self.broken = True
        with contextlib.suppress(Exception):
            self._event("info", "memlens stopped recording",
                        f"memlens stopped recording after an error of its own: "
                        f"{type(exc).__name__}: {exc}. The script runs on unchanged.")

    # --- graph capture every N steps (core.graph), from the loss passed to backward ----------
    def _begin_capture(self) -> None:
        from memlens.core.graph.capture import GraphCapture

        models = {self._model_names[id(m)]: m for m in self.found.model_list()}
        self._capture = GraphCapture(models)
        self._capture.begin()

    def _finish_capture(self, loss: Tensor) -> None:
        capture, self._capture = self._capture, None
        self._captured.add(self.step_index)
        try:
            # No DOT: run.json keeps a capture's nodes and bytes only, and torchviz's walk
            # left the captured step's loss alive (a "graph kept" alarm on correct code).
            snapshot = capture.finish(loss, self.step_index, dot=False)
        except Exception as exc:  # a capture that fails costs the picture, never the run
            self._event("info", "graph capture", f"graph capture failed: {exc}", once=True)
            return
        from memlens.core.runfolder.format import graph_summary

        # The summary, not the snapshot: queued for the writer thread, the snapshot's graph
        # stayed alive until written, and looked like a graph kept across steps.
        self._post("on_graph_summary", graph_summary(snapshot))

    def optimizer_created(self, opt) -> None:
        self._guard(self._add_optimizer, opt, False)

    def optimizer_pre(self, opt, args, kwargs) -> None:
        self._guard(self._optimizer_pre, opt, args, kwargs)

    def optimizer_post(self, opt) -> None:
        self._guard(self._optimizer_post, opt)

    def _optimizer_pre(self, opt, args, kwargs) -> None:
        self._add_optimizer(opt, active=True)
        if self._probe_stale:
            self._ensure_probe()
        if not self._manual_steps and id(opt) in self._stepped:
            self._end_step()  # it steps again: the step before ended without the others
        self._grad_norm_of(opt)
        if args[1:] or kwargs.get("closure") is not None:  # args[0] is the optimizer
            self._event("info", "optimizer.step(closure)",
                        "optimizer.step(closure): the closure's forward and backward are "
                        "recorded inside the optimizer phase", once=True)
        self._enter("optimizer")

    def _optimizer_post(self, opt) -> None:
        self._leave()
        self._stepped.add(id(opt))
        self._cleared = False
        self._ever_stepped.add(id(opt))
        if not self._manual_steps and self._required_optimizers() <= self._stepped:
            self._end_step()

    def _has_optimizers(self) -> bool:
        """Whether an optimizer trains what this step ran (else a backward ends a step)."""
        return bool(self._required_optimizers())

    def _required_optimizers(self) -> set[int]:
        """The optimizers a step waits for: those that have stepped in this run, and those
        that own a parameter of a model this step called (a GAN's second optimizer before
        its first step); an optimizer left over from earlier work is neither."""
        key = (len(self._called_models), len(self._ever_stepped), len(self._candidates))
        if key != self._required_key:  # grows only within a step: unchanged, the same set
            called = self._called_params
            self._required = {
                id(o) for r in self._candidates if (o := r()) is not None
                if id(o) in self._ever_stepped
                or any(id(p) in called for g in o.param_groups for p in g["params"][:1])}
            self._required_key = key
        return self._required

    # --- steps -------------------------------------------------------------------------------
    def _end_step(self, closing: bool = False) -> None:
        now = self._clock()
        self._charge(now)
        self._since = now
        step = self.step_index
        step_ms = (now - self._step_t0) * 1e3
        self._step_t0 = now
        moved = sum(c.ms for c in self._calls if c.grad and not c.reached())
        ms = self._phase_ms
        forward_ms, eval_ms = max(0.0, ms["forward"] - moved), ms["eval"] + moved
        cuda = self.device.type == "cuda"
        reserved = torch.cuda.memory_reserved(self.device) if cuda else None
        self._flush_edges()
        peak = self._step_peak
        if self.precise is not None:
            peak = max(peak, self.precise.peak_bytes)
            self.precise.reset_peak()
            if self.precise.pending:
                self._post("on_allocations", self.precise.drain())
        if cuda:
            peak = max(peak, torch.cuda.max_memory_allocated(self.device))
            torch.cuda.reset_peak_memory_stats(self.device)
        if self._saved_counts is None:  # the Python tracker counts at a measure
            self.saved.measure()
            saved_bytes, retained = self.saved.step_saved_bytes, self.saved.retained_bytes
        else:
            saved_bytes, retained = self._saved_counts()
        record = StepRecord(
            step=step, time_s=now - self._t0, loss=self._loss,
            grad_norm=math.sqrt(self._norm_sq) if self._norm_sq == self._norm_sq else math.nan,
            step_ms=step_ms, zero_grad_ms=ms["zero_grad"], forward_ms=forward_ms,
            backward_ms=ms["backward"], optimizer_ms=ms["optimizer"], eval_ms=eval_ms,
            allocated_bytes=self._last_total, peak_bytes=peak, reserved_bytes=reserved,
            graph_nodes=self._graph_nodes, saved_bytes=saved_bytes, retained_bytes=retained,
            optimizer_stepped=bool(self._stepped), peak_is_exact=self.precise is not None,
        )
        self.saved.new_step()
        if self.probe is not None and self.probe.amp_casts:  # a freed copy's address may be
            live = self.saved.live  # reused by an activation: keep only those still saved
            self.probe.amp_casts = {k: n for k, n in self.probe.amp_casts.items() if k in live}
        self._rows.append((record, self._samples))
        self._samples = []
        if now - self._flushed_at >= FLUSH_S:
            self._write_rows(now)
        self._summary_peak = max(self._summary_peak, peak)
        if self._loss == self._loss:
            self._losses.append(self._loss)
        self._step_ms.append(step_ms)
        self._pending_calls += self._calls
        self._calls = []
        if self._capture is not None:  # no backward came: nothing to capture this step
            self._capture.abort()
            self._capture = None
        self._settle(final=False)
        if not closing:  # at the program's end its last loss may well be alive: no step ends
            self._check_graph_kept()
        self.step_index += 1
        self._phase_ms = dict.fromkeys(PHASES, 0.0)
        self._stepped = set()
        self._called_params = set()
        self._called_models = set()
        self._required_key = None
        self._after_backward = False
        self._norm_sq = math.nan
        self._loss = math.nan
        self._step_peak = self._last_total
        self._heap_read = False
        self._step_activity = False
        self._since = self._clock()

    # --- what is measured at a backward and an optimizer step -----------------------------------
    def _note_roots(self, roots: list[Tensor]) -> None:
        for t in roots:
            fn = t.grad_fn
            if fn is None:
                continue
            if t.numel() == 1:
                v = t.item()  # the loss, as the user's own loss.item() reads it
                self._loss = float(v.real if isinstance(v, complex) else v)
            if "memlens" not in fn.metadata:
                m = _Mark(self.step_index, "loss", dx.call_site(4))
                fn.metadata["memlens"] = m
                self._backward_marks.append(weakref.ref(m))
        self._graph_nodes = self._count_nodes(roots, GRAPH_NODE_LIMIT)

    def _grad_norm_of(self, opt) -> None:
        if not any(p.grad is not None for g in opt.param_groups for p in g["params"]):
            return
        sq = self._native_sum_of_squares(opt)
        if sq < 0:
            sq = self._sum_of_squares(opt)
        self._norm_sq = sq if self._norm_sq != self._norm_sq else self._norm_sq + sq
        self._check_grads_growing(opt, math.sqrt(sq))

    def _native_sum_of_squares(self, opt) -> float:
        """The optimizer's gradients' sum of squares read in C (CPU float gradients), or -1
        where one is of a kind it does not read (then torch computes it)."""
        if self._native is None:
            return -1.0
        n = sum(len(g["params"]) for g in opt.param_groups)
        entry = self._norms.get(opt)
        if entry is None or entry[0] != n:  # a param group added: read the new list
            if entry is not None:
                entry[2].uninstall()
            params = [p for g in opt.param_groups for p in g["params"]]
            watch = self._native.GradWatch(params)
            install, sum_of_squares = watch.fast_functions()
            # Each gradient's sum of squares taken as autograd writes it, while it is in
            # cache (a post-accumulate-grad hook, only where the parameter has none of its
            # own; one the script adds later replaces it, and the sum is then read here).
            install()
            entry = self._norms[opt] = (n, sum_of_squares, watch)
        return entry[1]()

    @staticmethod
    def _sum_of_squares(opt) -> float:
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        with torch.no_grad():
            try:  # one foreach kernel for all, as clip_grad_norm_ takes it
                norms = torch._foreach_norm([g.detach() for g in grads])
                sq = float(torch.linalg.vector_norm(
                    torch.stack([n.float().to(norms[0].device) for n in norms]))) ** 2
            except (RuntimeError, NotImplementedError):  # sparse gradients, say: one by one
                sq = float(sum(float(torch.linalg.vector_norm(g.detach().float())) ** 2
                               for g in grads))
        return sq

    def _check_cleared(self) -> None:
        for o in self.found.optimizers:
            for g in o.param_groups:
                if g["params"]:
                    if g["params"][0].grad is None:
                        self._cleared = True
                    break

    def _check_grads_growing(self, opt, norm: float) -> None:
        if self._cleared:
            self._grad_norms = [norm]
            return
        self._grad_norms.append(norm)
        norms = self._grad_norms[-(GROWING_STEPS + 1):]
        if len(norms) > GROWING_STEPS and all(b > a for a, b in itertools.pairwise(norms)):
            where = dx.call_site(4)
            self._report(dx.GRADS_NOT_CLEARED, where, (
                f"{len(self._grad_norms) - 1} optimizer steps of {type(opt).__name__} with no "
                f"zero_grad between them; the grad norm grew {norms[0]:.3g} -> {norms[-1]:.3g}"),
                "backward adds into .grad: without clearing, each step's gradient is the sum of "
                "all the steps before, and the updates grow.",
                "call optimizer.zero_grad() (set_to_none, the default) before each backward, "
                "or every k steps for gradient accumulation",
                None)

    # --- diagnoses ---------------------------------------------------------------------------
    def _settle(self, final: bool) -> None:
        """Forward calls whose fate is known: backwarded, or not (diagnosis 1 and 5)."""
        keep = []
        reached = []
        for c in self._reached:
            if c.alive():
                reached.append(c)
            else:
                c.release()
        for c in self._pending_calls:
            if not c.grad:
                continue
            if c.reached():  # kept while its graph lives: a second backward (diagnosis 4)
                if c.alive():
                    reached.append(c)
                else:
                    c.release()
                continue
            alive = c.alive()
            if self._backward_uncounted and c.handle >= 0:  # no diagnosis 1 without counts
                c.release()
                continue
            if alive and not final and c.step == self.step_index:
                keep.append(c)  # it may be backwarded by the next step still
                continue
            self._report(
                dx.GRAD_NOT_BACKWARDED, c.site,
                f"{c.model} forward under grad is never backwarded: its graph held "
                f"{dx.mib(c.bytes)} saved for backward" + (", still alive" if alive else ""),
                "A forward with grad enabled keeps every tensor its backward would need until "
                "the output is dropped. If it is only evaluated (validation, a sample), that "
                "memory and the time to save it are spent for nothing.",
                "wrap it in `torch.no_grad()` (and call model.eval() for validation)",
                c.bytes)
            if c.train_layers:
                self._report_eval_in_train(c)
            c.release()
        self._pending_calls = keep
        self._reached = reached

    def _report_eval_in_train(self, c: _Call) -> None:
        self._report(
            dx.EVAL_IN_TRAIN_MODE, c.site,
            f"{c.model} is evaluated (no backward) while model.training is True, and it has "
            "Dropout/BatchNorm layers",
            "In train mode Dropout drops units and BatchNorm uses the batch's statistics and "
            "updates its running ones: validation figures are noisy and the model changes.",
            "call model.eval() before validation (and model.train() after)", None)

    def _check_graph_kept(self) -> None:
        """Diagnosis 2: a loss's graph from an earlier step still alive at this step's end."""
        if (dx.GRAPH_KEPT, "") in self._reported:
            self._backward_marks = []
            return
        old = self._old_marks()
        if old:  # a graph in a reference cycle waits for the collector: not a holder
            import gc

            gc.collect()
            old = self._old_marks()
        if not old:
            return
        step = self.step_index
        marks = {id(m) for m in old}

        def is_old(node) -> bool:
            m = node.metadata.get("memlens")
            return m is not None and id(m) in marks

        found = dx.find_holder(is_old)
        holder, where = found if found else ("a reference memlens could not name", old[0].where)
        self._reported.add((dx.GRAPH_KEPT, ""))
        self._event_diag(
            dx.GRAPH_KEPT, where,
            f"the autograd graph of step {old[0].step}'s loss is still alive at step {step}'s "
            f"end ({self._earlier_losses_alive()} losses of earlier steps alive), held by "
            f"{holder}",
            "A tensor that requires grad keeps its whole graph (and, before backward, every "
            "saved tensor): summing losses or keeping outputs in a list makes memory grow "
            "each step.",
            "use `loss.item()` (or `.detach()`) for what you keep across steps",
            self.saved.retained_bytes or None)

    def _earlier_losses_alive(self) -> int:
        return sum(1 for r in self._backward_marks
                   if (m := r()) is not None and m.step < self.step_index)

    def _old_marks(self) -> list[_Mark]:
        """Marks of losses from two or more steps back whose graph is still alive. The last
        step's loss may well be: `loss = train_step(batch)` holds it until the next step
        returns, and this runs inside that step (harmless: backward freed what it saved).
        An accumulated graph (`total += loss`, a list of losses) keeps them all."""
        old, alive = [], []
        for r in self._backward_marks:
            m = r()
            if m is None:
                continue
            alive.append(r)
            if m.step < self.step_index - 1:
                old.append(m)
        self._backward_marks = alive
        return old

    def _explain_backward_error(self, exc: RuntimeError) -> None:
        text = str(exc)
        if "backward through the graph a second time" not in text:
            return
        calls = self._reached + self._pending_calls + self._calls
        origin = next((c for c in reversed(calls) if c.grad and c.reached() > 1), None)
        where = origin.site if origin else dx.call_site(4)
        self._report(
            dx.STATE_NOT_DETACHED, where,
            "backward reached a graph an earlier backward had freed"
            + (f": it comes from the {origin.model} forward at {origin.site} of step "
               f"{origin.step}, carried into this step" if origin else ""),
            "A tensor carried from one batch to the next (an RNN's hidden state) still points "
            "at the previous batch's graph, whose saved tensors the previous backward freed.",
            "detach what you carry: `hidden = hidden.detach()` at the start of each batch",
            None, phase="backward")

    def _report(self, key, where, message, explanation, fix, nbytes, phase="") -> None:
        if (key, where) in self._reported:
            return
        self._reported.add((key, where))
        self._event_diag(key, where, message, explanation, fix, nbytes, phase)

    def _event_diag(self, key, where, message, explanation, fix, nbytes, phase="") -> None:
        e = dx.diagnosis(self.step_index, self._clock() - self._t0, key, message, explanation,
                         nbytes=nbytes, where=where, fix=fix, phase=phase)
        self.events.append(e)
        self._post("on_event", e)

    def _event(self, kind: str, key: str, message: str, explanation: str = "",
               once: bool = False) -> None:
        from memlens.core.records import RunEvent

        if once:
            if (kind, key) in self._reported:
                return
            self._reported.add((kind, key))
        e = RunEvent(step=self.step_index, time_s=self._clock() - self._t0, kind=kind, key=key,
                     message=message, explanation=explanation)
        self.events.append(e)
        self._post("on_event", e)

    # --- run.json ------------------------------------------------------------------------------
    def _meta(self) -> dict:
        probe = self.probe
        env = {"torch": torch.__version__, "python": platform.python_version(),
               "platform": platform.platform(), "device": str(self.device),
               "memory_source": probe.source if probe else "",
               "memory_label": (probe.label if probe else "")
               + ("" if self.device.type == "cuda" else
                  "; other = the models' inputs (batches, carried state)"),
               "precise": self.precise is not None,
               "precise_backend": self.precise.backend if self.precise is not None else "",
               "parameters": sum(p.numel() for p in self.found.parameters())}
        return {"source": "watch", "script": self.script, "argv": self.argv,
                "pid": os.getpid(), "capture_every": self.capture_every,
                "precise_requested": self.precise_requested, "environment": env,
                "models": list(self._models_seen.values()), "finished": False,
                "rank": self.rank, "world_size": self.world_size}


NOTHING_FOUND_HELP = (
    "memlens looks for nn.Module calls and torch.optim optimizers. If your script uses "
    "neither (a hand-written model of plain tensors), pass what it trains: "
    "`import memlens; with memlens.watch(models=[model], optimizers=[opt]): ...`, and mark "
    "steps with `Watch.step()`.")


def watch(models=None, optimizers=None, *, out=None, precise: bool = False,
          capture_every: int = 0) -> Watch:
    """Record this process's training into a run folder (`out`, default runs/<time>-watch).

    `models`, `optimizers`: what to record (default: every root module called, every
    optimizer). Use as `with memlens.watch(): ...` or call `.close()` at the end.
    Inside a script run by `main.py watch`, it returns the recording already going: its
    phase() and step() work, and closing it leaves that recording to its owner."""
    if _ACTIVE:
        return _Joined(_ACTIVE[-1])
    return Watch(_as_list(models) or None, _as_list(optimizers) or None, out=out,
                 precise=precise, capture_every=capture_every,
                 script=sys.argv[0] if sys.argv else None)


class _Joined:
    """The watch already recording, as a script's own memlens.watch() call sees it."""

    def __init__(self, owner: Watch) -> None:
        self.owner = owner
        self.folder = owner.folder

    def __enter__(self) -> _Joined:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def close(self, *args, **kwargs) -> None:
        """The recording belongs to whoever started it: nothing to close here."""

    def phase(self, name: str):
        return self.owner.phase(name)

    def step(self) -> None:
        self.owner.step()


# --- helpers ----------------------------------------------------------------------------------


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) inherits the hooks: they must do nothing there,
    and nothing of the parent's run is written from it."""
    for w in _ACTIVE:
        w.broken = w.closed = True


if hasattr(os, "register_at_fork"):  # POSIX; where there is no fork there is no child
    os.register_at_fork(after_in_child=_forget_in_child)


def _as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, (nn.Module, torch.optim.Optimizer)):
        return [x]
    return list(x)


def _default_folder(script: str | None) -> Path:
    stem = Path(script).stem if script else "watch"
    # Ranks of one torchrun job share its run id: one parent folder, whatever their clocks say.
    when = os.environ.get("TORCHELASTIC_RUN_ID") or time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{when}-watch-{stem}"


def _launcher_rank() -> tuple[int, int]:
    """(rank, world size) as torchrun's environment gives them; (0, 1) outside it."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


_compiling = torch.compiler.is_compiling  # a constant True while torch.compile traces


def _has_eval_layers(module: nn.Module) -> bool:
    return any(isinstance(m, _EVAL_LAYERS) for m in module.modules())


def _output_nodes(output: Any) -> list:
    """The autograd nodes of a forward's tensor outputs (each once): a tensor, or tensors in
    tuples, lists and dicts nested up to three deep (16 items of each looked at)."""
    if isinstance(output, Tensor):
        fn = output.grad_fn
        return [fn] if fn is not None else []
    nodes: list = []
    level = [output]
    for _ in range(3):
        inner = []
        for x in level:
            items = x.values() if isinstance(x, dict) else x
            if not isinstance(items, (tuple, list)):
                items = list(items) if isinstance(x, dict) else ()
            for o in items[:16]:
                if isinstance(o, Tensor):
                    fn = o.grad_fn
                    if fn is not None and all(fn is not n for n in nodes):
                        nodes.append(fn)
                elif isinstance(o, (tuple, list, dict)):
                    inner.append(o)
        if not inner:
            break
        level = inner
    return nodes


def _saved_tracker():
    """The saved-tensor tracker and graph-node counter of preset runs: the native helpers'
    where built (a saved tensor costs autograd no Python frame), else Python's."""
    from memlens.core.native import load
    from memlens.core.native.tracker import make_saved_tracker

    native = load(build=False)
    return (make_saved_tracker(), native.count_graph_nodes if native else count_graph_nodes,
            native)

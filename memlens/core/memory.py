"""Measuring memory truthfully: tensor bytes by category on CPU, the allocator on CUDA.

Every figure counts storages, each once (views and aliases share one), keyed by device and
data pointer. Parameters' storages are never counted again as activations or grads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import time
import weakref

import numpy as np
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from memlens.core.records import (
    ALLOC_FRAME_COLUMN,
    MEMORY_CATEGORIES,
    PHASE_CODE,
    AllocBlock,
    MemorySample,
    edge_samples,
)

CATEGORY_CODE = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}


def _codes(phases) -> list[int]:
    return sorted(PHASE_CODE[p] for p in phases)


def storage_key(t: Tensor) -> tuple[tuple[int, int], int]:
    """(device index, -1 for CPU; storage base pointer) and the storage's bytes: one key per
    storage, not per view."""
    st = t.untyped_storage()
    return (t.get_device(), st.data_ptr()), st.nbytes()


class _Bytes:
    """A set of storages and their byte total."""

    __slots__ = ("keys", "total")

    def __init__(self) -> None:
        self.keys: set = set()
        self.total = 0

    def add(self, t: Tensor, exclude: set | frozenset = frozenset()) -> None:
        key, n = storage_key(t)
        if key in self.keys or key in exclude:
            return
        self.keys.add(key)
        self.total += n


# --- activations saved for backward ---------------------------------------------------------


class _Saved:
    """What the pack hook stores for autograd: a detached alias (no reference cycle through
    grad_fn) and the version it had. The tracker fills in its storage key and bytes at the
    next measure (parameters are dropped from its scan there: never activations).

    No finalizer: most saved tensors are released by the backward of the step that saved
    them, and a Python __del__ called from autograd for each would cost more than the hook
    itself. The tracker keeps a weak reference and looks which are still held when it
    measures; those that outlive their step become _Retained, whose finalizer reports the
    release of a retained or leaked graph."""

    __slots__ = ("__weakref__", "key", "nbytes", "tensor", "tracker", "version")


class _SavedParameter:
    """What the pack hook stores for a parameter (a weight saved by a matmul, say): only what
    unpack's version check needs. A parameter is never an activation, so the tracker need not
    follow it: no weak reference, no place in the next measure."""

    __slots__ = ("tensor", "version")


class _Retained(_Saved):
    __slots__ = ()

    def __del__(self) -> None:
        self.tracker._release(self.key)


class _LiveKeys:
    """Storage keys saved for backward and alive at the last measure: `in` and iteration."""

    __slots__ = ("fresh", "retained")

    def __init__(self, fresh: dict, retained: dict) -> None:
        self.fresh, self.retained = fresh, retained

    def __contains__(self, key) -> bool:
        return key in self.fresh or key in self.retained

    def __iter__(self):
        yield from self.fresh
        yield from list(self.retained)  # a finalizer may drop a key meanwhile


class SavedTensorTracker:
    """Counts bytes saved for backward, live, via torch.autograd.graph.saved_tensors_hooks.

    A pack hook turns off autograd's own check that a saved tensor was not modified in place,
    so unpack does that check itself and raises the error autograd would have raised. Both
    hooks run for every saved tensor on the training thread: they do as little as they can,
    and the counting happens when a sample asks (measure()).
    """

    def __init__(self) -> None:
        self.param_keys: frozenset = frozenset()  # storage keys of the parameters
        self.param_ptrs: frozenset = frozenset()  # and their data pointers
        self._fresh: list = []  # weak references to this step's holders
        self._retained: dict = {}  # key -> [holders, nbytes] of holders that outlived a step
        self.retained_bytes = 0
        self._step_keys: set = set()
        self.step_saved_bytes = 0  # bytes first saved by this step (as of the last measure)
        self._live = _LiveKeys({}, self._retained)
        self._measures = 0  # measure() calls: a checkpoint is good until the next one

    def set_params(self, keys, ptrs) -> None:
        """The parameters' storage keys and data pointers: a saved tensor in one of their
        storages, or starting at one, is checked at unpack but never counted."""
        self.param_keys, self.param_ptrs = frozenset(keys), frozenset(ptrs)

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def checkpoint(self) -> tuple[int, int]:
        """A place in the list of holders packed since the last measure (saved_since)."""
        return self._measures, len(self._fresh)

    def saved_since(self, mark: tuple[int, int]) -> list:
        """Weak references to the holders packed since `mark` (none if a measure came in
        between); after the next measure a live holder's `key` and `nbytes` are set (None
        for a parameter)."""
        measures, n = mark
        return self._fresh[n:] if measures == self._measures else []

    def new_step(self) -> None:
        self.end_step()
        self._step_keys = set()
        self.step_saved_bytes = 0

    def measure(self) -> tuple[int, _LiveKeys]:
        """Bytes saved for backward and still held by autograd now, each storage once, and
        their keys. Holders packed since the last measure get their storage key and size
        here, in one loop, rather than one by one inside autograd's save path."""
        self._measures += 1
        fresh: dict = {}
        alive = []
        retained, param_keys, step_keys = self._retained, self.param_keys, self._step_keys
        for ref in self._fresh:
            h = ref()
            if h is None:
                continue
            key = h.key
            if key is None:
                key, n = storage_key(h.tensor)
                if key in param_keys:  # a parameter is never an activation: stop looking
                    continue
                h.key, h.nbytes = key, n
                if key not in step_keys:
                    step_keys.add(key)
                    self.step_saved_bytes += n
            alive.append(ref)
            if key not in retained:
                fresh[key] = h.nbytes
        self._fresh = alive
        self._live = _LiveKeys(fresh, retained)
        return self.retained_bytes + sum(fresh.values()), self._live

    @property
    def live_bytes(self) -> int:
        return self.measure()[0]

    @property
    def live(self) -> _LiveKeys:
        """Keys of the storages saved for backward and alive at the last measure()."""
        return self._live

    def end_step(self) -> None:
        """Holders autograd still has after the step are a retained graph: from now on
        their release is reported by a finalizer."""
        self.measure()
        retained = self._retained
        for ref in self._fresh:
            h = ref()
            if h is None:
                continue
            h.__class__ = _Retained
            entry = retained.get(h.key)
            if entry is None:
                retained[h.key] = [1, h.nbytes]
                self.retained_bytes += h.nbytes
            else:
                entry[0] += 1
        self._fresh = []
        self._live = _LiveKeys({}, retained)

    def _pack(self, t: Tensor):
        # Autograd hands the hook a detached alias already, except for a tensor saved as the
        # output of its own op, which still points at the node being built: only that one
        # needs detaching here, or the node would hold itself through the hook's object.
        if t.requires_grad:
            t = t.detach()
        if t.data_ptr() in self.param_ptrs:  # a parameter or a view of one from its start
            p = _SavedParameter()
            p.tensor, p.version = t, t._version
            return p
        h = _Saved()
        h.tensor, h.version, h.key, h.tracker = t, t._version, None, self
        self._fresh.append(weakref.ref(h))
        return h

    @staticmethod
    def _unpack(saved: _Saved | _SavedParameter) -> Tensor:
        t, version = saved.tensor, saved.version
        if t._version != version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{t.type()} {list(t.shape)}], is at version {t._version}; "
                f"expected version {version} instead."
            )
        return t

    def _release(self, key) -> None:
        entry = self._retained.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            del self._retained[key]
            self.retained_bytes -= entry[1]


# --- process heap (CPU, glibc) -----------------------------------------------------------------


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _load_mallinfo2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


_mallinfo2 = _load_mallinfo2()


def process_heap_bytes() -> int | None:
    """Bytes in use by malloc in this process (glibc mallinfo2), or None where unavailable."""
    if _mallinfo2 is None:
        return None
    info = _mallinfo2()
    return int(info.uordblks + info.hblkhd)


# --- precise mode: every storage, with alloc and free events ----------------------------------


class _StorageRecord(weakref.ref):
    """A tracked storage: a weak reference to it (its callback reports the free) that also
    carries what the alloc event said about it. One object per allocation."""

    __slots__ = ("category", "id", "key", "nbytes", "t_alloc_us")


# Ops whose every output aliases an input (views, in-place and out= ops) never allocate a
# storage; their schema says so, once per op. resize_ and set_ alias too but can allocate.
_ALIAS_ONLY: dict = {}  # id(op) -> (op, alias only, its C++ callable)


def _alias_only(func) -> bool:
    try:
        returns = func._schema.returns
        name = func._schema.name
    except AttributeError:
        return False
    if name.startswith(("aten::resize", "aten::set_")):
        return False
    return all(r.alias_info is not None for r in returns)


class StorageTracker(TorchDispatchMode):
    """Sees every op's outputs; tracks each new storage until a weakref says it was freed.

    Gives the exact live tensor bytes at any moment, the in-step peak, and alloc/free events
    (with a guessed category, refined at each sample) for the memory-snapshot export.
    `__torch_dispatch__` runs for every aten op of the step, so it does the least it can:
    ops that only alias are skipped by a per-op cache of their schema.
    """

    backend = "dispatch mode (Python)"

    def __init__(self, t0: float, with_frames: bool = True) -> None:
        super().__init__()
        self.t0 = t0
        self.with_frames = with_frames
        self.live: dict = {}  # key -> _StorageRecord
        self.live_bytes = 0
        self.peak_bytes = 0
        self.next_id = 0
        self.phase_code = PHASE_CODE["start"]
        self.step = 0
        self.category_guess = "other"
        self._events: list[tuple] = []  # pending rows for sinks (ALLOC_COLUMNS + frames)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # memlens never compiles inside the tracked region; without this every op's call
        # goes through torch._disable_dynamo's wrapper as well.
        return False

    # hot path --------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # OpOverload hashes in Python; its id hashes in C. The cache keeps the op alive, and
        # its C++ callable (what OpOverload.__call__ would call, one Python frame later).
        entry = _ALIAS_ONLY.get(id(func))
        if entry is None:
            entry = _ALIAS_ONLY[id(func)] = (func, _alias_only(func), getattr(func, "_op", func))
        out = entry[2](*args, **(kwargs or {}))
        if entry[1]:
            return out
        if isinstance(out, Tensor):
            self.track(out)
        elif isinstance(out, (tuple, list)):
            for t in out:
                if isinstance(t, Tensor):
                    self.track(t)
                elif isinstance(t, (tuple, list)):
                    for u in tree_leaves(t):
                        if isinstance(u, Tensor):
                            self.track(u)
        return out

    def track(self, t: Tensor, category: str | None = None, at_start: bool = False) -> None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
            return
        ptr = st.data_ptr()
        key = (t.get_device(), ptr)
        if ptr == 0 or key in self.live:  # meta and empty storages have no address
            return
        rec = _StorageRecord(st, self._freed)
        rec.key = key
        rec.id = self.next_id
        self.next_id += 1
        rec.nbytes = n = st.nbytes()
        rec.category = category or self.category_guess
        stack = None
        if at_start:
            rec.t_alloc_us = 0
        else:
            rec.t_alloc_us = int((time.perf_counter() - self.t0) * 1e6)
            if self.with_frames:
                stack = _capture_stack()
        self.live[key] = rec
        self.live_bytes += n
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
        self._events.append((rec.t_alloc_us, 0, rec.id, ptr, n, rec, self.step,
                             self.phase_code, stack))

    def _freed(self, rec: _StorageRecord) -> None:
        key = rec.key
        if self.live.get(key) is not rec:
            return
        del self.live[key]
        self.live_bytes -= rec.nbytes
        t_us = int((time.perf_counter() - self.t0) * 1e6)
        self._events.append((t_us, 1, rec.id, key[1], rec.nbytes, rec, self.step,
                             self.phase_code, None))

    # bookkeeping -------------------------------------------------------------------------------
    def close(self) -> None:
        """Nothing to let go of: the mode is entered per step."""

    def begin_phase(self, step: int, phase: str, category: str) -> None:
        self.step, self.phase_code, self.category_guess = step, PHASE_CODE[phase], category

    def reset_peak(self) -> None:
        self.peak_bytes = self.live_bytes

    def classify(self, categories: dict[str, set]) -> None:
        """Refine live records' categories from what a sample found them to be."""
        live = self.live
        for cat, keys in categories.items():
            for key in keys:
                rec = live.get(key)
                if rec is not None:
                    rec.category = cat

    @property
    def pending(self) -> int:
        """Alloc/free rows waiting for drain()."""
        return len(self._events)

    def drain(self) -> AllocBlock:
        """Pending alloc/free events, categories resolved, as one block for sinks'
        on_allocations (as the native recorder drains them): its frames are the stacks'
        texts, each once."""
        rows, self._events = self._events, []
        stacks = [r[8] for r in rows if r[8] is not None]
        texts = iter(_stack_texts(stacks) if stacks else ())
        ids: dict[str, int] = {}
        table = [(t, a, i, p, n, CATEGORY_CODE[rec.category], s, ph,
                  -1 if st is None or not (text := next(texts)) else ids.setdefault(text, len(ids)))
                 for (t, a, i, p, n, rec, s, ph, st) in rows]
        block = np.array(table, dtype=np.float64).reshape(len(table), ALLOC_FRAME_COLUMN + 1)
        return AllocBlock(block, list(ids))


_HERE = __file__.rsplit("/", 1)[0]
_INTERNAL_FILE: dict[str, bool] = {}  # file -> whether its frames are torch's or memlens' own
STACK_FRAMES = 6

try:  # torch's own C++ stack capture, as its CUDA memory history uses: ~1 us a call
    from torch._C._profiler import gather_traceback, symbolize_tracebacks
except ImportError:  # pragma: no cover - older or trimmed builds
    gather_traceback = symbolize_tracebacks = None


def _capture_stack():
    """The Python stack now, cheaply: captured in C++, turned into text at drain()."""
    if gather_traceback is not None:
        return gather_traceback(True, False, False)
    return _walk_stack()


def _walk_stack() -> str:
    out = []
    f = sys._getframe(3)
    while f is not None:
        out.append({"filename": f.f_code.co_filename, "line": f.f_lineno,
                    "name": f.f_code.co_name})
        f = f.f_back
    return _format_stack(out)


def _format_stack(frames: list[dict]) -> str:
    """The newest STACK_FRAMES frames outside torch and memlens internals, as
    file:line:function joined by |."""
    parts = []
    for d in frames:
        name = d["filename"]
        internal = _INTERNAL_FILE.get(name)
        if internal is None:
            internal = _INTERNAL_FILE[name] = (
                "/torch/" in name or name.startswith(_HERE + "/memory"))
        if not internal:
            parts.append(f"{name}:{d['line']}:{d['name']}")
            if len(parts) == STACK_FRAMES:
                break
    return "|".join(parts)


def _stack_texts(stacks: list) -> list[str]:
    """Text for each captured stack. One symbolize call for the lot; the frames it returns
    are shared objects for equal frames, so equal stacks are formatted once."""
    if isinstance(stacks[0], str):
        return stacks
    out = []
    seen: dict[tuple, str] = {}
    for frames in symbolize_tracebacks(stacks):
        key = tuple(map(id, frames))
        text = seen.get(key)
        if text is None:
            text = seen[key] = _format_stack(frames)
        out.append(text)
    return out


# --- the probe: one sample at a phase boundary ---------------------------------------------------


class MemoryProbe:
    """Takes MemorySamples for a preset: categories by storage on CPU, allocator on CUDA.

    A sample runs four times a step on the training thread, so it re-reads only what the
    phase just finished can have changed: gradients after zero_grad and backward, optimizer
    state after the optimizer step (and there only if its tensors are not the same ones as
    last time), carried tensors always.
    """

    _GRADS_CHANGE = frozenset({"start", "zero_grad", "backward"})
    _OPT_CHANGES = frozenset({"start", "optimizer"})
    # mallinfo2 walks malloc's free lists (tens of microseconds in a busy heap): read the
    # process heap once a step, at the end of forward, when activations are at their height.
    _HEAP_PHASES = frozenset({"start", "forward"})

    def __init__(self, preset, device: torch.device, saved: SavedTensorTracker,
                 precise: StorageTracker | None = None) -> None:
        self.preset = preset
        self.device = device
        self.cuda = device.type == "cuda"
        self.saved = saved
        self.precise = precise
        self.param_list = preset.parameters()
        self.params = _Bytes()
        for p in self.param_list:
            self.params.add(p)
        self.params.keys = frozenset(self.params.keys)
        # Buffers (BatchNorm running stats, a causal mask) are updated in place, never
        # replaced, by the presets: counted once here. One saved for backward is still a
        # buffer, not an activation.
        self.buffers = _Bytes()
        for b in preset.buffers():
            self.buffers.add(b, self.params.keys)
        self.buffers.keys = frozenset(self.buffers.keys)
        saved.set_params(self.params.keys | self.buffers.keys,
                         (frozenset(p.data_ptr() for p in self.param_list)
                          | frozenset(b.data_ptr() for b in preset.buffers())) - {0})
        # Storage key -> bytes of the AMP weight copies the last forward saved (set by the
        # loop from the graph, memlens.core.amp_casts); counted apart from activations while alive.
        self.amp_casts: dict = {}
        self._grads = _Bytes()
        self._grad_list: list[Tensor] | None = []
        self.grad_watch = None
        self.light = None  # LightProbe.sample as a C function, where used (use_light_probe)
        self.edge = None  # and LightProbe.edge
        self._take_rows = None
        self._opt = _Bytes()
        self._opt_ids: list[int] = []

    @property
    def source(self) -> str:
        if self.cuda:
            return "cuda_allocator"
        return "cpu_tracked_storages" if self.precise else "cpu_tensor_bytes"

    @property
    def label(self) -> str:
        if self.cuda:
            return "CUDA allocator (memory_allocated / reserved)"
        if self.precise:
            if self.precise.backend.startswith("allocator"):
                return "CPU allocator: every allocation tracked (exact, incl. in-step peak)"
            return "CPU tensor bytes, every storage tracked (Python dispatch mode; exact peak)"
        return "CPU tensor bytes by category (exact for what it counts; peak = lower bound)"

    def grads(self) -> list[Tensor]:
        """The gradients as of the last sample after zero_grad or backward (ask right after
        it: with the native scan the list is made when first asked for)."""
        if self._grad_list is None or self.edge is not None:  # the edges keep no list
            self._grad_list = [g for p in self.param_list if (g := p.grad) is not None]
        return self._grad_list

    def use_grad_watch(self, watch) -> None:
        """Scan gradients through the native helpers' GradWatch (CPU; see memlens.core.loop)."""
        watch.set_param_keys(list(self.params.keys))
        self.grad_watch = watch

    def use_light_probe(self, light, t0: float) -> None:
        """Take a CPU light-mode sample's gradient, optimizer and carried-tensor figures
        from the native helpers' LightProbe: the same rules as below in one call (a plain C
        function: see bind_fast in core/native/fast_calls.h). The loop's phase edges then call
        `edge(code, carried)`, which keeps the figures until take_samples(). `t0`: the run's
        start on time.perf_counter (a sample's time_s counts from it)."""
        self.light = light.fast_sample()
        # t0 on the native clock: the same instant, whatever origin either clock has.
        native_t0 = t0 + (light.clock() - time.perf_counter())
        light.set_rules(_codes(self._GRADS_CHANGE), _codes(self._OPT_CHANGES),
                        _codes(self._HEAP_PHASES), self.preset, native_t0)
        self.edge, self._take_rows = light.fast_edges()

    def take_rows(self) -> list[tuple]:
        """The rows edge() recorded since the last take, in order, as LightProbe.take gives
        them (code, time_s, grads, optimizer, activations, other, heap): for a caller that
        makes them samples later (edge_samples)."""
        return self._take_rows()

    def take_samples(self, step: int) -> list[MemorySample]:
        """The samples edge() recorded since the last take, in order (all of them `step`'s:
        the loop takes them at every step's end)."""
        return edge_samples(step, self.params.total, self.buffers.total, self._take_rows())

    def _amp_bytes(self, live) -> int:
        """Bytes of the AMP weight copies still saved for backward."""
        if not self.amp_casts:
            return 0
        return sum(n for key, n in self.amp_casts.items() if key in live)

    def _scan_grads(self) -> _Bytes:
        grads = _Bytes()
        watch = self.grad_watch
        if watch is not None:  # the native helpers' one pass over the parameters
            grads.total, keys = watch.grad_storages()
            grads.keys = set(keys)
            self._grad_list = None  # made if asked for (see grads())
            return grads
        found = [g for p in self.param_list if (g := p.grad) is not None]
        pkeys = self.params.keys
        for g in found:
            grads.add(g, pkeys)
        self._grad_list = found
        return grads

    def _scan_optimizer(self, grads: _Bytes) -> _Bytes:
        state = [v for o in self.preset.optimizers for s in o.state.values()
                 for v in s.values() if isinstance(v, Tensor)]
        ids = [id(v) for v in state]
        # Optimizers update their state in place: the same tensors, the same storages. (None
        # of them shares a storage with a gradient; if one did, scan again.)
        if ids == self._opt_ids and self._opt.keys.isdisjoint(grads.keys):
            return self._opt
        opt = _Bytes()
        pkeys = self.params.keys
        for v in state:
            opt.add(v, pkeys)
        if not opt.keys.isdisjoint(grads.keys):
            opt = _Bytes()
            exclude = pkeys | grads.keys
            for v in state:
                opt.add(v, exclude)
            ids = []  # never reuse a scan that had to leave gradients out
        self._opt_ids = ids
        return opt

    def sample(self, step: int, phase: str, time_s: float, carried: list[Tensor] | None = None,
               heap: bool | None = None) -> MemorySample:
        """`carried`: the preset's carried tensors, where the caller has them already.
        `heap`: read the process heap (CPU) or not; by default at the phases that read it."""
        read_heap = phase in self._HEAP_PHASES if heap is None else heap
        grads_changed = phase in self._GRADS_CHANGE
        if self.light is not None:
            states = ([o.state for o in self.preset.optimizers]
                      if phase in self._OPT_CHANGES else None)
            # heap: mallinfo2 read in C, -1 when not asked for or where glibc has none
            grads, opt, act_bytes, other, heap = self.light(
                grads_changed, states,
                carried if carried is not None else self.preset.carried_tensors(),
                read_heap)
            if grads_changed:
                self._grad_list = None  # made if asked for (see grads())
            amp = self._amp_bytes(self.saved.live)
            return MemorySample(step, phase, time_s, self.params.total, grads, opt,
                                act_bytes - amp, other, None, None,
                                heap if heap >= 0 else None, self.buffers.total, amp)
        if grads_changed:
            self._grads = self._scan_grads()
        grads = self._grads
        opt_before = self._opt
        if phase in self._OPT_CHANGES:
            self._opt = self._scan_optimizer(grads)
        opt = self._opt
        act_bytes, live = self.saved.measure()
        amp = self._amp_bytes(live)
        known = self.params.total + grads.total + opt.total + act_bytes + self.buffers.total
        allocated = reserved = heap = None
        temporaries = 0
        if carried is None:
            carried = self.preset.carried_tensors()
        if self.cuda or self.precise is not None:
            # `other` as light mode sees it (what the loop carries); the rest of what the
            # allocator or the tracker sees and no category holds: temporaries.
            other = self._other(carried, grads, opt)
            if self.cuda:
                allocated = torch.cuda.memory_allocated(self.device)
                reserved = torch.cuda.memory_reserved(self.device)
                temporaries = max(0, allocated - known - other)
            else:
                temporaries = max(0, self.precise.live_bytes - known - other)
            # Only what can have changed: parameters once, optimizer state when rescanned.
            found = {"activations": live}
            if grads_changed:
                found["grads"] = grads.keys
            if opt is not opt_before or phase == "start":
                found["optimizer"] = opt.keys
            if phase == "start":
                found["params"] = self.params.keys
            if phase == "start":
                found["buffers"] = self.buffers.keys
            self.precise.classify(found)
        else:
            other = self._other(carried, grads, opt)
        if not self.cuda and read_heap:
            heap = process_heap_bytes()
        return MemorySample(step, phase, time_s, self.params.total, grads.total, opt.total,
                            act_bytes - amp, other, allocated, reserved, heap,
                            self.buffers.total, amp, temporaries)

    def _other(self, carried: list[Tensor], grads: _Bytes, opt: _Bytes) -> int:
        """Bytes of the tensors the loop carries between steps, not counted elsewhere."""
        seen: set = set()
        total = 0
        pk, gk, ok, live = self.params.keys, grads.keys, opt.keys, self.saved.live
        bk = self.buffers.keys
        for t in carried:
            key, n = storage_key(t)
            if key in seen or key in pk or key in gk or key in ok or key in live or key in bk:
                continue
            seen.add(key)
            total += n
        return total

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
from collections.abc import Iterable

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from core.records import MEMORY_CATEGORIES, PHASE_CODE, MemorySample

CATEGORY_CODE = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}


class _StorageCache:
    """Remembers each live tensor's storage key and size, so sampling the same optimizer
    state and grads every phase costs a dict lookup, not storage queries."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple] = {}

    def lookup(self, t: Tensor) -> tuple[tuple[int, int], int]:
        """(device index, -1 for CPU; storage base pointer) and the storage's bytes: one key
        per storage, not per view."""
        hit = self._by_id.get(id(t))
        if hit is not None and hit[0]() is t:
            return hit[1], hit[2]
        st = t.untyped_storage()
        key, n = (t.get_device(), st.data_ptr()), st.nbytes()
        tid = id(t)
        ref = weakref.ref(t, lambda _r, tid=tid, by_id=self._by_id: by_id.pop(tid, None))
        self._by_id[tid] = (ref, key, n)
        return key, n


_CACHE = _StorageCache()


class _Bytes:
    """A set of storages and their byte total."""

    __slots__ = ("keys", "total")

    def __init__(self) -> None:
        self.keys: set = set()
        self.total = 0

    def add(self, t: Tensor, exclude: Iterable[set] = ()) -> None:
        key, n = _CACHE.lookup(t)
        if key in self.keys or any(key in ex for ex in exclude):
            return
        self.keys.add(key)
        self.total += n


# --- activations saved for backward ---------------------------------------------------------


class _Saved:
    """What the pack hook stores for autograd: a detached alias (no reference cycle through
    grad_fn), the version it had, and a finalizer that tells the tracker it is gone."""

    __slots__ = ("key", "tensor", "tracker", "version")

    def __init__(self, tensor: Tensor, version: int, key, tracker) -> None:
        self.tensor = tensor
        self.version = version
        self.key = key
        self.tracker = tracker

    def __del__(self) -> None:
        if self.key is not None:
            self.tracker._release(self.key)


class SavedTensorTracker:
    """Counts bytes saved for backward, live, via torch.autograd.graph.saved_tensors_hooks.

    A pack hook turns off autograd's own check that a saved tensor was not modified in place,
    so unpack does that check itself and raises the error autograd would have raised.
    """

    def __init__(self) -> None:
        self.param_keys: set = set()
        self._live: dict = {}  # key -> [holders, nbytes]
        self.live_bytes = 0
        self._step_keys: set = set()
        self.step_saved_bytes = 0  # bytes first saved by the current step's forward(s)

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def new_step(self) -> None:
        self._step_keys = set()
        self.step_saved_bytes = 0

    def live_keys(self) -> set:
        return set(self._live)

    def _pack(self, t: Tensor) -> _Saved:
        st = t.untyped_storage()
        key = (t.get_device(), st.data_ptr())
        alias = t.detach()
        if key in self.param_keys:
            return _Saved(alias, t._version, None, self)
        entry = self._live.get(key)
        if entry is None:
            n = st.nbytes()
            self._live[key] = [1, n]
            self.live_bytes += n
        else:
            entry[0] += 1
            n = entry[1]
        if key not in self._step_keys:
            self._step_keys.add(key)
            self.step_saved_bytes += n
        return _Saved(alias, t._version, key, self)

    @staticmethod
    def _unpack(saved: _Saved) -> Tensor:
        t = saved.tensor
        if t._version != saved.version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{t.type()} {list(t.shape)}], is at version {t._version}; "
                f"expected version {saved.version} instead."
            )
        return t

    def _release(self, key) -> None:
        entry = self._live.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            del self._live[key]
            self.live_bytes -= entry[1]


# --- process heap (CPU, glibc) -----------------------------------------------------------------


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]  # fmt: skip


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


class _StorageRecord:
    __slots__ = ("category", "frames", "id", "nbytes", "ref", "t_alloc_us")


class StorageTracker(TorchDispatchMode):
    """Sees every op's outputs; tracks each new storage until a weakref says it was freed.

    Gives the exact live tensor bytes at any moment, the in-step peak, and alloc/free events
    (with a guessed category, refined at each sample) for the memory-snapshot export.
    """

    def __init__(self, t0: float, with_frames: bool = True) -> None:
        super().__init__()
        self.t0 = t0
        self.with_frames = with_frames
        self.live: dict = {}  # key -> _StorageRecord
        self.live_bytes = 0
        self.peak_bytes = 0
        self.next_id = 0
        self.phase = "start"
        self.step = 0
        self.category_guess = "other"
        self._events: list[tuple] = []  # pending rows for sinks (ALLOC_COLUMNS + frames)

    # hot path --------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, Tensor):
            self.track(out)
        elif isinstance(out, (tuple, list)):
            for t in tree_leaves(out):
                if isinstance(t, Tensor):
                    self.track(t)
        return out

    def track(self, t: Tensor, category: str | None = None, at_start: bool = False) -> None:
        if t.is_meta or t.layout is not torch.strided:
            return
        st = t.untyped_storage()
        ptr = st.data_ptr()
        key = (t.get_device(), ptr)
        if key in self.live or ptr == 0:
            return
        rec = _StorageRecord()
        rec.id = self.next_id
        self.next_id += 1
        rec.nbytes = st.nbytes()
        rec.category = category or self.category_guess
        rec.t_alloc_us = 0 if at_start else int((time.perf_counter() - self.t0) * 1e6)
        rec.frames = _frames() if self.with_frames and not at_start else ""
        rec.ref = weakref.ref(st, lambda _r, key=key: self._freed(key))
        self.live[key] = rec
        self.live_bytes += rec.nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
        self._events.append((rec.t_alloc_us, 0, rec.id, ptr, rec.nbytes, rec, self.step,
                             PHASE_CODE[self.phase], rec.frames))

    def _freed(self, key) -> None:
        rec = self.live.pop(key, None)
        if rec is None:
            return
        self.live_bytes -= rec.nbytes
        t_us = int((time.perf_counter() - self.t0) * 1e6)
        self._events.append((t_us, 1, rec.id, key[1], rec.nbytes, rec, self.step,
                             PHASE_CODE[self.phase], ""))

    # bookkeeping -------------------------------------------------------------------------------
    def begin_phase(self, step: int, phase: str, category: str) -> None:
        self.step, self.phase, self.category_guess = step, phase, category

    def reset_peak(self) -> None:
        self.peak_bytes = self.live_bytes

    def classify(self, categories: dict[str, set]) -> None:
        """Refine live records' categories from what a sample found them to be."""
        for cat, keys in categories.items():
            for key in keys:
                rec = self.live.get(key)
                if rec is not None:
                    rec.category = cat

    def drain(self) -> list[tuple]:
        """Pending alloc/free rows, categories resolved, for sinks' on_allocations."""
        rows, self._events = self._events, []
        return [(t, a, i, p, n, CATEGORY_CODE[rec.category], s, ph, fr)
                for (t, a, i, p, n, rec, s, ph, fr) in rows]


_HERE = __file__.rsplit("/", 1)[0]


def _frames(limit: int = 6) -> str:
    """A short Python stack (outside torch and memlens internals), newest first."""
    f = sys._getframe(3)
    out = []
    while f is not None and len(out) < limit:
        name = f.f_code.co_filename
        if "/torch/" not in name and not name.startswith(_HERE + "/memory"):
            out.append(f"{name}:{f.f_lineno}:{f.f_code.co_name}")
        f = f.f_back
    return "|".join(out)


# --- the probe: one sample at a phase boundary ---------------------------------------------------


class MemoryProbe:
    """Takes MemorySamples for a preset: categories by storage on CPU, allocator on CUDA."""

    def __init__(self, preset, device: torch.device, saved: SavedTensorTracker,
                 precise: StorageTracker | None = None) -> None:
        self.preset = preset
        self.device = device
        self.cuda = device.type == "cuda"
        self.saved = saved
        self.precise = precise
        self._param_list = preset.parameters()
        self.params = _Bytes()
        for p in self._param_list:
            self.params.add(p)
        saved.param_keys = self.params.keys
        self._grads = _Bytes()
        self._opt = _Bytes()

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
            return "CPU tensor bytes, every storage tracked (exact, incl. in-step peak)"
        return "CPU tensor bytes by category (exact for what it counts; peak = lower bound)"

    # Gradients change only in zero_grad and backward; optimizer state only in the optimizer
    # step. Other phases reuse the last count, which keeps light mode within its budget.
    _GRADS_CHANGE = frozenset({"start", "zero_grad", "backward"})
    _OPT_CHANGES = frozenset({"start", "optimizer"})

    def sample(self, step: int, phase: str, time_s: float) -> MemorySample:
        pkeys = self.params.keys
        if phase in self._GRADS_CHANGE:
            grads = _Bytes()
            for p in self._param_list:
                g = p.grad
                if g is not None:
                    grads.add(g, (pkeys,))
            self._grads = grads
        grads = self._grads
        if phase in self._OPT_CHANGES:
            opt = _Bytes()
            for o in self.preset.optimizers:
                for state in o.state.values():
                    for v in state.values():
                        if isinstance(v, Tensor):
                            opt.add(v, (pkeys, grads.keys))
            self._opt = opt
        opt = self._opt
        saved_keys = self.saved._live
        act_bytes = self.saved.live_bytes
        counted = (pkeys, grads.keys, opt.keys, saved_keys)
        allocated = reserved = heap = None
        if self.cuda:
            allocated = torch.cuda.memory_allocated(self.device)
            reserved = torch.cuda.memory_reserved(self.device)
            known = self.params.total + grads.total + opt.total + act_bytes
            other = max(0, allocated - known)
        elif self.precise is not None:
            known = self.params.total + grads.total + opt.total + act_bytes
            other = max(0, self.precise.live_bytes - known)
            self.precise.classify({"params": pkeys, "grads": grads.keys,
                                   "optimizer": opt.keys, "activations": set(saved_keys)})
        else:
            rest = _Bytes()
            for t in self.preset.carried_tensors():
                rest.add(t, counted)
            other = rest.total
        if not self.cuda:
            heap = process_heap_bytes()
        return MemorySample(step, phase, time_s, self.params.total, grads.total, opt.total,
                            act_bytes, other, allocated, reserved, heap)

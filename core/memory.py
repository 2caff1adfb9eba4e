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

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from core.records import MEMORY_CATEGORIES, PHASE_CODE, MemorySample

CATEGORY_CODE = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}


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
        st = t.untyped_storage()
        key = (t.get_device(), st.data_ptr())
        if key in self.keys or key in exclude:
            return
        self.keys.add(key)
        self.total += st.nbytes()


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

    @property
    def live(self) -> dict:
        """Keys of the storages saved for backward and alive now (read only)."""
        return self._live

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
        saved.param_keys = self.params.keys
        self._grads = _Bytes()
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
            return "CPU tensor bytes, every storage tracked (exact, incl. in-step peak)"
        return "CPU tensor bytes by category (exact for what it counts; peak = lower bound)"

    def grads(self) -> list[Tensor]:
        return [g for p in self.param_list if (g := p.grad) is not None]

    def _scan_grads(self) -> _Bytes:
        grads = _Bytes()
        pkeys = self.params.keys
        for p in self.param_list:
            g = p.grad
            if g is not None:
                grads.add(g, pkeys)
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

    def sample(self, step: int, phase: str, time_s: float) -> MemorySample:
        if phase in self._GRADS_CHANGE:
            self._grads = self._scan_grads()
        grads = self._grads
        if phase in self._OPT_CHANGES:
            self._opt = self._scan_optimizer(grads)
        opt = self._opt
        saved = self.saved
        act_bytes = saved.live_bytes
        known = self.params.total + grads.total + opt.total + act_bytes
        allocated = reserved = heap = None
        if self.cuda:
            allocated = torch.cuda.memory_allocated(self.device)
            reserved = torch.cuda.memory_reserved(self.device)
            other = max(0, allocated - known)
        elif self.precise is not None:
            other = max(0, self.precise.live_bytes - known)
            self.precise.classify({"params": self.params.keys, "grads": grads.keys,
                                   "optimizer": opt.keys, "activations": saved.live})
        else:
            other = self._other(self.preset.carried_tensors(), grads, opt)
        if not self.cuda and phase in self._HEAP_PHASES:
            heap = process_heap_bytes()
        return MemorySample(step, phase, time_s, self.params.total, grads.total, opt.total,
                            act_bytes, other, allocated, reserved, heap)

    def _other(self, carried: list[Tensor], grads: _Bytes, opt: _Bytes) -> int:
        """Bytes of the tensors the loop carries between steps, not counted elsewhere."""
        seen: set = set()
        total = 0
        pk, gk, ok, live = self.params.keys, grads.keys, opt.keys, self.saved.live
        for t in carried:
            key, n = storage_key(t)
            if key in seen or key in pk or key in gk or key in ok or key in live:
                continue
            seen.add(key)
            total += n
        return total

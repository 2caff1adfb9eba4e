"""Precise mode in Python: every storage an op makes, with alloc and free events (a
TorchDispatchMode; the native recorder in core/native is the fast twin)."""

from __future__ import annotations

import sys
import time
import weakref

import numpy as np
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from memlens.core.recorder.keys import CATEGORY_CODE, local_tensor
from memlens.core.records import ALLOC_FRAME_COLUMN, SAMPLE_PHASE_CODE, AllocBlock


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


def _storage_or_none(t: Tensor):
    local = local_tensor(t)
    return local.untyped_storage() if local is not None else None


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
        self.phase_code = SAMPLE_PHASE_CODE["start"]
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
        try:
            ptr = st.data_ptr()
        except RuntimeError:  # a wrapper subclass (a DTensor): the storage of its shard
            local = local_tensor(t)
            if local is None:
                return
            st = local.untyped_storage()
            ptr = st.data_ptr()
        key = (t.get_device(), ptr)
        if ptr == 0 or key in self.live:  # meta, empty and freed storages have no address
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
        self.step, self.phase_code, self.category_guess = step, SAMPLE_PHASE_CODE[phase], category

    def reset_peak(self) -> None:
        self.peak_bytes = self.live_bytes

    def tracks(self, key) -> bool:
        """Whether storage `key` is live and was made or registered in the run."""
        return key in self.live
    def forget(self, tensors: list[Tensor]) -> None:
        """Stop following these tensors' storages: FSDP's gathered parameters, which it
        frees and allocates again with storage.resize_, a call no dispatch mode sees (their
        records would stay live at their first size). Their bytes leave live_bytes; a sample
        counts them itself (`gathered`)."""
        storages = {id(st) for t in tensors if (st := _storage_or_none(t)) is not None}
        for key, rec in list(self.live.items()):
            if id(rec()) in storages:
                del self.live[key]
                self.live_bytes -= rec.nbytes

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


# Frames of memlens's own measuring code (this package) are left out of stacks, as torch's.
RECORDER_DIR = __file__.rsplit("/", 1)[0]
_INTERNAL_FILE: dict[str, bool] = {}  # file -> whether its frames are torch's or memlens' own
STACK_FRAMES = 6

try:  # torch's own C++ stack capture, as its CUDA memory history uses: cheap, in C++
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
                "/torch/" in name or name.startswith(RECORDER_DIR + "/"))
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

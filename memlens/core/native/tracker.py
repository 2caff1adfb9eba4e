"""Precise mode on the allocator's own events (CPU): the same figures as StorageTracker
(live tensor bytes, in-step peak, alloc/free rows with a category refined at each sample),
at a fraction of its cost.

StorageTracker is a Python dispatch mode: a Python call for every aten op, a storage lookup
for every output and a weak reference per storage. On the small ops of a CPU step that
doubled some presets' step time, and no Python dispatch mode can get under
torch.profiler's cost (its bare floor is already above it). The allocator already tells
c10's memory-reporting hook about every allocation and free, in C++; the recorder in
core/native/recorder.h listens there and keeps the live set in C++.

Differences in what is seen: every allocation of the CPU allocator on the training thread,
so a kernel's scratch buffers count toward the peak too (the dispatch mode only saw op
outputs). A storage made before the run (parameters, carried state) is registered by
track(at_start=True), and its free is followed by a weak reference, since the allocator
reports frees only of what it reported allocating.

The recorder listens from the first step until close(), between steps too: garbage
collected or dropped between two steps is freed there, and a per-step window would miss it.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from memlens.core.recorder.keys import CATEGORY_CODE, local_storage, storage_key
from memlens.core.recorder.precise import RECORDER_DIR
from memlens.core.records import SAMPLE_PHASE_CODE, AllocBlock


class _StartFree(weakref.ref):
    """A storage made before the run: its free, reported to the recorder by the callback."""

    __slots__ = ("device", "ptr", "rid")


class NativeStorageTracker:
    """StorageTracker's interface on the native recorder (see the module doc)."""

    backend = "allocator events (native)"

    def __init__(self, module, t0: float, with_frames: bool = True) -> None:
        # Frames left out of stacks, as the Python tracker leaves them out: torch's own and
        # memlens' measuring code (a trailing * makes a prefix).
        self._rec = module.Recorder(int(t0 * 1e6), with_frames, ["/torch/", RECORDER_DIR + "/*"])
        self._starts: dict = {}  # key -> _StartFree
        self._frames: list[str] = []  # stack texts by the recorder's stack id

    # the per-step context: starts listening on the training thread; stays until close()
    def __enter__(self) -> NativeStorageTracker:
        self._rec.start()
        return self

    def __exit__(self, *exc) -> None:
        return None

    def close(self) -> None:
        """Stop listening (fully on the thread that started it; from any other thread the
        recorder stays in place, silent)."""
        self._rec.stop()

    def __del__(self) -> None:
        rec = getattr(self, "_rec", None)
        if rec is not None:
            rec.stop()
            rec.clear()  # its records, and its references to the stacks' code objects

    def track(self, t: Tensor, category: str | None = None, at_start: bool = False) -> None:
        try:
            (device, ptr), n = storage_key(t)  # a DTensor's: its shard's
        except (RuntimeError, NotImplementedError):
            return
        if ptr == 0:
            return
        st = local_storage(t)
        rid = self._rec.track(device, ptr, n, CATEGORY_CODE[category or "other"], at_start)
        ref = _StartFree(st, self._start_freed)
        ref.device, ref.ptr, ref.rid = device, ptr, rid
        self._starts[(device, ptr)] = ref

    def _start_freed(self, ref: _StartFree) -> None:
        self._starts.pop((ref.device, ref.ptr), None)
        self._rec.freed(ref.device, ref.ptr, ref.rid)

    def begin_phase(self, step: int, phase: str, category: str) -> None:
        self._rec.begin_phase(step, SAMPLE_PHASE_CODE[phase], CATEGORY_CODE[category])

    @property
    def recorder(self):
        """The native Recorder (a LightProbe's edges file their samples' storages there)."""
        return self._rec

    def tracks(self, key) -> bool:
        """Whether storage `key` (device, ptr) is live and was made or registered in the run."""
        return self._rec.contains(*key)

    def reset_peak(self) -> None:
        self._rec.reset_peak()

    @property
    def live_bytes(self) -> int:
        return self._rec.live_bytes

    @property
    def peak_bytes(self) -> int:
        return self._rec.peak_bytes

    @property
    def pending(self) -> int:
        return self._rec.pending

    def classify(self, categories: dict) -> None:
        """Refine live storages' categories from what a sample found them to be."""
        rec = self._rec
        for cat, keys in categories.items():
            rec.classify(list(keys), CATEGORY_CODE[cat])

    def drain(self) -> AllocBlock:
        """Pending alloc/free events as one block (StorageTracker gives the same as rows)."""
        table, texts = self._rec.drain()
        self._frames.extend(text for _id, text in texts)  # ids come in order
        return AllocBlock(table, self._frames, shared=True)


def make_precise_tracker(t0: float, device, with_frames: bool = True):
    """The native tracker for a CPU run where it builds, else the Python dispatch mode.
    Returns (tracker, why not native or None)."""
    from memlens.core.native import load, unavailable_reason
    from memlens.core.recorder.precise import StorageTracker

    if device.type != "cpu":
        return StorageTracker(t0, with_frames), "the native recorder covers CPU runs"
    module = load()
    if module is None:
        return StorageTracker(t0, with_frames), unavailable_reason()
    return NativeStorageTracker(module, t0, with_frames), None


# --- activations saved for backward ------------------------------------------------------------


class _NativeLive:
    """Storage keys saved for backward and alive now: `in` and iteration."""

    __slots__ = ("_tracker",)

    def __init__(self, tracker) -> None:
        self._tracker = tracker

    def __contains__(self, key) -> bool:
        return self._tracker.contains(*key)

    def __iter__(self):
        return iter(self._tracker.keys())

    def counted(self, key) -> int | None:
        """As _LiveKeys.counted (core/recorder/saved.py): as of the last live_bytes."""
        n = self._tracker.counted_part(*key)
        return None if n < 0 else n

    def partial_storages(self) -> list[tuple[tuple[int, int], int, int]]:
        """As _LiveKeys.partial_storages: (key, bytes counted, the storage's bytes)."""
        return [((d, p), c, n) for d, p, c, n in self._tracker.partial_storages()]


class NativeSavedTracker:
    """SavedTensorTracker's interface and figures, its hooks in C (core/native/saved_tracker.h): a
    saved tensor costs autograd no Python frame, and its storage is counted as it is packed
    instead of at the next sample."""

    def __init__(self, module) -> None:
        from memlens.core.recorder.saved import inplace_error_text

        self._t = module.SavedTracker()
        self._t.set_error_text(inplace_error_text)
        self._pack, self._unpack = self._t.hook_functions()
        self._live = _NativeLive(self._t)
        # The loop calls these every step: plain C functions (bind_fast in
        # core/native/fast_calls.h), no Python frame and no pybind11 dispatch.
        self.new_step, self.end_step, self._counts = self._t.fast_functions()

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    @property
    def native(self):
        """The C++ tracker (for the native LightProbe)."""
        return self._t

    def set_params(self, keys, ptrs, leaf_params: bool = False) -> None:
        """As SavedTensorTracker.set_params. The C++ tracker matches a saved tensor's data
        pointer and its storage's base pointer against one set of pointers."""
        self._t.set_param_ptrs(sorted(set(ptrs) | {ptr for _device, ptr in keys}))
        self._t.set_leaf_params(leaf_params)

    def measure(self) -> tuple[int, _NativeLive]:
        return self._t.live_bytes, self._live

    @property
    def live_bytes(self) -> int:
        return self._t.live_bytes

    @property
    def live(self) -> _NativeLive:
        return self._live

    @property
    def retained_bytes(self) -> int:
        return self._counts()[1]

    @property
    def step_saved_bytes(self) -> int:
        return self._counts()[0]


def make_saved_tracker():
    """The native saved-tensor tracker where the helpers are built, else the Python one."""
    from memlens.core.native import load
    from memlens.core.recorder.saved import SavedTensorTracker

    module = load(build=False)
    return NativeSavedTracker(module) if module is not None else SavedTensorTracker()

"""Bytes saved for backward, live: saved_tensors_hooks that keep what autograd hands them and
count it when a sample asks."""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from memlens.core.recorder.keys import storage_key


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

    def set_params(self, keys, ptrs) -> None:
        """The parameters' storage keys and data pointers: a saved tensor in one of their
        storages, or starting at one, is checked at unpack but never counted."""
        self.param_keys, self.param_ptrs = frozenset(keys), frozenset(ptrs)

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)



    def new_step(self) -> None:
        self.end_step()
        self._step_keys = set()
        self.step_saved_bytes = 0

    def measure(self) -> tuple[int, _LiveKeys]:
        """Bytes saved for backward and still held by autograd now, each storage once, and
        their keys. Holders packed since the last measure get their storage key and size
        here, in one loop, rather than one by one inside autograd's save path."""
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

"""Bytes saved for backward, live: saved_tensors_hooks that keep what autograd hands them and
count it when a sample asks.

How a saved tensor is counted (the same here and in core/native/saved_tracker.h): each
storage once, whole, except a tensor without autograd history that reaches only part of its
storage (a batch sliced from a data set, token ids cut from a corpus): that counts the bytes
it reaches (those of several such, their union); the rest of the storage is the data's, and
stays "other" with the loop's own tensors. A view with history (a slice of an activation)
keeps its base as autograd keeps it: its buffer counts whole.
"""

from __future__ import annotations

import threading
import warnings
import weakref

import torch
from torch import Tensor

from memlens.core.recorder.keys import local_tensor, storage_key

_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)


class _Saved:
    """What the pack hook stores for autograd: the tensor as autograd itself would keep it
    (an op's input as it is; an op's own output as a detached alias: no reference cycle
    through grad_fn) and the version it had. The tracker fills in its storage key, the
    storage's bytes and the span the tensor reaches (None: all of it) at the next measure
    (parameters are dropped from its scan there).

    `plain`: the tensor had no autograd history when saved (only such a tensor can be a
    slice of a data set); `output`: (grad_fn name, output number) of one saved as its own
    op's output.

    No finalizer: most saved tensors are released by the backward of the step that saved
    them, and a Python __del__ called from autograd for each would cost more than the hook
    itself. The tracker keeps a weak reference and looks which are still held when it
    measures; those that outlive their step become _Retained, whose finalizer reports the
    release of a retained or leaked graph."""

    __slots__ = ("__weakref__", "key", "nbytes", "output", "plain", "span", "tensor",
                 "tracker", "version")


class _SavedParameter:
    """What the pack hook stores for a parameter (a weight saved by a matmul, say): only what
    unpack's version check needs. A parameter is never an activation, so the tracker need not
    follow it: no weak reference, no place in the next measure."""

    __slots__ = ("output", "tensor", "version")


class _Retained(_Saved):
    __slots__ = ()

    def __del__(self) -> None:
        self.tracker._release(self)


class _Group:
    """The holders of one storage that outlived their step: how many reach all of it, and
    weak references to those that reach only part of it."""

    __slots__ = ("nbytes", "parts", "whole")

    def __init__(self, nbytes: int) -> None:
        self.nbytes, self.whole, self.parts = nbytes, 0, []

    def holders(self) -> list:
        return [h for h in (r() for r in self.parts) if h is not None]


class _LiveKeys:
    """Storage keys saved for backward and alive at the last measure: `in` (every one) and
    iteration (those counted whole: a storage counted in part belongs to its holder)."""

    __slots__ = ("fresh", "partial", "retained", "sizes")

    def __init__(self, fresh: dict, retained: dict, partial: dict,
                 sizes: dict | None = None) -> None:
        self.fresh, self.retained, self.partial = fresh, retained, partial
        self.sizes = sizes or {}  # the storages counted in part: their whole bytes

    def __contains__(self, key) -> bool:
        return key in self.fresh or key in self.retained or key in self.partial

    def __iter__(self):
        partial = self.partial
        yield from self.fresh
        yield from [k for k in list(self.retained) if k not in partial]

    def counted(self, key) -> int | None:
        """The bytes of storage `key` counted as saved where only part of it is, else None."""
        return self.partial.get(key)

    def partial_storages(self) -> list[tuple[tuple, int, int]]:
        """(key, bytes counted, the storage's bytes) of the storages counted in part."""
        return [(key, n, self.sizes[key]) for key, n in self.partial.items()]


def span_of(t: Tensor) -> tuple[int, int] | None:
    """The bytes of its storage a tensor reaches, as [start, end), or None where it reaches
    all of it (the common case: not a view, or a view of everything). A wrapper subclass
    (DTensor): its inner tensor's; one with nothing inside reaches nothing."""
    t = local_tensor(t)
    if t is None:
        return (0, 0)
    st = t.untyped_storage()
    total = st.nbytes()
    size = t.element_size()
    if t.numel() == 0:
        return (0, 0)
    lo = hi = t.storage_offset()
    for n, s in zip(t.shape, t.stride(), strict=True):
        if s >= 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    lo, hi = lo * size, (hi + 1) * size
    return None if lo <= 0 and hi >= total else (lo, hi)


def reach(holders: list) -> int:
    """Bytes of a storage that `holders` each reach only part of: the union of their spans."""
    total, end = 0, -1
    for lo, hi in sorted(h.span for h in holders):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


class SavedTensorTracker:
    """Counts bytes saved for backward, live, via torch.autograd.graph.saved_tensors_hooks.

    A pack hook turns off autograd's own check that a saved tensor was not modified in place,
    so unpack does that check itself and raises the error autograd would have raised (the
    same text: inplace_error_text). Both hooks run for every saved tensor on the training
    thread: they do as little as they can, and the counting happens when a sample asks
    (measure()).
    """

    def __init__(self) -> None:
        self.param_keys: frozenset = frozenset()  # storage keys of the parameters
        self.param_ptrs: frozenset = frozenset()  # and their data pointers
        # A sharded model (FSDP): a saved leaf that requires grad, or a view of one, is a
        # parameter (the full ones FSDP gathers for a block: new storages at every gather,
        # never among the known ones), not an activation.
        self.leaf_params = False
        self._fresh: list = []  # weak references to this step's holders
        self._retained: dict = {}  # key -> _Group of holders that outlived a step
        self._retained_whole = 0  # bytes of the groups with a holder that reaches all
        self._step_keys: set = set()
        self.step_saved_bytes = 0  # bytes first saved by this step (as of the last measure)
        self._live = _LiveKeys({}, self._retained, {})

    def set_params(self, keys, ptrs, leaf_params: bool = False) -> None:
        """The parameters' storage keys and data pointers: a saved tensor in one of their
        storages, or starting at one, is checked at unpack but never counted. `leaf_params`:
        any saved leaf that requires grad (or a view of one) is a parameter too (FSDP)."""
        self.param_keys, self.param_ptrs = frozenset(keys), frozenset(ptrs)
        self.leaf_params = leaf_params

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def new_step(self) -> None:
        self.end_step()
        self._step_keys = set()
        self.step_saved_bytes = 0

    def measure(self) -> tuple[int, _LiveKeys]:
        """Bytes saved for backward and still held by autograd now, each storage once, and
        their keys. Holders packed since the last measure get their storage key, size and
        span here, in one loop, rather than one by one inside autograd's save path."""
        fresh: dict = {}
        partial: dict = {}
        alive = []
        retained, param_keys, step_keys = self._retained, self.param_keys, self._step_keys
        for ref in self._fresh:
            h = ref()
            if h is None:
                continue
            key = h.key
            if key is None:
                key, n = storage_key(h.tensor)
                if key in param_keys or not key[1]:  # a parameter is never an activation;
                    continue  # a storage without data holds nothing: stop looking
                # Only a tensor without history can be a slice of data.
                h.key, h.nbytes = key, n
                h.span = span_of(h.tensor) if h.plain else None
                if key not in step_keys:
                    step_keys.add(key)
                    self.step_saved_bytes += n if h.span is None else h.span[1] - h.span[0]
            alive.append(ref)
            group = retained.get(key)
            if group is not None and group.whole:
                continue
            if h.span is None:
                fresh[key] = h.nbytes
            else:
                partial.setdefault(key, []).append(h)
        self._fresh = alive
        total = self._retained_whole + sum(fresh.values())
        for key, group in retained.items():
            if not group.whole and key not in partial:
                partial[key] = []
        counted: dict = {}  # key -> bytes, of storages counted in part
        sizes: dict = {}
        for key, holders in partial.items():
            if key in fresh:
                continue
            group = retained.get(key)
            if group is not None:
                holders = holders + group.holders()
            if not holders:
                continue
            nbytes = holders[0].nbytes
            n = min(nbytes, reach(holders))
            total += n
            if n < nbytes:
                counted[key], sizes[key] = n, nbytes
            else:
                fresh[key] = n
        self._live = _LiveKeys(fresh, retained, counted, sizes)
        return total, self._live

    @property
    def live_bytes(self) -> int:
        return self.measure()[0]

    @property
    def live(self) -> _LiveKeys:
        """Keys of the storages saved for backward and alive at the last measure()."""
        return self._live

    @property
    def retained_bytes(self) -> int:
        """Bytes of the holders that outlived their step (a graph kept past it)."""
        total = self._retained_whole
        for group in self._retained.values():
            if not group.whole:
                holders = group.holders()
                if holders:
                    total += min(group.nbytes, reach(holders))
        return total

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
            group = retained.get(h.key)
            if group is None:
                group = retained[h.key] = _Group(h.nbytes)
            if h.span is None:
                if not group.whole:
                    self._retained_whole += group.nbytes
                group.whole += 1
            else:
                group.parts.append(ref)
        self._fresh = []
        self._live = _LiveKeys({}, retained, {})

    def _pack(self, t: Tensor):
        output = None
        kept = t
        plain = not t.requires_grad
        if not plain:
            fn = t.grad_fn
            if fn is not None and _sequence_nr is not None and \
                    fn._sequence_nr() == _sequence_nr() - 1:
                # The output of the node being built: autograd names that node. Kept as a
                # detached alias (shares the version counter), or the node would hold itself
                # through this holder.
                output = (fn.name(), t.output_nr)
                kept = t.detach()
        try:
            data = t.data_ptr()
        except RuntimeError:  # its storage freed or resized to nothing: no bytes
            data = 0
        if data in self.param_ptrs or (self.leaf_params and _is_leaf_param(t)):
            # a parameter or a view of one from its start
            p = _SavedParameter()
            p.tensor, p.version, p.output = t, t._version, output
            return p
        h = _Saved()
        h.tensor, h.version, h.key, h.tracker = kept, t._version, None, self
        h.plain, h.output = plain, output
        self._fresh.append(weakref.ref(h))
        return h

    @staticmethod
    def _unpack(saved: _Saved | _SavedParameter) -> Tensor:
        t, version = saved.tensor, saved.version
        if t._version != version:
            raise RuntimeError(inplace_error_text(t, _named(saved), t._version, version))
        return t

    def _release(self, h: _Saved) -> None:
        group = self._retained.get(h.key)
        if group is None:
            return
        if h.span is None:
            group.whole -= 1
            if group.whole == 0:
                self._retained_whole -= group.nbytes
        else:
            group.parts = [r for r in group.parts if r() is not None and r() is not h]
        if group.whole == 0 and not group.holders():
            del self._retained[h.key]


def _is_leaf_param(t: Tensor) -> bool:
    """A leaf that requires grad, or a view of one (a weight's transpose): a parameter."""
    base = t._base
    if base is None:
        base = t
    return base.requires_grad and base.grad_fn is None


def _named(saved) -> tuple[str, int] | None:
    """(grad_fn name, output number) as autograd's own check names a saved tensor: the node
    that saved an output, the current grad_fn of an input (output 0: autograd keeps no
    number for one), nothing for a leaf."""
    if saved.output is not None:
        return saved.output
    fn = saved.tensor.grad_fn  # the input as it is now: an in-place op may have given it one
    return (fn.name(), 0) if fn is not None else None


# --- autograd's in-place error, word for word -------------------------------------------------

_style: dict = {}  # anomaly mode -> (renders a node name, the hint sentence)


def inplace_error_text(t: Tensor, named: tuple[str, int] | None, now: int, expected: int
                       ) -> str:
    """The message autograd's own version check gives (torch/csrc/autograd/saved_variable
    .cpp): a pack hook turns that check off, so the tracker must raise it, and in the words
    of the torch that runs. How this torch names a node and which hint it adds are read off
    an error it makes itself, once per anomaly mode."""
    render, hint = _error_style(torch.is_anomaly_enabled())
    text = ("one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{t.type()} [{', '.join(str(n) for n in t.shape)}]]")
    if named is not None:
        text += f", which is output {named[1]} of {render(named[0])},"
    return text + f" is at version {now}; expected version {expected} instead.{hint}"


def _error_style(anomaly: bool):
    style = _style.get(anomaly)
    if style is None:
        style = _style[anomaly] = _probe_style()
    return style


def _probe_style():
    """Make autograd raise its in-place error on a tiny graph, without any saved-tensor
    hooks (thread-local: a thread of its own has none), and read how it words it."""
    out: list = []

    def make() -> None:
        x = torch.ones(2, requires_grad=True)
        y = x.sigmoid()
        z = y.sin()
        with torch.no_grad():
            y.add_(1)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # anomaly mode's own report of it
                z.sum().backward()
        except RuntimeError as e:
            out.append((str(e), y.grad_fn.name()))

    worker = threading.Thread(target=make, name="memlens-inplace-probe")
    worker.start()
    worker.join()
    if not out:
        return (lambda name: name), ""
    message, name = out[0]
    shown = message.split(", which is output 0 of ", 1)[-1].split(",", 1)[0]
    if shown != name and name.startswith(shown) and shown:
        suffix = name[len(shown):]  # e.g. "Backward0": names shown without it
        cut = suffix.rstrip("0123456789")

        def render(n: str, cut=cut) -> str:
            i = n.rfind(cut)
            return n[:i] if i > 0 else n
    else:
        def render(n: str) -> str:
            return n
    hint = message.split(" instead.", 1)[-1].split("\n", 1)[0] if " instead." in message else ""
    return render, hint

"""How memory is counted: by storage, each once (views and aliases share one), keyed by
device and data pointer; and the category codes the files use.

Two kinds of tensor hold no bytes of their own storage, and are never read through it:
- a wrapper subclass (DTensor, FSDP2's sharded parameters, their gradients and optimizer
  state): its storage is a placeholder with no data (torch raises at its data pointer); its
  bytes are its inner tensor's (a DTensor's local shard), and it is counted as that;
- a storage that is freed or resized to nothing (FSDP frees the parameters it gathered by
  `storage.resize_(0)` and allocates them again for the next use): key (device, 0) and 0
  bytes, counted as nothing.
core/native/recorder.h's storage_key_of follows the same two rules.
"""

from __future__ import annotations

from torch import Tensor

from memlens.core.records import MEMORY_CATEGORIES

CATEGORY_CODE = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
_WRAPPER_DEPTH = 4  # a wrapper of a wrapper of ...: looked into this deep at most


def inner_tensor(t: Tensor) -> Tensor | None:
    """The tensor that holds a wrapper subclass's bytes: a DTensor's local shard, else the
    first tensor its __tensor_flatten__ names (wrapped again: looked into); None where there
    is none. (A wrapper of several tensors counts as its first.)"""
    for _ in range(_WRAPPER_DEPTH):
        local = getattr(t, "_local_tensor", None)
        if not isinstance(local, Tensor):
            local = None
            flatten = getattr(t, "__tensor_flatten__", None)
            if flatten is None:
                return None
            try:
                names = flatten()[0]
            except Exception:  # a subclass of the user's: never raise through memlens
                return None
            for name in names:
                value = getattr(t, name, None)
                if isinstance(value, Tensor):
                    local = value
                    break
            if local is None:
                return None
        try:
            local.untyped_storage().data_ptr()
        except RuntimeError:  # wrapped again
            t = local
            continue
        return local
    return None


def local_tensor(t: Tensor) -> Tensor | None:
    """`t` itself where it holds its own bytes, else its inner tensor (inner_tensor)."""
    try:
        t.untyped_storage().data_ptr()
    except RuntimeError:
        return inner_tensor(t)
    return t


def storage_key(t: Tensor) -> tuple[tuple[int, int], int]:
    """(device index, -1 for CPU; storage base pointer) and the storage's bytes: one key per
    storage, not per view. A wrapper subclass: its inner tensor's; a storage with no data
    (freed, resized to 0, or a wrapper with nothing inside): pointer 0, 0 bytes."""
    st = t.untyped_storage()
    try:
        ptr = st.data_ptr()
    except RuntimeError:  # a wrapper subclass's placeholder storage
        inner = inner_tensor(t)
        if inner is None:
            return (t.get_device(), 0), 0
        return storage_key(inner)
    return (t.get_device(), ptr), (st.nbytes() if ptr else 0)


def local_storage(t: Tensor):
    """The untyped storage that holds `t`'s bytes: its own, or a wrapper's inner tensor's."""
    local = local_tensor(t)
    return (t if local is None else local).untyped_storage()


class StorageBytes:
    """A set of storages and their byte total (storages without data are left out)."""

    __slots__ = ("keys", "total")

    def __init__(self) -> None:
        self.keys: set = set()
        self.total = 0

    def add(self, t: Tensor, exclude: set | frozenset = frozenset()) -> None:
        key, n = storage_key(t)
        if key in self.keys or key in exclude or not key[1]:
            return
        self.keys.add(key)
        self.total += n

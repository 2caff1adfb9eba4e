"""How memory is counted: by storage, each once (views and aliases share one), keyed by
device and data pointer; and the category codes the files use."""

from __future__ import annotations

from torch import Tensor

from memlens.core.records import MEMORY_CATEGORIES

CATEGORY_CODE = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}


def storage_key(t: Tensor) -> tuple[tuple[int, int], int]:
    """(device index, -1 for CPU; storage base pointer) and the storage's bytes: one key per
    storage, not per view."""
    st = t.untyped_storage()
    return (t.get_device(), st.data_ptr()), st.nbytes()


class StorageBytes:
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

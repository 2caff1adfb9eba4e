"""What a run holds at its fullest, from shapes: the figures behind the memory check
(core.preflight), for a preset or a user's model file (core.model_file_preflight)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from memlens.core.units import format_bytes

# Optimizer state per parameter byte: SGD keeps its momentum buffer; Adam and AdamW keep two
# moments (their step counters are a few bytes a tensor, left out).
OPTIMIZER_STATE_FACTOR = {"sgd": 1, "adam": 2, "adamw": 2}


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes a run holds at its fullest: after backward, before the optimizer frees nothing."""

    params: int
    grads: int
    optimizer: int
    data: int
    activations: int  # what one batch's forward saves for backward

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.data + self.activations

    def text(self) -> str:
        parts = ", ".join(f"{name} {format_bytes(getattr(self, name))}" for name in
                          ("params", "grads", "optimizer", "data", "activations"))
        return f"about {format_bytes(self.total)} ({parts})"


def _nbytes(tensors: Iterable[Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def estimate_memory(parameters: list[Tensor], data: list[Tensor], forward: Callable[[], object],
                    optimizer: str = "adam") -> MemoryEstimate:
    """The estimate for a model whose `parameters` and `data` (real or meta tensors) are
    built and whose `forward()` runs one training batch."""
    saved = 0

    def pack(t: Tensor) -> Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    params = _nbytes(parameters)
    trained = _nbytes(p for p in parameters if p.requires_grad)
    return MemoryEstimate(params=params, grads=trained,
                          optimizer=trained * OPTIMIZER_STATE_FACTOR.get(optimizer, 2),
                          data=_nbytes(data), activations=saved)

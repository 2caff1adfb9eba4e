"""Figures a watch reads off a GPU without making the script wait for it.

A step's loss is known when backward is called and its grad norm before the optimizer steps,
but on CUDA both are still being computed then: `loss.item()` there waits until the GPU has
run the whole forward, with nothing of backward queued behind it, and the GPU idles while
the CPU queues backward's kernels one by one; the norm's read does the same to the optimizer
step. So on a GPU a value is copied, as the GPU gets to it, into pinned host memory, and read
at the step's end, where the GPU has the rest of the step queued: by then it is usually
there, and where it is not, the wait is for that copy (an event), never for the work queued
after it. On the CPU there is nothing to wait for: the callers read the value at once.
"""

from __future__ import annotations

import torch
from torch import Tensor


class DeviceRead:
    """Copies of some one-element tensors, made as the device gets to them, read at the first
    `values()` (see the module doc). Made for a GPU's tensors (tests make them of CPU
    tensors, copied at once, to take the same path)."""

    __slots__ = ("_copies", "_event", "_values")

    # tests: the callers (roots, norms) take the GPU's path with CPU tensors
    defer_on_cpu = False

    def __init__(self, tensors: list[Tensor]) -> None:
        device = tensors[0].device
        cuda = device.type == "cuda"
        self._copies = []
        for t in tensors:
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=cuda)
            host.copy_(t.detach(), non_blocking=cuda)
            self._copies.append(host)
        self._event = None
        if cuda:
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(device))
        self._values = None

    def values(self) -> list[float]:
        if self._values is None:
            if self._event is not None:
                self._event.synchronize()  # the copies only, not what was queued after them
            self._values = [item_value(t) for t in self._copies]
            self._copies = self._event = None
        return self._values


def item_value(t: Tensor) -> float:
    """As `t.item()` gives it, as a float (a complex loss's real part)."""
    v = t.item()
    return float(v.real if isinstance(v, complex) else v)

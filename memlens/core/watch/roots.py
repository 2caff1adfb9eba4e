"""What a watch reads of the losses a script passes to backward: a step's loss, and which
backwards train at all.

A step's loss (steps.csv `loss`, docs/watch.md) is the sum of the values its backwards were
given, GradScaler's scale taken out. So one backward gives its loss; gradient accumulation's
k backwards of `loss / k` add up to the mean of the micro-batches' losses (what Hugging
Face's Trainer logs, and what Lightning and accelerate backward); two losses backwarded
apart in one step (a GAN's D and G) add up. An optimizer that evaluates its closure several
times in one step (LBFGS) counts the first evaluation once: the loss `step(closure)`
returns. A gradient taken with respect to tensors that are no parameters (a saliency map,
a gradient penalty's `autograd.grad(d_out, inputs)`) trains nothing: not a loss, and no
step of its own. On a GPU the values are read at the step's end, not at backward, where
reading one would make the script wait for its forward (core.watch.device_reads).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from torch import Tensor, nn

from memlens.core.watch.device_reads import DeviceRead, item_value

_MUL = "MulBackward0"  # GradScaler's `loss * scale` at a backward's root
_SCALER_MIN = 2.0**8  # GradScaler's scale: a power of two, 2**16 at first


def scale_of(root: Tensor) -> Tensor | None:
    """The tensor a backward's root was multiplied by where it may be GradScaler's scale
    (`scaler.scale(loss)`: `loss * scale`, one value, no grad), else None."""
    fn = root.grad_fn
    if fn is not None and type(fn).__name__ == _MUL:
        saved = getattr(fn, "_saved_other", None)
        if isinstance(saved, Tensor) and saved.numel() == 1 and not saved.requires_grad:
            return saved
    return None


def root_loss(root: Tensor, other: Tensor | None) -> float | DeviceRead:
    """The value a backward was given, as the script's `loss.item()` reads it, less
    GradScaler's scale (`scaler.scale(loss)` multiplies by a tensor holding a power of two,
    and the loss is the one before it; `other`: scale_of(root)): on the CPU the value, on a
    GPU its read (loss_value reads it, at the step's end)."""
    if root.is_cuda or DeviceRead.defer_on_cpu:
        return DeviceRead([root] if other is None else [root, other])
    value = item_value(root)
    return value if other is None else _unscaled(value, item_value(other))


def loss_value(read: float | DeviceRead) -> float:
    """A value root_loss gave, read."""
    if isinstance(read, float):
        return read
    values = read.values()
    return values[0] if len(values) == 1 else _unscaled(*values)


def _unscaled(value: float, factor: float) -> float:
    if factor >= _SCALER_MIN and math.log2(factor).is_integer():
        return value / factor
    return value


class StepLosses:
    """The losses of the step under way (see the module doc)."""

    def __init__(self) -> None:
        self.values: list[float | DeviceRead] = []
        self._closure_at: int | None = None  # len(values) where a closure's step began
        self.scaled = False  # a backward of this step was given a loss times a scale

    def add(self, root: Tensor) -> None:
        other = scale_of(root)
        if other is not None:
            self.scaled = True
        self.values.append(root_loss(root, other))

    def closure_begins(self) -> None:
        """An optimizer step given a closure begins: its evaluations count once."""
        self._closure_at = len(self.values)

    def closure_ends(self) -> None:
        at, self._closure_at = self._closure_at, None
        if at is not None:
            del self.values[at + 1:]

    def value(self) -> float:
        """The step's loss: the sum of its backwards' values (NaN where none ran)."""
        return math.fsum(map(loss_value, self.values)) if self.values else math.nan

    def reset(self) -> None:
        self.values = []
        self._closure_at = None
        self.scaled = False


def trains(inputs, parameters: Callable[[], Iterable[Tensor]]) -> bool:
    """Whether `torch.autograd.grad(..., inputs)` takes gradients of parameters (a hand-written
    update), not only of other tensors (a saliency map's image, a gradient penalty's
    interpolates). `parameters()`: those of the models and optimizers found, asked for only
    where no input is an nn.Parameter."""
    items = [inputs] if isinstance(inputs, Tensor) else list(inputs or ())
    tensors = [t for t in items if isinstance(t, Tensor)]
    if not tensors or any(isinstance(t, nn.Parameter) for t in tensors):
        return True
    known = {id(p) for p in parameters()}
    return any(id(t) in known for t in tensors)


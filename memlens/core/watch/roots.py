"""What a watch reads of the losses a script passes to backward."""

from __future__ import annotations

import math

from torch import Tensor

# Nodes of `loss / k`, `loss * (1 / k)` and GradScaler's `loss * scale` at a backward's root
_DIV, _MUL = "DivBackward0", "MulBackward0"
_SCALER_MIN = 2.0**8  # GradScaler's scale: a power of two, 2**16 at first


def root_loss(root: Tensor) -> tuple[float, float | None]:
    """(the loss as the script's `loss.item()` reads it, k) for a backward's root.

    GradScaler's `scaler.scale(loss)` multiplies by its scale, a tensor holding a power of
    two: the loss is the one before it. k is the constant a root was divided by (`loss / k`,
    or multiplied by 1 / k): gradient accumulation's, when a step makes k such backwards
    (step_loss decides); None for any other root."""
    value = _item(root)
    fn = root.grad_fn
    name = type(fn).__name__ if fn is not None else ""
    if name not in (_DIV, _MUL):
        return value, None
    other = getattr(fn, "_saved_other", None)
    factor = _constant(other)
    if factor is None or factor == 0:
        return value, None
    if name == _MUL and isinstance(other, Tensor) and factor >= _SCALER_MIN \
            and math.log2(factor).is_integer():
        return value / factor, None  # GradScaler's
    k = factor if name == _DIV else 1.0 / factor
    return value, k


def step_loss(roots: list[tuple[float, float | None]]) -> float:
    """A step's loss from its backwards' root_loss: the last one's, undivided where the step
    made k backwards each divided by k (gradient accumulation, as Lightning and Hugging Face
    do it: they log the loss before the division)."""
    if not roots:
        return math.nan
    value = roots[-1][0]
    n = len(roots)
    if n > 1 and all(k is not None and abs(k - n) < 1e-6 for _, k in roots):
        return value * n
    return value


def summed_loss(roots: list[tuple[float, float | None]]) -> float:
    """A step's loss as the sum of its backwards' roots: Hugging Face's Trainer, whose
    micro-batch losses are each their share of the accumulated batch's (divided by k, or
    normalized by the batch's token count), and which logs their sum."""
    return sum(v for v, _ in roots) if roots else math.nan


def _item(t: Tensor) -> float:
    v = t.item()
    return float(v.real if isinstance(v, complex) else v)


def _constant(other) -> float | None:
    """A divisor or factor that is a number, or a tensor of one value outside the graph."""
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        return float(other)
    if isinstance(other, Tensor) and other.numel() == 1 and not other.requires_grad:
        return float(other.item())
    return None

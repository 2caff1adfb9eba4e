"""amp=bf16|fp16 on a watched script: its models' forwards, and the loss computed from them
in the step, under torch.autocast; for fp16 on CUDA a GradScaler around backward and the
optimizer step.

The autocast is opened at a model's forward and stays open until the step's next backward,
zero_grad or optimizer step, or its end (a span): what the script computes from the outputs
in between (a functional loss, `F.cross_entropy(out, y)`) runs under it as it would inside
the script's own `with torch.autocast(...)` around forward and loss. A forward already
under the script's own autocast is left as the script runs it (the span never interleaves
with the script's context: it is not opened inside one).

The scaler (CUDA fp16 only; CPU fp16 runs as CPU autocast without one, as torch's CPU
autocast has no scaler): `backward(loss)` gets `scaler.scale(loss)`; before the first clip
or optimizer step of an optimizer in the step its gradients are unscaled
(`scaler.unscale_`), and where any is not finite its gradients are set to None, so the
optimizer skips the step as `scaler.step` would; `scaler.update()` at the step's end.
`torch.autograd.grad` calls (a hand-written update gets its gradients back) are never
scaled.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
NAMES = {v: k for k, v in DTYPES.items()}


def autocast_of(device_type: str) -> str:
    """"off" or the dtype name of the autocast the thread runs under for `device_type`."""
    if not torch.is_autocast_enabled(device_type):
        return "off"
    dtype = torch.get_autocast_dtype(device_type)
    return NAMES.get(dtype, str(dtype).removeprefix("torch."))


class AmpOverride:
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self._span: Any = None  # the torch.autocast entered by a forward, until closed
        self.scaler: Any = None  # CUDA fp16: a GradScaler, made at the first CUDA forward
        self._unscaled: set[int] = set()  # optimizers unscaled this step

    @property
    def open(self) -> bool:
        return self._span is not None

    def open_span(self, device_type: str) -> None:
        """At a model's forward that is not under the script's own autocast."""
        if self._span is not None:
            return
        if self.dtype == "fp16" and device_type == "cuda" and self.scaler is None:
            self.scaler = torch.amp.GradScaler("cuda")
        span = torch.autocast(device_type, dtype=DTYPES[self.dtype])
        span.__enter__()
        self._span = span

    def close_span(self) -> None:
        span, self._span = self._span, None
        if span is not None:
            span.__exit__(None, None, None)

    # --- the scaler (CUDA fp16) -------------------------------------------------------------
    def scaled(self, call, tensors, returns_grads: bool):
        """The backward call, with its loss scaled where a scaler runs."""
        if (self.scaler is None or returns_grads or not isinstance(tensors, Tensor)
                or tensors.device.type != "cuda" or tensors.numel() != 1):
            return call
        loss = self.scaler.scale(tensors)
        return lambda: call(loss)

    def unscale(self, opt) -> None:
        """Before `opt`'s first clip or step in the step: its gradients unscaled, and set to
        None where any is not finite (the step is skipped, as GradScaler.step skips it)."""
        if self.scaler is None or id(opt) in self._unscaled:
            return
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if not grads or grads[0].device.type != "cuda":
            return
        self._unscaled.add(id(opt))
        self.scaler.unscale_(opt)
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            for g in opt.param_groups:
                for p in g["params"]:
                    p.grad = None

    def end_step(self) -> None:
        self.close_span()
        if self.scaler is not None and self._unscaled:
            self.scaler.update()
        self._unscaled = set()

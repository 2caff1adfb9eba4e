"""The process-wide hooks a watch installs on torch, and their exact removal.

A thin wrapper on `nn.Module.__call__` finds the models (any root module call), optimizer
step hooks find the optimizers, and thin wrappers on `Tensor.backward`,
`torch.autograd.backward`, `torch.autograd.grad` and the two `zero_grad`s mark where those
phases start and end; one on `torch.nn.utils.clip_grad_norm_` (and on
`clip_grads_with_norm_`, the clip alone) takes the grad norm before it clips. Where a
sharded model is found, FSDP's reshard is wrapped too (core.watch.sharding).
Every wrapper calls the original with the same arguments and returns (or raises) what it
returned: the user's results are never touched.

Why `__call__` and not torch's global module hooks: with a global hook set, every module
call (about 40 a step in a small GAN, hundreds in a transformer) leaves `nn.Module`'s fast
path for the one that runs hooks, which cost a small model's step several percent before
memlens did anything. The wrapper costs a nested call one Python frame and one attribute check, and
leaves the module's own hooks, its fast path and `Module.compile()` as they were.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
from torch.optim import optimizer as _optimizer

from memlens.core.watch.sharding import fsdp_patches


class TorchHooks:
    """Installs the listener's callbacks; `remove()` puts torch back as it was.

    The listener has: root_call(original, module, args, kwargs) (a module called outside
    any other's forward; it must call `original(module, *args, **kwargs)` and return what it
    returns), the flags `in_forward` (a root call is running: nested calls go straight
    through), `broken`, `backward_depth` (backwards running: a nested one, with no
    `interventions`, goes straight through), optimizer_pre(opt, args, kwargs),
    optimizer_post(opt, args, kwargs) (torch's step hooks, registered as they are),
    optimizer_created(opt), backward(call, tensors, inputs=None, returns_grads=False) where
    `call()` runs the original (`call(t)` with `t` for its first tensor, a loss scaled by
    AMP's scaler; `inputs`: what torch.autograd.grad takes the gradients of, where given as
    a tensor or a sequence), zero_grad(original, owner, args, kwargs), before_clip(params)
    (clip_grad_norm_ is about to clip them), and _sample_inside() (FSDP is about to free
    the parameters it gathered for a block).
    """

    def __init__(self, listener: Any) -> None:
        self.listener = listener
        self._handles: list[Any] = []
        self._patched: list[tuple[Any, str, Any]] = []
        self._sharding = None  # the models' sharding now (core.recorder.sharded)

    def install(self) -> None:
        lst = self.listener
        self._handles = [
            _optimizer.register_optimizer_step_pre_hook(lst.optimizer_pre),
            _optimizer.register_optimizer_step_post_hook(lst.optimizer_post),
        ]
        self._patch(torch.nn.Module, "__call__",
                    self._wrap_module_call(torch.nn.Module.__dict__["__call__"]))
        self._patch(torch.Tensor, "backward", self._wrap_backward(torch.Tensor.backward))
        self._patch(torch.autograd, "backward",
                    self._wrap_backward(torch.autograd.backward))
        self._patch(torch.autograd, "grad", self._wrap_grad(torch.autograd.grad))
        self._patch(torch.optim.Optimizer, "zero_grad",
                    self._wrap_zero_grad(torch.optim.Optimizer.zero_grad))
        self._patch(torch.nn.Module, "zero_grad", self._wrap_zero_grad(torch.nn.Module.zero_grad))
        self._patch(torch.optim.Optimizer, "__init__",
                    self._wrap_init(torch.optim.Optimizer.__init__))
        # clip_grads_with_norm_: the clip of a norm taken apart (get_total_norm), as
        # accelerate does since 1.x; the gradients are still the unclipped ones there
        for name in ("clip_grad_norm_", "clip_grads_with_norm_"):
            if name in torch.nn.utils.__dict__:
                self._patch(torch.nn.utils, name, self._wrap_clip(torch.nn.utils.__dict__[name]))

    def watch_sharding(self, sharding) -> None:
        """Wrap FSDP's reshard for `sharding` (core.recorder.sharded.Sharding, or None; the
        newest one is refreshed after each gather), once, removed with the rest."""
        had, self._sharding = self._sharding, sharding
        if sharding is None or had is not None or not self._patched:
            return
        for owner, name, new in fsdp_patches(sharding.kind, self.listener._sample_inside,
                                             self._refresh_sharding):
            self._patch(owner, name, new)

    def _refresh_sharding(self) -> None:
        sharding = self._sharding
        if sharding is not None and not sharding.complete:
            with contextlib.suppress(Exception):  # never into FSDP's own call
                sharding.refresh()

    def _patch(self, owner: Any, name: str, new: Any) -> None:
        self._patched.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, new)

    def _wrap_module_call(self, original):
        lst = self.listener

        @functools.wraps(original)
        def __call__(self_, *args, **kwargs):
            if lst.in_forward or lst.broken:  # inside a root call's forward: straight through
                return original(self_, *args, **kwargs)
            return lst.root_call(original, self_, args, kwargs)

        return __call__

    def _wrap_backward(self, original):
        lst = self.listener

        @functools.wraps(original)
        def backward(*args, **kwargs):
            if lst.backward_depth and lst.interventions is None:
                # inside a backward recorded already (Tensor.backward calls this one)
                return original(*args, **kwargs)
            tensors = args[0] if args else kwargs.get("tensors", kwargs.get("self"))

            def call(*first):
                if first and args:  # the loss given in its place (GradScaler's scale)
                    return original(*first, *args[1:], **kwargs)
                return original(*args, **kwargs)

            return lst.backward(call, tensors)

        return backward

    def _wrap_grad(self, original):
        """torch.autograd.grad(loss, params) is a backward too (a hand-written update);
        inside a model's forward (a derivative the model computes) it is part of that."""
        lst = self.listener

        @functools.wraps(original)
        def grad(*args, **kwargs):
            if lst.in_forward or lst.broken:
                return original(*args, **kwargs)
            outputs = args[0] if args else kwargs.get("outputs")
            inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
            if not isinstance(inputs, (torch.Tensor, list, tuple)):
                inputs = None  # a generator is the original's to read: taken as training
            return lst.backward(lambda: original(*args, **kwargs), outputs, inputs,
                                returns_grads=True)

        return grad

    def _wrap_zero_grad(self, original):
        lst = self.listener

        @functools.wraps(original)
        def zero_grad(self_, *args, **kwargs):
            return lst.zero_grad(original, self_, args, kwargs)

        return zero_grad

    def _wrap_init(self, original):
        lst = self.listener

        @functools.wraps(original)
        def __init__(self_, *args, **kwargs):
            original(self_, *args, **kwargs)
            lst.optimizer_created(self_)

        return __init__

    def _wrap_clip(self, original):
        """clip_grad_norm_ (a plain loop's, Lightning's, accelerate's): the gradients are
        final just before it, and their norm is the one frameworks log."""
        lst = self.listener

        @functools.wraps(original)
        def clip(parameters, *args, **kwargs):
            if lst.broken:
                return original(parameters, *args, **kwargs)
            # a generator is read once: the same parameters, as a list, for both
            params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            lst.before_clip(params)
            return original(params, *args, **kwargs)

        return clip

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched = []
        self._sharding = None

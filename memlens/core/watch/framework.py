"""What a framework's callback tells a watch (memlens.integrations: Lightning, Hugging Face)
and the clip and FSDP hooks' calls: where steps end, where the gradients are final, how a
step's loss adds up, its evaluation loss, the model and optimizers it knows before the first
step, the moments FSDP frees what it gathered.

A part of `Watch` (its base class), kept apart because a plain script never calls it; it
uses the session's state (`seen`, `norms`, `_guard`, the step's bookkeeping).
"""

from __future__ import annotations

import contextlib
import threading

import torch
from torch import nn

from memlens.core.watch.meta import optimizer_site
from memlens.core.watch.roots import summed_loss


class FrameworkCalls:
    def steps_by_hand(self) -> None:
        """From now on only `step()` ends steps (a framework's callback marks them), with
        no boundary here."""
        self._manual_steps = True

    def grads_final(self, optimizer) -> None:
        """The gradients `optimizer` is about to step with are final here, before any
        clipping (a framework's hook: Lightning's on_before_optimizer_step, inside its
        closure): the step's grad norm and diagnosis 3's check are taken now, not at the
        step."""
        if not self.broken:
            self._guard(self._grads_final, optimizer)

    def _grads_final(self, optimizer) -> None:
        self.seen.add_optimizer(optimizer, active=True)
        if self.seen.probe_stale:
            self._ensure_probe()
        if id(optimizer) not in self._norm_taken:
            self._norm_taken.add(id(optimizer))
            self.norms.measure(optimizer, optimizer_site)

    def losses_add_up(self) -> None:
        """From now on a step's loss is the sum of its backwards' losses (Hugging Face's
        Trainer: each micro-batch's is its share of the accumulated batch's)."""
        self._step_loss = summed_loss

    def before_clip(self, params: list) -> None:
        """clip_grad_norm_ is about to clip `params` (TorchHooks): for each optimizer that
        steps them the gradients are final, and the norm is taken before the clip."""
        self._guard(self._before_clip, params)

    def _before_clip(self, params: list) -> None:
        ids = {id(p) for p in params}
        for opt in self.seen.steppable_optimizers():
            if any(id(p) in ids for g in opt.param_groups for p in g["params"][:1]):
                self._grads_final(opt)

    def _sample_inside(self) -> None:
        """FSDP is about to free a block's gathered parameters (TorchHooks, core.watch.sharding):
        the memory at its height, sampled inside the phase under way."""
        if threading.get_ident() == self._thread:
            self._guard(self.phases.sample_inside, self.step_index)

    def note_eval_loss(self, value: float) -> None:
        """The evaluation loss a framework computed in this step (steps.csv eval_loss)."""
        with contextlib.suppress(TypeError, ValueError):
            self._eval_loss = float(value)

    def track(self, model: nn.Module | None = None, name: str | None = None,
              optimizers=()) -> None:
        """What a framework knows before the first step: its model, named (the
        LightningModule's class; a model already found keeps its name), and its optimizers
        (unwrapped: the torch optimizers that step)."""
        if model is not None:
            self._guard(self.seen.add_model, model, name, False)
        for opt in optimizers:
            if isinstance(opt, torch.optim.Optimizer):
                self._guard(self.seen.add_optimizer, opt, False)

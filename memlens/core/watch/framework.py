"""What a framework's callback tells a watch (memlens.integrations: Lightning, Hugging Face)
and the clip and FSDP hooks' calls: where steps end, where the gradients are final, its
evaluation loss, the rank it runs as, the model and optimizers it knows before the first
step, the moments FSDP frees what it gathered.

A part of `Watch` (its base class), kept apart because a plain script never calls it; it
uses the session's state (`seen`, `norms`, `_guard`, the step's bookkeeping).
"""

from __future__ import annotations

import contextlib
import threading

import torch
from torch import nn

from memlens.core.recorder.output import choose_folder
from memlens.core.watch.meta import error_text, header, optimizer_site
from memlens.core.watch.toggles import parse_changes


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
        if self.interventions is not None:  # amp's scaler: unscaled before a clip
            self.interventions.before_step(optimizer)
        self.seen.add_optimizer(optimizer, active=True)
        if self.seen.probe_stale:
            self.measure.ensure(self.step_index)
        if id(optimizer) not in self._norm_taken:
            self._norm_taken.add(id(optimizer))
            self.norms.measure(optimizer, optimizer_site)

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
            self._guard(self.steps.sample_inside)

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

    def add_changes(self, at) -> None:
        """Technique changes ("5:amp=bf16") from a script or callback that joins this watch
        (memlens.watch(at=...) under main.py watch): added to its own where it has
        toggles, else said to be ignored (its history for their effects is not kept)."""
        changes = parse_changes(at)  # ConfigError for a bad one, as when not joining
        if not changes:
            return
        if self.interventions is None:
            self.log.note("info", "toggles ignored",
                          f"at={[c.text() for c in changes]} ignored: this run is recorded "
                          "by main.py watch without toggles; give them to its --at",
                          once=True)
            return
        self.interventions.add(changes)

    def take_rank(self, rank: int, world_size: int) -> None:
        """This process is rank `rank` of `world_size`: the run, as written so far, moves
        into `rank<N>` of its job's folder (the one it was given, where it was alone)."""
        if (rank, world_size) == (self.rank, self.world_size) or world_size <= 1 or self.broken:
            return
        job = self.folder if self.world_size <= 1 else self.folder.parent
        try:
            folder = choose_folder(job / f"rank{rank}", "watch")
            self.writer.move_to(folder)
        except Exception as exc:  # the run stays where it is
            self.log.note("info", "rank folder", f"memlens could not move the run into "
                          f"{job / f'rank{rank}'}: {error_text(exc)}; it stays in {self.folder}")
            return
        self.folder, self.rank, self.world_size = folder, rank, world_size
        self.sink.on_start(header(self))

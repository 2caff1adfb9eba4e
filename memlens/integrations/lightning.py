"""`MemlensCallback` for PyTorch Lightning: `Trainer(callbacks=[MemlensCallback()])` records
the fit into a run folder under `trainer.log_dir` (docs/frameworks.md).

Imports Lightning (`lightning`, else `pytorch_lightning`) when imported itself."""

from __future__ import annotations

import sys
from pathlib import Path

from memlens.core.watch.toggles import parse_changes
from memlens.integrations.recording import Recording, fresh_folder, import_framework

_pl = import_framework("lightning.pytorch", "pytorch_lightning", install="lightning")

# What a LightningModule logs its validation loss as, in the order looked for; else the
# first metric whose name starts with "val" and holds "loss".
EVAL_KEYS = ("val_loss", "valid_loss", "validation_loss", "eval_loss", "val/loss")


class MemlensCallback(_pl.Callback):
    """Record a Lightning fit with memlens.

    out: the run folder (default: `memlens` under `trainer.log_dir`, `memlens-2`... where
        one already holds a run; per rank `rank<N>` inside it under DDP).
    eval_key: the `callback_metrics` key of the validation loss (default: EVAL_KEYS).
    precise, capture_every, at: as for `memlens.watch` (`at`: technique changes,
        "STEP:KEY=VALUE", at Lightning's global steps).
    log: log memlens's figures of each step (`memlens/peak_bytes`, `memlens/step_ms`,
        `memlens/saved_bytes`, `memlens/retained_bytes`) with `pl_module.log`, to the
        Trainer's loggers.

    A step is a training batch after which `trainer.global_step` has moved: accumulated
    micro-batches are one step, and so is a manual-optimization batch that steps two
    optimizers. The sanity check and each validation run are phases of their own, steps.csv's
    eval_loss is the validation loss Lightning computed, and the grad norm is taken at
    `on_before_optimizer_step`, before gradient clipping. Under `main.py watch` it joins
    that recording.
    """

    def __init__(self, out: str | Path | None = None, *, eval_key: str | None = None,
                 precise: bool = False, capture_every: int = 0, at=(),
                 log: bool = True) -> None:
        super().__init__()
        self.out, self.eval_key, self.log = out, eval_key, log
        self.precise, self.capture_every = precise, capture_every
        self.at = parse_changes(at)  # technique changes: a bad one raises here
        self.recording = Recording()

    @property
    def watch(self):
        """The Watch recording the fit (None outside it)."""
        return self.recording.watch

    def on_fit_start(self, trainer, pl_module) -> None:
        out = self.out
        if out is None and trainer.log_dir is not None:
            out = fresh_folder(trainer.log_dir)
        watch = self.recording.begin(
            out=out, script=sys.argv[0] if sys.argv else None,
            rank=(trainer.global_rank, trainer.world_size), precise=self.precise,
            capture_every=self.capture_every, at=self.at)
        watch.track(pl_module, type(pl_module).__name__,
                    [getattr(o, "optimizer", o) for o in trainer.optimizers])

    def on_sanity_check_start(self, trainer, pl_module) -> None:
        self.recording.phase_begin("sanity check")

    def on_sanity_check_end(self, trainer, pl_module) -> None:
        self.recording.phase_end()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.recording.boundary(trainer.global_step)  # the step before has stepped

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        figures = self.recording.figures() if self.log else {}
        if figures:  # the last step recorded (a step's row ends at the next batch's start)
            pl_module.log_dict(figures, on_step=True, on_epoch=False, prog_bar=False,
                               batch_size=1)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        watch = self.recording.watch
        if watch is not None:  # before Lightning clips: the norm it logs as grad_norm
            watch.grads_final(getattr(optimizer, "optimizer", optimizer))

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.recording.phase_begin("validation")

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        self.recording.phase_end()
        self.recording.eval_loss(self._eval_loss(trainer.callback_metrics))

    def _eval_loss(self, metrics):
        if self.eval_key is not None:
            return metrics.get(self.eval_key)
        for key in EVAL_KEYS:
            if key in metrics:
                return metrics[key]
        for key, value in metrics.items():
            if key.startswith("val") and "loss" in key:
                return value
        return None

    def on_fit_end(self, trainer, pl_module) -> None:
        self.recording.end()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.recording.end(error=exception)

"""`MemlensCallback` for Hugging Face transformers: `Trainer(..., callbacks=[MemlensCallback()])`
records the training into a run folder under `args.output_dir` (docs/frameworks.md).

Imports transformers when imported itself."""

from __future__ import annotations

import sys
from pathlib import Path

from memlens.core.watch.toggles import parse_changes
from memlens.integrations.recording import Recording, fresh_folder, import_framework

_tf = import_framework("transformers", install="transformers")


class MemlensCallback(_tf.TrainerCallback):
    """Record a Hugging Face `Trainer.train()` with memlens.

    out: the run folder (default: `memlens` under `args.output_dir`, `memlens-2`... where
        one already holds a run; per process `rank<N>` inside it when distributed).
    precise, capture_every, at: as for `memlens.watch` (`at`: technique changes,
        "STEP:KEY=VALUE", at the Trainer's global steps).
    log: add memlens's figures of the last step recorded (`memlens/peak_bytes`,
        `memlens/step_ms`, `memlens/saved_bytes`, `memlens/retained_bytes`) to what the
        Trainer logs (its `on_log`), for its reporters (TensorBoard, W&B, the console).

    A step is one of `state.global_step` (accumulated micro-batches are one step; an
    evaluation after it is in its row, with its `eval_loss`); the model and the optimizer
    are those the Trainer passes (accelerate's `AcceleratedOptimizer` unwrapped). Under
    `main.py watch` it joins that recording.
    """

    def __init__(self, out: str | Path | None = None, *, precise: bool = False,
                 capture_every: int = 0, at=(), log: bool = True) -> None:
        self.out, self.precise, self.capture_every, self.log = out, precise, capture_every, log
        self.at = parse_changes(at)  # technique changes: a bad one raises here
        self.recording = Recording()

    @property
    def watch(self):
        """The Watch recording the training (None outside it)."""
        return self.recording.watch

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        out = self.out
        if out is None and args.output_dir:
            out = fresh_folder(args.output_dir)
        watch = self.recording.begin(
            out=out, script=sys.argv[0] if sys.argv else None,
            rank=(args.process_index, args.world_size), precise=self.precise,
            capture_every=self.capture_every, at=self.at)
        if self.log:
            first_in(_callback_handler(), self)
        # accelerate's AcceleratedOptimizer steps the torch optimizer it wraps
        inner = getattr(optimizer, "optimizer", optimizer)
        watch.track(model, type(model).__name__ if model is not None else None,
                    [inner] if inner is not None else [])

    def on_step_begin(self, args, state, control, **kwargs):
        # the step before ends where the next begins: an evaluation after a step is that
        # step's (its eval_loss in its row), as for the lab's own loop
        self.recording.boundary(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.log and isinstance(logs, dict):
            logs.update(self.recording.figures())

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics:
            self.recording.eval_loss(metrics.get("eval_loss"))

    def on_train_end(self, args, state, control, **kwargs):
        self.recording.end()


def _callback_handler():
    """The CallbackHandler calling this callback now (its frame's `self`), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, _tf.trainer_callback.CallbackHandler):
            return candidate
        frame = frame.f_back
    return None


def first_in(handler, callback) -> None:
    """Put `callback` first among the handler's, so that what it adds to a log reaches the
    reporters after it. Safe while the handler runs this very callback's event: the
    callbacks after it keep their places in the list."""
    if handler is not None and callback in handler.callbacks:
        handler.callbacks.remove(callback)
        handler.callbacks.insert(0, callback)

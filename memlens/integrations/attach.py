"""`main.py watch` on an unmodified Lightning or Hugging Face script: at the first call of a
model, the framework's MemlensCallback joins the recording, so the rows are those the
callback gives when the script adds it itself (docs/frameworks.md).

A framework is looked for only where the script has imported it (sys.modules): memlens
imports neither."""

from __future__ import annotations

import sys

from torch import nn

from memlens.core.watch.diagnoses import frame_locals


def attach_framework_callback(model: nn.Module) -> None:
    """Watch.model_found: add and start the callback of the framework that trains `model`,
    if one does."""
    if _lightning_trainer(model) is not None:
        _attach_lightning(model)
    elif "transformers" in sys.modules:
        trainer = _hf_trainer()
        if trainer is not None:
            _attach_transformers(trainer)


def _lightning_module_types() -> tuple[type, ...]:
    types = []
    for name in ("lightning.pytorch", "pytorch_lightning"):
        mod = sys.modules.get(name)
        if mod is not None and hasattr(mod, "LightningModule"):
            types.append(mod.LightningModule)
    return tuple(types)


def _lightning_trainer(model: nn.Module):
    types = _lightning_module_types()
    if not types or not isinstance(model, types):
        return None
    return model.__dict__.get("_trainer")


def _attach_lightning(model) -> None:
    from memlens.integrations.lightning import MemlensCallback

    trainer = model.__dict__["_trainer"]
    if any(isinstance(c, MemlensCallback) for c in trainer.callbacks):
        return  # the script added one itself
    callback = MemlensCallback()
    trainer.callbacks.append(callback)  # Lightning reads the list at every hook call
    callback.on_fit_start(trainer, model)


def _hf_trainer():
    """The Trainer whose method called the model (its frames hold it as `self`)."""
    base = getattr(sys.modules["transformers"], "Trainer", None)
    if base is None:
        return None
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame_locals(frame).get("self")
        if isinstance(candidate, base):
            return candidate
        frame = frame.f_back
    return None


def _attach_transformers(trainer) -> None:
    from memlens.integrations.transformers import MemlensCallback

    handler = trainer.callback_handler
    if any(isinstance(c, MemlensCallback) for c in handler.callbacks):
        return
    callback = MemlensCallback()
    handler.add_callback(callback)
    callback.on_train_begin(trainer.args, trainer.state, trainer.control,
                            model=trainer.model, optimizer=trainer.optimizer)

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
    if one does. Lightning's is found from the Trainer on the stack, so a LightningModule
    that calls only its parts (`self.net(x)`, a GAN's `self.G` and `self.D`) or one that a
    DDP wrapper calls is found as one called itself."""
    trainer = _lightning_trainer(model) or _lightning_trainer_on_stack()
    if trainer is not None:
        _attach_lightning(trainer)
    elif "transformers" in sys.modules:
        trainer = _hf_trainer()
        if trainer is not None:
            _attach_transformers(trainer)


def _lightning_types(name: str) -> tuple[type, ...]:
    types = []
    for module in ("lightning.pytorch", "pytorch_lightning"):
        mod = sys.modules.get(module)
        if mod is not None and hasattr(mod, name):
            types.append(getattr(mod, name))
    return tuple(types)


def _lightning_trainer(model: nn.Module):
    types = _lightning_types("LightningModule")
    if not types or not isinstance(model, types):
        return None
    return model.__dict__.get("_trainer")


def _lightning_trainer_on_stack():
    """The Lightning Trainer whose fit is running: a `trainer` (or a Trainer's `self`) in
    the frames that called the model."""
    types = _lightning_types("Trainer")
    return _on_stack(types, ("trainer", "self")) if types else None


def _attach_lightning(trainer) -> None:
    from memlens.integrations.lightning import MemlensCallback

    module = trainer.lightning_module
    if module is None or any(isinstance(c, MemlensCallback) for c in trainer.callbacks):
        return  # the script added one itself
    callback = MemlensCallback()
    trainer.callbacks.append(callback)  # Lightning reads the list at every hook call
    callback.on_fit_start(trainer, module)
    if trainer.sanity_checking:  # attached inside it: the sanity check is a phase still
        callback.on_sanity_check_start(trainer, module)


def _hf_trainer():
    """The Trainer whose method called the model (its frames hold it as `self`)."""
    base = getattr(sys.modules["transformers"], "Trainer", None)
    return _on_stack(base, ("self",)) if base is not None else None


def _on_stack(types: type | tuple[type, ...], names: tuple[str, ...]):
    """The first local of `names` (in that order within a frame) that is one of `types`, in
    the frames from the caller's caller outwards."""
    frame = sys._getframe(2)
    while frame is not None:
        local = frame_locals(frame)
        for name in names:
            candidate = local.get(name)
            if isinstance(candidate, types):
                return candidate
        frame = frame.f_back
    return None


def _attach_transformers(trainer) -> None:
    from memlens.integrations.transformers import MemlensCallback, first_in

    handler = trainer.callback_handler
    if any(isinstance(c, MemlensCallback) for c in handler.callbacks):
        return
    callback = MemlensCallback()
    handler.add_callback(callback)
    first_in(handler, callback)  # what it adds to a log reaches the reporters after it
    callback.on_train_begin(trainer.args, trainer.state, trainer.control,
                            model=trainer.model, optimizer=trainer.optimizer)

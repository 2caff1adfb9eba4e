"""A loaded model file behind the Preset interface the loop drives, as the built-ins are.

The file gives the model, the batches, the loss and (optionally) carried state; memlens
carries that state between batches as a truncated-BPTT loop does: detach_state detaches
it, and with AMP off its floating tensors are cast back to the model's dtype (autocast may
have left them in half precision). Each batch and result is checked against the contract,
so a wrong type is named when it appears, not as a confusing error further on.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memlens.core.config import RunConfig, TechniqueToggles
from memlens.core.model_file import (
    ModelFileError,
    load_model_file,
    read_file_batch_dim,
    read_file_shape,
    user_error,
)
from memlens.core.model_file_batch import find_batch_dim, samples_in, targets_match
from memlens.core.presets import ForwardResult, Preset


def map_tensors(state: Any, fn) -> Any:
    """`state` with fn applied to every tensor in it (tensors, tuples, lists, dicts)."""
    if isinstance(state, Tensor):
        return fn(state)
    if isinstance(state, tuple | list):
        return type(state)(map_tensors(s, fn) for s in state)
    if isinstance(state, dict):
        return {k: map_tensors(v, fn) for k, v in state.items()}
    return state


def state_tensors(state: Any) -> list[Tensor]:
    out: list[Tensor] = []
    map_tensors(state, out.append)
    return out


class ModelFilePreset(Preset):
    name = "model file"
    defaults = {"batch_size": 0, "width": 0}

    def __init__(self, config: RunConfig, device: torch.device) -> None:
        self.file = load_model_file(config.preset)
        super().__init__(config, device)
        path = self.file.path
        try:
            model = self.file.build_model()
        except (Exception, SystemExit) as exc:
            raise user_error(path, exc, "build_model()") from None
        if not isinstance(model, nn.Module):
            raise ModelFileError(f"{path}: build_model() returned {type(model).__name__}, not a "
                                 "torch.nn.Module; return the model, e.g. `return Net()`")
        self.models["model"] = model
        self.carries_state = self.file.init_state is not None
        self.state: Any = None
        self._state_from_autocast = False
        self._declared_dim = read_file_batch_dim(str(path))
        self.batch_dim: int | None = None  # found from batch 0
        # Batch 0 is made now, once, and used by step 0: a wrong batch is named before the
        # run starts, and make_batch is called exactly as often as a plain loop calls it.
        try:
            self._first: tuple | None = self._make_batch(0, "train")
        except ModelFileError:
            raise
        except (Exception, SystemExit) as exc:
            raise user_error(path, exc, "make_batch(0, 'train')") from None
        if not self.batch_size:
            self.batch_size = samples_in(self._first[0][0], self.batch_dim)
        self._finish_build()

    # --- the file's functions, checked ----------------------------------------------------
    def _make_batch(self, step: int, split: str) -> tuple:
        f = self.file
        if f.batch_size_arg and self.batch_size:
            batch = f.make_batch(step, split, batch_size=self.batch_size)
        else:
            batch = f.make_batch(step, split)
        where = f"{f.path}: make_batch({step}, {split!r})"
        if not isinstance(batch, tuple | list) or len(batch) != 2:
            what = (f"a {type(batch).__name__} of {len(batch)}"
                    if isinstance(batch, tuple | list) else f"a {type(batch).__name__}")
            raise ModelFileError(f"{where} returned {what}; it must return a pair "
                                 "(inputs, targets)")
        inputs, targets = batch
        parts = inputs if isinstance(inputs, tuple | list) else (inputs,)
        if not parts or not all(isinstance(t, Tensor) for t in parts):
            raise ModelFileError(f"{where}: inputs must be a tensor or a tuple of tensors, "
                                 f"not {_describe(inputs)}")
        if not isinstance(targets, Tensor):
            raise ModelFileError(f"{where}: targets must be a tensor, not {_describe(targets)}")
        if self.batch_dim is None:
            self.batch_dim = find_batch_dim(parts[0], declared=self._declared_dim,
                                            batch_size=self._known_batch_size(),
                                            model=self.models.get("model"), where=where,
                                            follows=f.batch_size_arg and bool(self.batch_size))
        dim = self.batch_dim
        n_in = samples_in(parts[0], dim)
        if not targets_match(targets, dim, n_in):
            raise ModelFileError(
                f"{where}: inputs hold {n_in} samples but targets {samples_in(targets, dim)} "
                f"(the batch is dimension {dim} of the inputs; targets hold it in the same "
                "dimension or in their first)")
        if not f.batch_size_arg and self.config.batch_size and n_in != self.config.batch_size:
            raise ModelFileError(
                f"{where} made a batch of {n_in} (dimension {dim} of inputs of shape "
                f"{tuple(parts[0].shape)}), but batch_size={self.config.batch_size} is set; "
                "give make_batch a batch_size parameter to follow the setting, set "
                "batch_size=0 (the file's own size), or declare the batch dimension: "
                "CONFIG = {'batch_dim': 1, ...} for sequence-first inputs")
        dev = self.device
        return tuple(t.to(dev) for t in parts), targets.to(dev)

    def _known_batch_size(self) -> int:
        """The batch size batch 0 should have, where the settings or the source say: the
        setting (CONFIG's), else make_batch's default batch_size; 0: the file's own."""
        if self.config.batch_size:
            return self.config.batch_size
        if self.file.batch_size_arg:
            return read_file_shape(str(self.file.path)).batch_size_default or 0
        return 0

    def _batch(self, step: int, split: str) -> tuple:
        if split == "train" and step == 0 and self._first is not None:
            batch, self._first = self._first, None
            return batch
        return self._make_batch(step, split)

    def _init_state(self) -> Any:
        state = self.file.init_state(self.batch_size)
        if not state_tensors(state):
            raise ModelFileError(f"{self.file.path}: init_state({self.batch_size}) returned "
                                 f"{_describe(state)}; it must return a tensor or a tuple of "
                                 "tensors (the state the model carries)")
        return map_tensors(state, lambda t: t.to(self.device))

    def _forward(self, inputs: tuple, state: Any) -> tuple[Any, Any]:
        model = self.models["model"]
        if not self.carries_state:
            return model(*inputs), None
        out = model(*inputs, state)
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise ModelFileError(
                f"{self.file.path}: init_state() is defined, so model(inputs, state) must "
                f"return (output, new_state); it returned {_describe(out)}")
        return out[0], out[1]

    def _loss(self, output: Any, targets: Tensor) -> Tensor:
        if self.file.loss_fn is not None:
            loss = self.file.loss_fn(output, targets)
        elif isinstance(output, Tensor) and output.dim() >= 1:
            loss = F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))
        else:
            raise ModelFileError(f"{self.file.path}: the model returned {_describe(output)}; "
                                 "the default loss (cross_entropy) needs logits: define "
                                 "loss_fn(output, targets)")
        if not isinstance(loss, Tensor) or loss.numel() != 1 or not loss.is_floating_point():
            raise ModelFileError(f"{self.file.path}: loss_fn returned {_describe(loss)}; it must "
                                 "return a scalar floating-point tensor")
        return loss

    def _carried_state_in(self, toggles: TechniqueToggles) -> Any:
        if self.state is None:
            return self._init_state()
        state = self.state
        if toggles.detach_state:
            state = map_tensors(state, Tensor.detach)
        if toggles.amp == "off" and self._state_from_autocast:
            # Autocast may have made the state half precision; the model wants its own dtype.
            # Only then: a run without AMP gets its state back exactly as the model made it.
            dtype = self._param_dtype()
            state = map_tensors(state, lambda t: t.to(dtype) if t.is_floating_point() else t)
        return state

    def _param_dtype(self) -> torch.dtype:
        for p in self.parameters():
            if p.is_floating_point():
                return p.dtype
        return torch.get_default_dtype()

    # --- the Preset interface ---------------------------------------------------------------
    def carried_tensors(self) -> list[Tensor]:
        return super().carried_tensors() + state_tensors(self.state)

    def forward_train(self, toggles: TechniqueToggles) -> ForwardResult:
        try:
            inputs, targets = self._batch(self.step_index, "train")
            state = self._carried_state_in(toggles) if self.carries_state else None
            output, new_state = self._forward(inputs, state)
            if self.carries_state:
                self.state = new_state
                self._state_from_autocast = toggles.amp != "off"
            loss = self._loss(output, targets)
        except SystemExit as exc:  # the file's exit must not end the run's thread
            raise user_error(self.file.path, exc, "the training forward") from None
        kept = [output] if isinstance(output, Tensor) else []
        return ForwardResult(loss, [(loss, None)], kept)

    def forward_eval(self, toggles: TechniqueToggles) -> Tensor:
        try:
            inputs, targets = self._batch(self.step_index, "eval")
            state = self._init_state() if self.carries_state else None
            output, _ = self._forward(inputs, state)
            return self._loss(output, targets)
        except SystemExit as exc:
            raise user_error(self.file.path, exc, "the eval forward") from None


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)} ({str(value.dtype).replace('torch.', '')})"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}" if value is not None else "None"

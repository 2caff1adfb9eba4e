"""The memory check before a model-file run: memlens.core.preflight's estimate for a user's model.

The file is loaded as for the run (its module-level code runs on the CPU), the model is
built on the meta device (shapes, no memory), batch 0 is made as usual and its shapes taken
to the meta device, and one training forward runs there. A file whose code cannot run on
the meta device (a forward that reads values, say) gets no estimate: the run then starts
unchecked, as before, and its own build reports any contract error.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memlens.core.estimate import MemoryEstimate, estimate_memory
from memlens.core.model_file import load_model_file, read_file_batch_dim
from memlens.core.model_file_batch import find_batch_dim, samples_in
from memlens.core.model_file_preset import map_tensors, state_tensors

META = torch.device("meta")


def estimate_model_file_memory(config) -> MemoryEstimate | None:
    """params + grads + optimizer state + batch + one forward's saved tensors, or None."""
    file = load_model_file(config.preset)  # a ModelFileError is the answer already
    try:
        with META:
            model = file.build_model()
        if not isinstance(model, nn.Module):
            return None
        if file.batch_size_arg and config.batch_size:
            inputs, targets = file.make_batch(0, "train", batch_size=config.batch_size)
        else:
            inputs, targets = file.make_batch(0, "train")
        parts = tuple(inputs) if isinstance(inputs, tuple | list) else (inputs,)
        data = [*parts, targets]
        if not all(isinstance(t, Tensor) for t in data):
            return None
        meta_inputs = tuple(t.to(META) for t in parts)
        meta_targets = targets.to(META)
        state: Any = None
        if file.init_state is not None:
            dim = find_batch_dim(parts[0], declared=read_file_batch_dim(config.preset),
                                 batch_size=config.batch_size, model=model, where="")
            batch = config.batch_size or samples_in(parts[0], dim)
            with META:
                state = map_tensors(file.init_state(batch), lambda t: t.to(META))

        def forward() -> Tensor:
            out = model(*meta_inputs, state) if file.init_state is not None else model(
                *meta_inputs)
            if file.init_state is not None:
                out = out[0]
            if file.loss_fn is not None:
                return file.loss_fn(out, meta_targets)
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), meta_targets.reshape(-1))

        return estimate_memory(list(model.parameters()), data + state_tensors(state), forward,
                               config.optimizer)
    except (Exception, SystemExit):  # the code needs real values: no estimate, the run decides
        return None

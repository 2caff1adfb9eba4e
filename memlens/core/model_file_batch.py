"""Which dimension of a model file's batch is the batch: declared, or found from the file.

PyTorch's RNNs and nn.Transformer default to sequence-first inputs (seq_len, batch, ...),
so the batch is not assumed to be dimension 0. In order: the file's CONFIG["batch_dim"];
else, when the batch size is known (the setting, CONFIG, make_batch's default), the one
dimension of the first input that has it, with the model's `batch_first` attributes
breaking a tie; else the model's `batch_first` (False: dimension 1); else dimension 0.
Where the batch size is known and no dimension (or more than one) has it, the user is told
how to declare it instead of being guessed at.
"""

from __future__ import annotations

from torch import Tensor, nn

from memlens.core.model_file import ModelFileError

DECLARE = ("declare the batch dimension in the file: CONFIG = {{'batch_dim': {dim}, ...}} "
           "(0 for (batch, ...) inputs, 1 for PyTorch's sequence-first (seq_len, batch, ...))")


def batch_first_hint(model: nn.Module | None) -> int | None:
    """0 or 1 where every submodule that has `batch_first` (RNNs, MultiheadAttention,
    nn.Transformer) agrees; None where none has it or they disagree."""
    if model is None:
        return None
    seen = {m.batch_first for m in model.modules()
            if isinstance(getattr(m, "batch_first", None), bool)}
    return (0 if seen == {True} else 1) if len(seen) == 1 else None


def find_batch_dim(first: Tensor, *, declared: int | None, batch_size: int,
                   model: nn.Module | None, where: str, follows: bool = False) -> int:
    """The batch dimension of `first` (the first input of batch 0). `where` names the call
    for messages, e.g. "/abs/x.py: make_batch(0, 'train')"; `follows`: make_batch was
    given batch_size (its batch_size parameter)."""
    shape = tuple(first.shape)
    if declared is not None:
        if declared >= max(first.dim(), 1):
            raise ModelFileError(f"{where} made inputs of shape {shape}, which have no "
                                 f"dimension {declared}, but CONFIG sets batch_dim={declared}; "
                                 "set batch_dim to the inputs' batch dimension")
        return declared
    hint = batch_first_hint(model)
    if first.dim() == 0:
        return 0
    if not batch_size:
        return hint if hint is not None and hint < first.dim() else 0
    holds = [d for d, n in enumerate(shape) if n == batch_size]
    if len(holds) == 1:
        return holds[0]
    if not holds and follows:
        raise ModelFileError(
            f"{where} was given batch_size={batch_size} but made inputs of shape {shape}, "
            "with no dimension of that size; make the batch batch_size samples")
    if not holds:
        raise ModelFileError(
            f"{where} made inputs of shape {shape}, but batch_size={batch_size} is set and no "
            "dimension has that size; give make_batch a batch_size parameter to follow the "
            "setting, or set batch_size=0 (the file's own size)")
    if hint in holds:
        return hint
    if 0 in holds and hint is None:  # e.g. (8, 8) with batch 8: dimension 0, as before
        return 0
    raise ModelFileError(
        f"{where} made inputs of shape {shape}: dimensions {' and '.join(map(str, holds))} "
        f"all have batch_size={batch_size}, so the batch dimension cannot be told; "
        + DECLARE.format(dim=holds[0]))


def samples_in(t: Tensor, dim: int) -> int:
    """How many samples a tensor holds along the batch dimension (1 for a scalar)."""
    return t.shape[dim] if t.dim() > dim else (t.shape[0] if t.dim() else 1)


def targets_match(targets: Tensor, dim: int, n: int) -> bool:
    """Targets hold the batch along the inputs' batch dimension (a sequence-first LM's
    (seq_len, batch) targets) or along dimension 0 (a sequence-first classifier's (batch,))."""
    if targets.dim() == 0:
        return n == 1
    return (targets.dim() > dim and targets.shape[dim] == n) or targets.shape[0] == n

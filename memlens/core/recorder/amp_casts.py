"""AMP weight casts: the storages of autocast's low-precision weight copies that a graph saved.

Under autocast a parameter used by a matmul or a convolution is cast once per autocast
region (autocast's weight cache) and the op saves the copy for backward. Those copies are
not activations: they are the price of AMP, a fixed cost per weight, and memlens shows them
as their own category. They are found from the graph, not guessed from sizes: a saved
tensor whose own history is a cast node (ToCopyBackward0) of a parameter's AccumulateGrad,
through view nodes (linear saves the transposed copy).
"""

from __future__ import annotations

from torch import Tensor

from memlens.core.recorder.keys import storage_key

_CAST = "ToCopyBackward0"
# Nodes that only re-view their input and save no tensor: the cast copy reaches the op that
# saves it through these (linear saves the transposed weight).
_VIEWS = frozenset({"TBackward0", "ViewBackward0", "PermuteBackward0", "UnsqueezeBackward0",
                    "ExpandBackward0", "SliceBackward0", "TransposeBackward0",
                    "ReshapeAliasBackward0", "AliasBackward0", "SelectBackward0"})
NODE_LIMIT = 200_000


def _cast_param(node, params: dict[int, Tensor]) -> Tensor | None:
    """The parameter a node casts (through view nodes), or None."""
    seen = 0
    while node is not None and seen < 8:
        name = type(node).__name__
        if name == _CAST:
            nxt = node.next_functions[0][0] if node.next_functions else None
            var = getattr(nxt, "variable", None)
            return var if var is not None and id(var) in params else None
        if name not in _VIEWS or not node.next_functions:
            return None
        node = node.next_functions[0][0]
        seen += 1
    return None


def amp_cast_storages(roots: list[Tensor], params: list[Tensor]) -> dict:
    """Storage key -> bytes of every low-precision weight copy the graphs of `roots` saved
    for backward, each storage once."""
    return amp_cast_storages_of_nodes(
        [r.grad_fn for r in roots if r is not None and r.grad_fn is not None], params)


def amp_cast_storages_of_nodes(nodes: list, params: list[Tensor]) -> dict:
    """As amp_cast_storages, from the graphs' autograd nodes (a forward's outputs' nodes)."""
    by_id = {id(p): p for p in params}
    out: dict = {}
    stack = list(nodes)
    seen = set(stack)
    while stack and len(seen) < NODE_LIMIT:
        node = stack.pop()
        casts = False
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            if not casts and _cast_param(nxt, by_id) is not None:
                casts = True
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
        if casts:
            _add_saved_casts(node, by_id, out)
    return out


def _add_saved_casts(node, params: dict[int, Tensor], out: dict) -> None:
    """The node's saved tensors that are a cast of a parameter, by identity: the tensor's
    own history is that cast (through view nodes). Never by size: an activation as wide as
    a weight (a batch of 256 through a 256-wide layer) has a weight's element count too."""
    for name in dir(node):
        if not name.startswith("_saved_") or name.endswith("_raw"):
            continue
        try:
            value = getattr(node, name)
        except RuntimeError:  # freed by a backward already
            continue
        for t in value if isinstance(value, (tuple, list)) else (value,):
            if (isinstance(t, Tensor) and t.grad_fn is not None
                    and _cast_param(t.grad_fn, params) is not None):
                key, n = storage_key(t)
                out[key] = n

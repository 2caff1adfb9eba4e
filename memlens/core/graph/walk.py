"""Our own walk of an autograd graph: torchviz's node set plus the metadata it does not give.

The walk visits nodes in the order torchviz's `make_dot(show_saved=True)` does and names
nodes by `id()` of the same Python objects, so the two agree node for node; every object is
kept alive until the walk is dropped, so no id is reused meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from memlens.core.graph.snapshot import GraphEdge, GraphNode, SavedTensor
from memlens.core.recorder.keys import storage_key as memory_storage_key
from memlens.core.recorder.saved import span_of

SAVED_PREFIX = "_saved_"
ACCUMULATE = "AccumulateGrad"


def storage_key(t: torch.Tensor) -> str:
    """memory.storage_key's (device, base pointer) as text: tensors that share memory share
    it, so the graph dedupes saved bytes exactly as the engine does."""
    try:
        (_, ptr), _ = memory_storage_key(t)
    except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
        return f"{t.device}:id{id(t):#x}"
    return f"{t.device}:{ptr:#x}"


def storage_bytes(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return int(t.numel() * t.element_size())


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        return span_of(t)
    except (RuntimeError, NotImplementedError):
        return None


def _union(spans: list) -> int:
    total, end = 0, -1
    for lo, hi in sorted(spans):
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def unreadable_reason(exc: Exception) -> str:
    text = str(exc)
    if "second time" in text or "already been freed" in text:
        return "freed by an earlier backward"
    if "inplace" in text or "in-place" in text:
        return "modified in place after it was saved"
    return text.splitlines()[0][:120] if text else type(exc).__name__


def shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(f"{s:d}" for s in shape) + ")"


@dataclass(slots=True)  # no dict each: a full collection during a capture walks them all
class _Node:
    id: str
    kind: str
    label: str
    obj: Any
    op: str = ""
    param: str = ""
    saved: list[SavedTensor] = field(default_factory=list)
    owner: str = ""  # saved tensors: the first op that saved it


class GraphWalk:
    """Walks the graph from `loss` (or from each of a tuple of losses, as torchviz does);
    `nodes`, `edges` and `saved_bytes` hold the result."""

    def __init__(
        self,
        loss: torch.Tensor | tuple[torch.Tensor, ...],
        param_names: dict[int, str],
        param_storages: set[str],
        fn_scopes: dict[int, tuple[str, tuple[str, ...]]] | None = None,
        param_scopes: dict[str, tuple[str, tuple[str, ...]]] | None = None,
        buffer_storages: set[str] | frozenset = frozenset(),
    ) -> None:
        self.param_names = param_names
        self.param_storages = param_storages
        # Module buffers an op saved (BatchNorm's running stats): shown, never counted, as
        # the engine counts them as buffers and not as saved activations.
        self.buffer_storages = buffer_storages
        self.fn_scopes = fn_scopes or {}
        self.param_scopes = param_scopes or {}
        self.nodes: dict[str, _Node] = {}
        self.edges: list[GraphEdge] = []
        self.keep: list[Any] = []  # every object named by id(): alive until the walk is dropped
        self._seen: set[int] = set()
        self._counted: set[str] = set()  # storages counted whole
        self._spans: dict[str, list] = {}  # storage -> spans of the data slices saved in it
        self._parts: dict[str, int] = {}  # storage -> bytes those spans cover
        self.saved_bytes = 0
        self.unreadable: dict[str, int] = {}  # problem -> how many saved tensors
        self.loss = loss
        for root in loss if isinstance(loss, tuple) else (loss,):
            self._add_base_tensor(root, "output")

    # --- torchviz's traversal -------------------------------------------------------------
    def _add_base_tensor(self, var: torch.Tensor, kind: str) -> None:
        # Iterative over view bases (a chain of views is short; the graph itself is not).
        while var is not None and id(var) not in self._seen:
            self._see(var)
            self._tensor_node(var, kind, "")
            if var.grad_fn is not None:
                self._add_nodes(var.grad_fn)
                self.edges.append((str(id(var.grad_fn)), str(id(var)), ""))
            if not var._is_view():
                break
            base = var._base
            self.edges.append((str(id(base)), str(id(var)), "dotted"))
            var, kind = base, "output"

    def _add_nodes(self, root: Any) -> None:
        """make_dot's recursive add_nodes, as a loop (deep graphs exceed the recursion limit)."""
        if id(root) in self._seen:
            return
        self._enter(root)
        stack = [(root, iter(getattr(root, "next_functions", ())))]
        while stack:
            fn, todo = stack[-1]
            for nxt, _ in todo:
                if nxt is None:
                    continue
                self.edges.append((str(id(nxt)), str(id(fn)), ""))
                if id(nxt) not in self._seen:
                    self._enter(nxt)
                    stack.append((nxt, iter(getattr(nxt, "next_functions", ()))))
                    break
            else:
                self._custom_saved(fn)
                stack.pop()

    def _enter(self, fn: Any) -> None:
        self._see(fn)
        fid = str(id(fn))
        op = type(fn).__name__
        saved: list[SavedTensor] = []
        for attr in dir(fn):
            if not attr.startswith(SAVED_PREFIX):
                continue
            name = attr[len(SAVED_PREFIX):]
            try:
                val = getattr(fn, attr)
            except RuntimeError as exc:  # freed, or modified in place since it was saved
                problem = unreadable_reason(exc)
                saved.append(SavedTensor(name, (), "", 0, problem=problem))
                self.unreadable[problem] = self.unreadable.get(problem, 0) + 1
                continue
            if torch.is_tensor(val):
                saved.append(self._saved_node(fn, val, name))
            elif isinstance(val, tuple):
                for i, t in enumerate(val):
                    if torch.is_tensor(t):
                        saved.append(self._saved_node(fn, t, f"{name}[{i}]"))
        param = ""
        if hasattr(fn, "variable"):
            var = fn.variable
            self._see(var)
            self._tensor_node(var, "param", "")
            self.edges.append((str(id(var)), fid, ""))
            param = self.param_names.get(id(var), "")
        node = self.nodes.get(fid)
        if node is None:
            self.nodes[fid] = _Node(fid, "op", op, fn, op=op, param=param, saved=saved)
        else:  # make_dot re-emits: the last statement wins
            node.kind, node.label, node.op, node.saved = "op", op, op, saved

    def _custom_saved(self, fn: Any) -> None:
        # Custom autograd Functions keep ctx.save_for_backward tensors in `saved_tensors`.
        if not hasattr(fn, "saved_tensors"):
            return
        try:
            tensors = fn.saved_tensors
        except RuntimeError:
            return
        node = self.nodes[str(id(fn))]
        for t in tensors:
            if not torch.is_tensor(t):
                continue
            self._see(t)
            self.edges.append((str(id(t)), node.id, "none"))
            record = self._record(t, self.param_names.get(id(t), ""))
            node.saved.append(record)
            self._tensor_node(t, "saved", "", record, owner=node.id)

    def _saved_node(self, fn: Any, t: torch.Tensor, name: str) -> SavedTensor:
        self._see(t)
        fid = str(id(fn))
        self.edges.append((fid, str(id(t)), "none"))
        record = self._record(t, name)
        self._tensor_node(t, "saved", name, record, owner=fid)
        return record

    # --- nodes and bytes ------------------------------------------------------------------
    def _see(self, obj: Any) -> None:
        self._seen.add(id(obj))
        self.keep.append(obj)

    def _record(self, t: torch.Tensor, name: str) -> SavedTensor:
        key = storage_key(t)
        nbytes = storage_bytes(t)
        is_param = key in self.param_storages
        # As the recorder counts (core/recorder/saved.py): a storage once, whole, except
        # where a tensor without history reaches only part of it (a batch sliced from a
        # data set): the union of what such tensors reach.
        span = None if t.requires_grad else _span(t)
        share = 0
        if not is_param and key not in self.buffer_storages and key not in self._counted:
            before = self._parts.get(key, 0)
            if span is None:
                self._counted.add(key)
                share = nbytes - before
            else:
                spans = self._spans.setdefault(key, [])
                spans.append(span)
                self._parts[key] = _union(spans)
                share = self._parts[key] - before
        self.saved_bytes += share
        return SavedTensor(
            name=name, shape=tuple(t.shape), dtype=str(t.dtype).removeprefix("torch."),
            bytes=share if share else (nbytes if span is None else span[1] - span[0]),
            storage=key, counted=share > 0, is_param=is_param,
        )

    def _tensor_node(
        self, t: torch.Tensor, kind: str, name: str,
        record: SavedTensor | None = None, owner: str = "",
    ) -> None:
        tid = str(id(t))
        pname = self.param_names.get(id(t), "")
        label = f"{name or pname}\n {shape_text(tuple(t.shape))}"
        if record is None:
            key = storage_key(t)
            record = SavedTensor(
                name=pname or name or kind, shape=tuple(t.shape),
                dtype=str(t.dtype).removeprefix("torch."), bytes=storage_bytes(t),
                storage=key, is_param=key in self.param_storages, for_backward=False,
            )
        node = self.nodes.get(tid)
        if node is None:
            self.nodes[tid] = _Node(tid, kind, label, t, param=pname, saved=[record], owner=owner)
        else:  # re-emitted (a parameter that an op also saved): the last statement wins
            node.kind, node.label = kind, label
            if kind == "param":
                node.saved = [record]
            node.owner = node.owner or owner

    # --- result ---------------------------------------------------------------------------
    def graph_nodes(self, ids: dict[str, str] | None = None) -> list[GraphNode]:
        """The nodes as plain data, renamed by `ids` (walk id -> DOT id) when given."""
        ids = ids or {}
        out = []
        for n in self.nodes.values():
            module, scope = self._scope_of(n)
            if n.kind in ("param", "saved", "output"):
                t = n.obj
                shape, dtype = tuple(t.shape), str(t.dtype).removeprefix("torch.")
            else:
                shape, dtype = (), ""
            out.append(GraphNode(
                id=ids.get(n.id, n.id), kind=n.kind, label=n.label, op=n.op,
                saved=tuple(n.saved), param=n.param, module=module, scope=scope,
                shape=shape, dtype=dtype,
            ))
        return out

    def _scope_of(self, n: _Node) -> tuple[str, tuple[str, ...]]:
        if n.kind == "op":
            if n.op == ACCUMULATE and n.param in self.param_scopes:
                return self.param_scopes[n.param]
            return self.fn_scopes.get(id(n.obj), ("", ()))
        if n.kind == "param":
            return self.param_scopes.get(n.param, ("", ()))
        if n.kind == "saved" and n.owner in self.nodes:
            return self._scope_of(self.nodes[n.owner])
        return "", ()

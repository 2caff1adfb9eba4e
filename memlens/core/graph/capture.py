"""GraphCapture: records one step's autograd graph before backward frees it.

The loop calls `begin()` before forward (forward hooks note which module call made which
backward node) and `finish(loss, step)` after forward, before backward. Steps that are not
captured pay nothing: no hooks are installed outside a capture.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from memlens.core.graph.dotfile import map_dot_ids, memlens_dot, parse_dot, torchviz_dot
from memlens.core.graph.snapshot import GraphSnapshot
from memlens.core.graph.walk import ACCUMULATE, GraphWalk, storage_key

NO_GRAPH = (
    "no autograd graph: the loss has no grad_fn, so nothing was saved for backward "
    "(it was computed under torch.no_grad(), or from tensors that do not require grad)"
)
_UNSEEN = 2**64 - 1  # AccumulateGrad's sequence number: it is not made by forward


class GraphCapture:
    """Capture the graph of the models' next forward. One capture per instance and step."""

    def __init__(self, models: dict[str, torch.nn.Module]) -> None:
        self.models = dict(models)
        self._handles: list[Any] = []
        self._stack: list[str] = []  # module calls now running, outermost first
        self._calls: dict[str, int] = {}
        self._types: dict[str, str] = {}  # module name -> its class ("features.0": "Conv2d")
        self._fn_scope: dict[int, tuple[str, tuple[str, ...]]] = {}
        self._fn_keep: list[Any] = []  # keeps the fns named in _fn_scope alive (stable ids)
        self._start_seq: list[int] = []
        self._seq_high = 0
        self._began = 0.0

    # --- names ----------------------------------------------------------------------------
    def _prefix(self, key: str, name: str) -> str:
        if len(self.models) == 1:
            return name
        return f"{key}.{name}" if name else key

    def param_names(self) -> dict[str, torch.nn.Parameter]:
        """{"fc.weight": p} for one model, {"G.fc.weight": p} for several."""
        out: dict[str, torch.nn.Parameter] = {}
        for key, model in self.models.items():
            for name, p in model.named_parameters():
                out[self._prefix(key, name)] = p
        return out

    # --- hooks ----------------------------------------------------------------------------
    def begin(self) -> None:
        """Install forward hooks on every module; call right before the forward pass."""
        self.abort()
        self._began = time.perf_counter()
        self._seq_high = _next_sequence_nr()
        for key, model in self.models.items():
            for name, module in model.named_modules():
                full = self._prefix(key, name)
                if not full:  # a single model's root: its scope would hold everything
                    continue
                self._types[full] = type(module).__name__
                self._handles.append(module.register_forward_pre_hook(self._pre(full)))
                self._handles.append(module.register_forward_hook(self._post(full)))

    def abort(self) -> None:
        """Remove the hooks and forget what they saw (on errors, and before a new begin)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._stack.clear()
        self._start_seq.clear()
        self._calls.clear()
        self._types.clear()
        self._fn_scope.clear()
        self._fn_keep.clear()

    def _pre(self, name: str):
        def hook(_module: torch.nn.Module, args: tuple) -> None:
            call = self._calls.get(name, 0)
            self._calls[name] = call + 1
            self._stack.append(f"{name}#{call}")
            # Nodes made by this call have a higher sequence number than anything before it.
            high = self._seq_high
            for t in _tensors(args):
                if t.grad_fn is not None:
                    seq = t.grad_fn._sequence_nr()
                    if seq != _UNSEEN:
                        high = max(high, seq)
            self._start_seq.append(high)

        return hook

    def _post(self, name: str):
        def hook(_module: torch.nn.Module, _args: tuple, output: Any) -> None:
            if not self._stack:
                return
            start = self._start_seq.pop()
            scope = tuple(self._stack)
            self._stack.pop()
            todo = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
            seen: set[int] = set()
            while todo:
                fn = todo.pop()
                if id(fn) in seen:
                    continue
                seen.add(id(fn))
                seq = fn._sequence_nr()
                if seq == _UNSEEN or seq <= start:
                    continue  # a parameter's accumulator, or made before this call
                self._seq_high = max(self._seq_high, seq)
                if id(fn) not in self._fn_scope:  # the innermost call claims it first
                    self._fn_scope[id(fn)] = (name, scope)
                    self._fn_keep.append(fn)
                todo.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)

        return hook

    # --- the result -----------------------------------------------------------------------
    def finish(self, loss: torch.Tensor | tuple[torch.Tensor, ...] | None, step: int,
               kind: str = "train", dot: bool = True) -> GraphSnapshot:
        """Remove the hooks and snapshot the graph from `loss` (before backward), or from
        each of several losses (a GAN's two, each backwarded on its own). `dot`:
        make the DOT text too (torchviz's make_dot); without it the snapshot has the nodes,
        edges and bytes, no DOT."""
        handles_were = bool(self._handles)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        started = self._began if handles_were else time.perf_counter()
        try:
            return self._snapshot(loss, step, kind, started, dot)
        finally:
            self.abort()

    def _snapshot(self, loss, step: int, kind: str, started: float,
                  want_dot: bool = True) -> GraphSnapshot:
        models = tuple(self.models)
        roots = loss if isinstance(loss, tuple) else (loss,)
        if not any(torch.is_tensor(t) and t.grad_fn is not None for t in roots):
            return GraphSnapshot(step=step, kind=kind, message=NO_GRAPH, models=models,
                                 capture_ms=(time.perf_counter() - started) * 1e3)
        params = self.param_names()
        walk = GraphWalk(
            loss,
            param_names={id(p): name for name, p in params.items()},
            param_storages={storage_key(p) for p in params.values()},
            buffer_storages={storage_key(b) for m in self.models.values() for b in m.buffers()},
            fn_scopes=self._scopes(),
            param_scopes=self._param_scopes(params),
        )
        notes: list[str] = []
        for problem, count in walk.unreadable.items():
            if problem.startswith("freed"):
                notes.append(f"{count} saved tensors were already freed by an earlier "
                             "backward: this graph reaches into a previous step's graph "
                             "(carried state not detached); its backward will fail")
            else:
                notes.append(f"{count} saved tensors cannot be read: {problem}")
        ids: dict[str, str] = {}
        dot, dot_by = "", "torchviz" if want_dot else ""
        if want_dot:
            try:
                dot = torchviz_dot(loss, params, depth_hint=len(walk.nodes))
            except Exception as exc:  # make_dot cannot read freed buffers, for one
                notes.append(f"torchviz make_dot failed ({type(exc).__name__}: "
                             f"{str(exc)[:120]}); the DOT is memlens' own, in the same form")
        if dot:
            dot_nodes, dot_edges = parse_dot(dot)
            ids, problems = map_dot_ids(walk, dot_nodes, dot_edges)
            notes += problems
        nodes = walk.graph_nodes(ids)
        edges = [(ids.get(s, s), ids.get(d, d), style) for s, d, style in walk.edges]
        if want_dot and not dot:
            dot, dot_by = memlens_dot(nodes, edges), "memlens"
        saved_bytes = walk.saved_bytes
        del walk  # drop our references to the graph's tensors now
        called = {k.rpartition("#")[0] or k for n in nodes for k in n.scope}
        return GraphSnapshot(
            step=step, kind=kind, nodes=tuple(nodes), edges=tuple(edges),
            module_types=tuple(sorted((k, v) for k, v in self._types.items() if k in called)),
            saved_bytes=saved_bytes, dot=dot, dot_by=dot_by, notes=tuple(notes),
            capture_ms=(time.perf_counter() - started) * 1e3, models=models,
        )

    def _scopes(self) -> dict[int, tuple[str, tuple[str, ...]]]:
        """fn id -> (module, scope), with "#k" dropped for modules called only once."""
        once = {name for name, n in self._calls.items() if n == 1}

        def tidy(frame: str) -> str:
            name = frame.rpartition("#")[0]
            return name if name in once else frame

        return {fid: (module, tuple(tidy(f) for f in scope))
                for fid, (module, scope) in self._fn_scope.items()}

    def _param_scopes(self, params: dict[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
        """A parameter's scope: the modules that own it and were called, outermost first.

        A module called several times keeps its parameters in its plain-named group, beside
        its calls ("cell" beside "cell#0", "cell#1", ...).
        """
        out = {}
        for pname in params:
            parts = pname.split(".")[:-1]
            owners = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
            scope = tuple(o for o in owners if o in self._calls)
            out[pname] = (scope[-1] if scope else "", scope)
        return out


def _next_sequence_nr() -> int:
    """The autograd sequence number the next node made on this thread will get (about)."""
    with torch.enable_grad():
        probe = torch.zeros((), requires_grad=True).neg()  # NegBackward0 saves nothing
    return probe.grad_fn._sequence_nr()


def _tensors(obj: Any, depth: int = 0):
    """Tensors inside a module's inputs or outputs (tuples, lists, dicts, nested)."""
    if torch.is_tensor(obj):
        yield obj
    elif depth < 4:
        if isinstance(obj, tuple | list):
            for item in obj:
                yield from _tensors(item, depth + 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                yield from _tensors(item, depth + 1)


__all__ = ["ACCUMULATE", "NO_GRAPH", "GraphCapture"]

"""GraphSnapshot: one step's autograd graph as plain data (no tensors), safe across threads."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter
from typing import Any

from memlens.core.units import format_bytes

NODE_KINDS: tuple[str, ...] = ("op", "param", "saved", "output")
# torchviz's fill colours, by node kind ("output" also covers a view's base, darkolivegreen3).
TORCHVIZ_COLOURS: dict[str, str] = {
    "op": "lightgrey",
    "param": "lightblue",
    "saved": "orange",
    "output": "darkolivegreen1",
}


@dataclass(frozen=True, slots=True)
class SavedTensor:
    """One tensor a backward node saved (or a parameter / output tensor shown as a node)."""

    name: str  # the backward node's attribute: "mat1", "result", "self[0]"; or a param name
    shape: tuple[int, ...]
    dtype: str  # "float32"
    # Bytes of the storage it keeps alive: all of it, or for a tensor without history that
    # reaches only part (a batch sliced from a data set) what it reaches (counted: beyond
    # what the slices counted before it reach)
    bytes: int
    storage: str = ""  # "device:0xADDR": tensors that share a storage share this key
    counted: bool = False  # the first saved use of a non-parameter storage: in saved_bytes
    is_param: bool = False  # a parameter's storage: never counted as saved
    # Why it could not be read: "freed by an earlier backward" (a graph kept past its
    # backward), "modified in place after it was saved"; "" when it was read.
    problem: str = ""
    for_backward: bool = True  # False: a parameter or output node's own tensor

    def describe(self) -> str:
        shape = "(" + ", ".join(str(s) for s in self.shape) + ")"
        if self.problem:
            return f"{self.name}: {self.problem}"
        if not self.for_backward:
            what = "parameter" if self.is_param else "tensor"
            return f"{self.name} {shape} {self.dtype}: {what}, {format_bytes(self.bytes)}"
        if self.is_param:
            note = "parameter storage, not counted"
        elif self.counted:
            note = format_bytes(self.bytes)
        else:
            note = f"{format_bytes(self.bytes)}, shared storage counted once"
        return f"{self.name} {shape} {self.dtype}: {note}"


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A node as torchviz draws it: a backward op, or a tensor (parameter, saved, output)."""

    id: str  # the node's name in the DOT source
    kind: str  # one of NODE_KINDS
    label: str  # torchviz's label
    op: str = ""  # backward class name for ops ("AddmmBackward0")
    saved: tuple[SavedTensor, ...] = ()  # op: what it saved; tensor node: itself
    param: str = ""  # parameter name for param nodes (and AccumulateGrad ops)
    module: str = ""  # innermost module that produced it ("" = outside every module)
    scope: tuple[str, ...] = ()  # module calls, outermost first: ("encoder", "encoder.fc#2")
    shape: tuple[int, ...] = ()  # tensor nodes
    dtype: str = ""  # tensor nodes

    @property
    def saved_bytes(self) -> int:
        """Bytes this op adds to the snapshot's saved_bytes (each storage counted once)."""
        if self.kind != "op":
            return 0
        return sum(t.bytes for t in self.saved if t.counted)

    @property
    def held_bytes(self) -> int:
        """Bytes of saved non-parameter storages this node keeps alive (shared ones included)."""
        return sum(t.bytes for t in self.saved
                   if t.for_backward and not t.is_param and not t.problem)

    @property
    def title(self) -> str:
        """A one-line name: the op, the parameter, or the saved tensor's attribute."""
        if self.kind == "op":
            return self.op
        if self.kind == "param":
            return self.param or self.label.split("\n")[0]
        first = self.label.split("\n")[0].strip()
        return first or ("loss" if self.kind == "output" else "tensor")


# An edge: (src, dst, style), style "" for data flow, "none" op -> saved tensor, "dotted"
# view -> base. A plain tuple of strings on purpose: the garbage collector stops tracking
# such tuples, and every full collection walks each object it tracks; a 2,000-node capture
# has ~2,600 edges, and the app keeps dozens of captures.
GraphEdge = tuple[str, str, str]


class GraphNodes(Sequence):
    """A snapshot's nodes, read as GraphNode objects and kept as rows of plain tuples.

    Why rows: the garbage collector stops tracking tuples of strings and numbers, and every
    full collection walks each object it tracks, holding the GIL (the GUI waits). As
    objects a 2,000-node capture is ~5,000 of them (nodes, saved tensors, their tuples) and
    the app keeps dozens of captures; as rows, none. A GraphNode is made on each access.
    """

    __slots__ = ("_rows",)

    def __init__(self, nodes: Iterable[GraphNode] = ()) -> None:
        self._rows = tuple(map(_node_row, nodes))

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(map(_node_of, self._rows[i]))
        return _node_of(self._rows[i])

    def __iter__(self) -> Iterator[GraphNode]:
        return map(_node_of, self._rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GraphNodes):
            return self._rows == other._rows
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._rows)

    def __repr__(self) -> str:
        return f"GraphNodes({len(self._rows)} nodes)"

    def ids(self) -> list[str]:
        return [r[0] for r in self._rows]

    @property
    def rows(self) -> tuple[tuple, ...]:
        """The rows themselves, for a holder that reads few of them (`node_of_row`)."""
        return self._rows

    def count_kind(self, kind: str) -> int:
        return sum(1 for r in self._rows if r[1] == kind)


_NODE_FIELDS = tuple(f.name for f in fields(GraphNode))
_SAVED_AT = _NODE_FIELDS.index("saved")
_node_values = attrgetter(*_NODE_FIELDS)
_saved_values = attrgetter(*(f.name for f in fields(SavedTensor)))


def _node_row(n: GraphNode) -> tuple:
    values = _node_values(n)
    return (*values[:_SAVED_AT], tuple(map(_saved_values, n.saved)), *values[_SAVED_AT + 1:])


def node_of_row(row: tuple) -> GraphNode:
    return _node_of(row)


def _node_of(row: tuple) -> GraphNode:
    saved = tuple(SavedTensor(*t) for t in row[_SAVED_AT])
    return GraphNode(*row[:_SAVED_AT], saved, *row[_SAVED_AT + 1:])


@dataclass(frozen=True)
class GraphSnapshot:
    """The autograd graph reachable from one step's loss, captured before backward."""

    step: int
    kind: str = "train"  # "train" | "eval"
    nodes: GraphNodes = field(default_factory=GraphNodes)  # also takes GraphNode objects
    edges: tuple[GraphEdge, ...] = ()
    saved_bytes: int = 0  # unique non-parameter storages of the saved tensors
    dot: str = ""  # DOT source (torchviz make_dot unless dot_by says otherwise)
    dot_by: str = "torchviz"  # "torchviz" | "memlens" (make_dot failed; see notes)
    message: str = ""  # for an empty graph: why there is none
    notes: tuple[str, ...] = ()  # anything the user should know about this capture
    capture_ms: float = 0.0
    models: tuple[str, ...] = ("model",)
    module_types: tuple[tuple[str, str], ...] = ()  # (module name, class name) of scopes
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, GraphNodes):
            object.__setattr__(self, "nodes", GraphNodes(self.nodes))
        self._index.update({k: i for i, k in enumerate(self.nodes.ids())})

    # --- reading --------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return not self.nodes

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def count(self, kind: str) -> int:
        return self.nodes.count_kind(kind)

    def node(self, node_id: str) -> GraphNode:
        return self.nodes[self._index[node_id]]

    def module_type(self, name: str) -> str:
        """The class of the module called `name` ("Conv2d"), "" when not known."""
        return dict(self.module_types).get(name, "")

    def ops(self) -> list[str]:
        return [n.op for n in self.nodes if n.kind == "op"]

    def summary(self) -> str:
        if self.is_empty:
            return f"step {self.step} ({self.kind}): {self.message or 'no autograd graph'}"
        return (
            f"step {self.step} ({self.kind}): {self.node_count} nodes "
            f"({self.count('op')} ops, {self.count('param')} params, "
            f"{self.count('saved')} saved tensors), saved {format_bytes(self.saved_bytes)}"
        )

    # --- persistence ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step, "kind": self.kind, "saved_bytes": self.saved_bytes,
            "dot": self.dot, "dot_by": self.dot_by, "message": self.message,
            "notes": list(self.notes), "capture_ms": self.capture_ms,
            "models": list(self.models),
            "module_types": dict(self.module_types),
            "nodes": [asdict(n) for n in self.nodes],
            "edges": [list(e) for e in self.edges],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GraphSnapshot:
        """Inverse of to_dict; keys it does not know (a newer file) are skipped."""
        nodes = []
        for n in data.get("nodes", ()):
            saved = tuple(
                SavedTensor(**{**_known(SavedTensor, t), "shape": tuple(t["shape"])})
                for t in n.get("saved", ())
            )
            nodes.append(GraphNode(**{
                **_known(GraphNode, n), "saved": saved, "scope": tuple(n.get("scope", ())),
                "shape": tuple(n.get("shape", ())),
            }))
        return cls(
            step=int(data["step"]), kind=data.get("kind", "train"), nodes=tuple(nodes),
            edges=tuple(_edge(*e) for e in data.get("edges", ())),
            saved_bytes=int(data.get("saved_bytes", 0)), dot=data.get("dot", ""),
            dot_by=data.get("dot_by", "torchviz"), message=data.get("message", ""),
            notes=tuple(data.get("notes", ())), capture_ms=float(data.get("capture_ms", 0.0)),
            models=tuple(data.get("models", ("model",))),
            module_types=tuple(sorted((str(k), str(v)) for k, v in
                                      (data.get("module_types") or {}).items())),
        )


def _edge(src: str, dst: str, style: str = "") -> GraphEdge:
    return (src, dst, style)


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}



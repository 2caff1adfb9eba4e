"""What the view draws: the snapshot's nodes, with module calls collapsed into group nodes.

A node's scope lists the module calls it was made in, outermost first ("encoder",
"encoder.layer#3"). A collapsed call stands for every node inside it; expanding it shows its
own nodes and its inner calls, collapsed in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memlens.core.graph.snapshot import GraphNode, GraphSnapshot, node_of_row
from memlens.core.units import format_bytes

GROUP_ABOVE = 400  # snapshots with more nodes open grouped by module


@dataclass(frozen=True, slots=True)
class ViewNode:
    id: str
    kind: str  # "op" | "param" | "saved" | "output" | "group"
    title: str
    detail: str = ""  # second line: shape, bytes
    row: tuple = ()  # the snapshot node's row (see GraphNodes); () for groups
    group: str = ""  # group key, for group nodes
    members: tuple[str, ...] = ()  # snapshot node ids inside a group
    saved_bytes: int = 0  # counted saved bytes (a group: of all its members)
    held_bytes: int = 0  # bytes kept alive, for shading

    @property
    def label(self) -> str:
        return f"{self.title}\n{self.detail}" if self.detail else self.title

    @property
    def node(self) -> GraphNode | None:
        """The snapshot node (None for groups), made when asked for: a shown graph keeps
        rows, which the garbage collector does not track, not thousands of objects."""
        return node_of_row(self.row) if self.row else None


@dataclass(frozen=True)
class ViewGraph:
    nodes: tuple[ViewNode, ...]
    edges: tuple[tuple[str, str, str], ...]
    attached: frozenset[str]  # saved tensors drawn under their op
    shown_as: dict[str, str] = field(default_factory=dict)  # snapshot id -> view node id

    def find(self, snapshot: GraphSnapshot, text: str) -> list[str]:
        """View nodes whose op, parameter, module or tensor name contains `text`."""
        text = text.strip().lower()
        if not text:
            return []
        hits = dict.fromkeys(
            self.shown_as[n.id] for n in snapshot.nodes
            if n.id in self.shown_as and _matches(n, text)
        )
        for v in self.nodes:
            if v.kind == "group" and text in v.title.lower():
                hits.setdefault(v.id, None)
        return list(hits)


def _matches(n: GraphNode, text: str) -> bool:
    return (text in n.op.lower() or text in n.param.lower()
            or any(text in group_title(k).lower() for k in n.scope)
            or (n.kind != "op" and text in n.title.lower()))


def group_title(key: str, module_type: str = "") -> str:
    """A module call as users name modules: its path and class, "features.0: Conv2d", and
    which call for a module called several times ("cell #3: LSTMCell")."""
    name, sep, call = key.rpartition("#")
    title = f"{name} #{call}" if sep else key
    return f"{title}: {module_type}" if module_type else title


def module_of(key: str) -> str:
    """The module name of a scope key ("cell#3" -> "cell")."""
    name, sep, _call = key.rpartition("#")
    return name if sep else key


def view_graph(
    snapshot: GraphSnapshot,
    expanded: frozenset[str] | set[str] = frozenset(),
    *,
    grouped: bool = False,
    show_saved: bool = True,
) -> ViewGraph:
    """The graph to draw: with `grouped`, module calls not in `expanded` become one node."""
    shown_as: dict[str, str] = {}
    members: dict[str, list[GraphNode]] = {}
    keep: list[GraphNode] = []
    owner_of: dict[str, str] = {}
    if not show_saved:
        for src, dst, style in snapshot.edges:
            if style == "none":
                owner_of.setdefault(dst, src)
    for n in snapshot.nodes:
        key = ""
        if grouped:
            for k in n.scope:
                if k not in expanded:
                    key = k
                    break
        if key:
            members.setdefault(key, []).append(n)
            shown_as[n.id] = "group:" + key
        elif n.kind == "saved" and not show_saved:
            continue  # its op still lists it
        else:
            keep.append(n)
            shown_as[n.id] = n.id
    rows = dict(zip(snapshot.nodes.ids(), snapshot.nodes.rows, strict=True))
    nodes = [_plain(n, rows[n.id]) for n in keep]
    for key, inside in members.items():
        saved = sum(m.saved_bytes for m in inside)
        held = sum(m.held_bytes for m in inside if m.kind == "op")
        ops = sum(1 for m in inside if m.kind == "op")
        params_only = all(m.kind == "param" or m.op == "AccumulateGrad" for m in inside)
        detail = ("parameters" if params_only
                  else f"{ops} ops" + (f" · saved {format_bytes(saved)}" if saved else ""))
        nodes.append(ViewNode(
            id="group:" + key, kind="group",
            title=group_title(key, snapshot.module_type(module_of(key))), detail=detail,
            group=key, members=tuple(m.id for m in inside), saved_bytes=saved, held_bytes=held,
        ))
    edges: dict[tuple[str, str], str] = {}
    for src, dst, style in snapshot.edges:
        s, d = shown_as.get(src), shown_as.get(dst)
        if s is None or d is None or s == d:
            continue
        if style == "none" and (s.startswith("group:") or d.startswith("group:")):
            style = ""  # a saved tensor outside the group that saved it: plain link
        if edges.get((s, d), style) != style:
            style = ""
        edges[(s, d)] = style
    attached = frozenset(v.id for v in nodes if v.kind == "saved")
    return ViewGraph(tuple(nodes), tuple((s, d, st) for (s, d), st in edges.items()),
                     attached, shown_as)


def _plain(n: GraphNode, row: tuple) -> ViewNode:
    shape = "(" + ", ".join(str(s) for s in n.shape) + ")"
    if n.kind == "op":
        if n.saved_bytes:
            detail = f"saved {format_bytes(n.saved_bytes)}"
        elif n.held_bytes:  # all of it already counted at another op (a shared storage)
            detail = f"shares {format_bytes(n.held_bytes)}"
        else:
            detail = ""
        problems = {t.problem for t in n.saved if t.problem}
        if problems:
            detail = "saved: " + ", ".join(sorted(problems))
    elif n.kind == "saved":
        t = n.saved[0] if n.saved else None
        size = format_bytes(t.bytes) if t and not t.is_param else "param"
        detail = f"{shape} {size}"
    else:
        detail = shape
    return ViewNode(id=n.id, kind=n.kind, title=n.title, detail=detail, row=row,
                    saved_bytes=n.saved_bytes, held_bytes=n.held_bytes)


def default_grouped(snapshot: GraphSnapshot) -> bool:
    return snapshot.node_count > GROUP_ABOVE

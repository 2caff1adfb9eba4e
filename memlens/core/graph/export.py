"""Writing a GraphSnapshot as DOT, SVG or PNG, with the fastest route that draws it well.

- DOT: torchviz's make_dot source, as captured.
- SVG/PNG, small graphs: Graphviz dot lays out and draws make_dot's graph (bounded in time),
  each box sized for its label and saved tensors labelled with their bytes, as the app shows
  them (Graphviz's own text widths run short of the drawn monospace glyphs).
- SVG/PNG, large graphs or when dot runs out of time: our layered layout, drawn by the dot
  binary with the positions pinned (`neato -n2`, which only draws: fast).
- No dot binary at all: SVG from our own writer; PNG needs dot (or the app's Qt renderer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape
from pathlib import Path

from memlens.core.graph import graphviz
from memlens.core.graph.layout import DOT_MAX_NODES, Layout, LayoutRequest, layered_layout
from memlens.core.graph.snapshot import TORCHVIZ_COLOURS, GraphNode, GraphSnapshot
from memlens.core.runfolder.atomic import ExportError, atomic_write_bytes, atomic_write_text
from memlens.core.units import format_bytes

FORMATS = ("dot", "svg", "png")
DOT_EXPORT_TIME_S = 10.0  # how long an export lets Graphviz dot try before our layout
MAX_PNG_SIDE_PX = 16000
# Named colours as SVG/Qt know them (Graphviz's X11 names, in hex).
HEX = {"lightgrey": "#d3d3d3", "lightblue": "#add8e6", "orange": "#ffa500",
       "darkolivegreen1": "#caff70", "darkolivegreen3": "#a2cd5a"}
CHAR_W, LINE_H, PAD_X, PAD_Y = 6.0, 13.0, 10.0, 6.0  # monospace 10 pt, as make_dot sets


@dataclass(frozen=True)
class ExportResult:
    path: Path
    fmt: str
    how: str  # which engine laid it out and drew it
    seconds: float


def format_of(path: str | Path, fmt: str | None = None) -> str:
    fmt = (fmt or Path(path).suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise ExportError(
            f"cannot write {str(path)!r}: the graph exports as .dot, .svg or .png"
        )
    return fmt


def export_graph(
    snapshot: GraphSnapshot,
    path: str | Path,
    fmt: str | None = None,
    *,
    dot_time_limit: float = DOT_EXPORT_TIME_S,
) -> ExportResult:
    """Write `snapshot` to `path` (format from `fmt` or the suffix); say how it was drawn."""
    start = time.perf_counter()
    path = Path(path)
    fmt = format_of(path, fmt)
    if fmt == "dot":
        atomic_write_text(path, snapshot.dot or empty_dot(snapshot))
        how = "torchviz make_dot" if snapshot.dot_by == "torchviz" else "memlens DOT writer"
        return ExportResult(path, fmt, how, time.perf_counter() - start)
    data, how = render(snapshot, fmt, dot_time_limit=dot_time_limit)
    atomic_write_bytes(path, data)
    return ExportResult(path, fmt, how, time.perf_counter() - start)


def render(snapshot: GraphSnapshot, fmt: str, *, dot_time_limit: float) -> tuple[bytes, str]:
    """The SVG or PNG bytes of the snapshot, and how they were made."""
    dot = graphviz.find_dot()
    if snapshot.is_empty:  # a picture that says why there is no graph
        if dot is not None:
            data = graphviz.run_dot(dot, empty_dot(snapshot), [f"-T{fmt}"], timeout=30)
            return data, f"{graphviz.engine_name(dot)} (no graph: a note only)"
        if fmt == "svg":
            return svg_text(snapshot, Layout({}, {}, [], 640, 80, "none")).encode(), \
                "memlens SVG writer (no graph: a note only)"
        raise ExportError("PNG needs Graphviz: " + graphviz.missing_text())
    why = ""
    if dot is not None and snapshot.node_count <= DOT_MAX_NODES:
        try:
            data = graphviz.run_dot(dot, drawing_dot(snapshot), [f"-T{fmt}"],
                                    timeout=dot_time_limit)
            return data, f"{graphviz.engine_name(dot)} layout and drawing"
        except graphviz.DotError as exc:
            why = f" ({exc})"
    elif dot is not None:
        why = f" ({snapshot.node_count:,} nodes: too many for a dot layout)"
    layout = layered_layout(request_for(snapshot))
    if dot is not None:
        args = ["-Kneato", "-n2", f"-T{fmt}"]
        if fmt == "png":
            side = max(layout.width, layout.height)
            args.append(f"-Gdpi={min(96.0, MAX_PNG_SIDE_PX * 72.0 / max(side, 1.0)):.1f}")
        data = graphviz.run_dot(dot, positioned_dot(snapshot, layout), args, timeout=120)
        return data, f"memlens layered layout drawn by {graphviz.engine_name(dot)}{why}"
    if fmt == "svg":
        return svg_text(snapshot, layout).encode("utf-8"), "memlens layered layout and SVG writer"
    raise ExportError("PNG needs Graphviz: " + graphviz.missing_text())


def empty_dot(snapshot: GraphSnapshot) -> str:
    text = f"step {snapshot.step} ({snapshot.kind}): {snapshot.message or 'no autograd graph'}"
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'digraph {{\n\tgraph [label="{text}" fontname=monospace fontsize=10]\n}}\n'


# --- what a picture draws ----------------------------------------------------------------------
def drawn_label(n: GraphNode) -> str:
    """make_dot's label, and for a saved tensor its bytes (or that it is a parameter's)."""
    if n.kind != "saved" or not n.saved:
        return n.label
    t = n.saved[0]
    if t.problem:
        return f"{n.label}\n{t.problem}"
    return f"{n.label}\n{'parameter' if t.is_param else format_bytes(t.bytes)}"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def drawing_dot(snapshot: GraphSnapshot) -> str:
    """make_dot's graph and style for Graphviz to lay out and draw, every box at least as
    wide as its label in 10 pt monospace (label_size)."""
    lines = ["digraph {", '\tgraph [size="12,12"]',
             "\tnode [align=left fontname=monospace fontsize=10 height=0.2 ranksep=0.1 "
             "shape=box style=filled]"]
    for n in snapshot.nodes:
        label = drawn_label(n)
        w, h = label_size(label)
        fill = "" if n.kind == "op" else f" fillcolor={_fill(n.kind)}"
        lines.append(f"\t{_quoted(n.id)} [label={_quoted(label)}{fill} "
                     f"width={w / 72:.3f} height={h / 72:.3f}]")
    for s, d, style in snapshot.edges:
        attr = {"none": " [dir=none]", "dotted": " [style=dotted]"}.get(style, "")
        lines.append(f"\t{_quoted(s)} -> {_quoted(d)}{attr}")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- our layout of a snapshot ---------------------------------------------------------------
def label_size(label: str) -> tuple[float, float]:
    """The box make_dot's monospace 10 pt label needs (pixels = points)."""
    lines = label.split("\n")
    width = max(len(s) for s in lines) * CHAR_W + 2 * PAD_X
    return max(width, 40.0), len(lines) * LINE_H + 2 * PAD_Y


def request_for(snapshot: GraphSnapshot) -> LayoutRequest:
    return LayoutRequest(
        ids=tuple(n.id for n in snapshot.nodes),
        sizes=tuple(label_size(drawn_label(n)) for n in snapshot.nodes),
        edges=snapshot.edges,
        attached=frozenset(n.id for n in snapshot.nodes if n.kind == "saved"),
    )


def _fill(kind: str) -> str:
    return TORCHVIZ_COLOURS[kind]


def positioned_dot(snapshot: GraphSnapshot, layout: Layout) -> str:
    """DOT with every node and edge placed (Graphviz y grows upwards), for `neato -n2`."""
    height = layout.height

    def pt(p: tuple[float, float]) -> str:
        return f"{p[0]:.1f},{height - p[1]:.1f}"

    lines = [
        "digraph {",
        "\tgraph [splines=true]",
        "\tnode [align=left fontname=monospace fontsize=10 shape=box style=filled "
        "fixedsize=true]",
    ]
    for n in snapshot.nodes:
        w, h = layout.sizes[n.id]
        label = drawn_label(n).replace("\\", "\\\\").replace('"', '\\"')
        fill = _fill(n.kind)
        lines.append(f'\t"{n.id}" [label="{label}" fillcolor={fill} '
                     f'pos="{pt(layout.positions[n.id])}!" width={w / 72:.3f} '
                     f"height={h / 72:.3f}]")
    for s, d, style, pts in layout.edges:
        if style == "none":
            attr = f'dir=none pos="{" ".join(pt(p) for p in pts)}"'
        else:  # stop the curve short of the box: Graphviz draws the arrowhead in the gap
            tip = pts[-1]
            dx, dy = tip[0] - pts[-2][0], tip[1] - pts[-2][1]
            norm = max((dx * dx + dy * dy) ** 0.5, 1e-6)
            back = (tip[0] - 9 * dx / norm, tip[1] - 9 * dy / norm)
            moved = [*pts[:-2], (pts[-2][0], pts[-2][1] - 9 * dy / norm), back]
            spline = " ".join(pt(p) for p in moved)
            attr = f'pos="e,{pt(tip)} {spline}"' + (" style=dotted" if style else "")
        lines.append(f'\t"{s}" -> "{d}" [{attr}]')
    lines.append("}")
    return "\n".join(lines) + "\n"


def svg_text(snapshot: GraphSnapshot, layout: Layout) -> str:
    """Our own SVG writer: boxes in torchviz's colours, monospace labels, Bezier edges."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{layout.width:.0f}pt" '
        f'height="{layout.height:.0f}pt" viewBox="0 0 {layout.width:.1f} {layout.height:.1f}">',
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" "
        "markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\">"
        "<path d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>",
        '<rect width="100%" height="100%" fill="white"/>',
        f"<title>autograd graph, step {snapshot.step}</title>",
        *([f'<text x="10" y="40" font-family="monospace" font-size="10">'
           f"{escape(snapshot.summary())}</text>"] if snapshot.is_empty else []),
        '<g fill="none" stroke="black">',
    ]
    for _s, _d, style, pts in layout.edges:
        d = f"M{pts[0][0]:.1f},{pts[0][1]:.1f} C" + " ".join(
            f"{x:.1f},{y:.1f}" for x, y in pts[1:])
        extra = "" if style == "none" else ' marker-end="url(#arrow)"'
        if style == "dotted":
            extra += ' stroke-dasharray="2,3"'
        out.append(f'<path d="{d}"{extra}/>')
    out.append("</g>")
    out.append('<g font-family="monospace" font-size="10" text-anchor="middle">')
    for n in snapshot.nodes:
        x, y = layout.positions[n.id]
        w, h = layout.sizes[n.id]
        lines = drawn_label(n).split("\n")
        out.append(f'<g class="node"><title>{escape(n.id)}</title>')
        out.append(f'<rect x="{x - w / 2:.1f}" y="{y - h / 2:.1f}" width="{w:.1f}" '
                   f'height="{h:.1f}" fill="{HEX[_fill(n.kind)]}" stroke="black"/>')
        top = y - (len(lines) - 1) * LINE_H / 2 + 3.5
        for i, line in enumerate(lines):
            out.append(f'<text x="{x:.1f}" y="{top + i * LINE_H:.1f}">{escape(line)}</text>')
        out.append("</g>")
    out.append("</g></svg>")
    return "\n".join(out) + "\n"

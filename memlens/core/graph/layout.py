"""Graph layout: our own fast layered (Sugiyama-style) layout in numpy, and the engine choice.

Graphviz `dot` draws small graphs best but took minutes on a 2,000-node unrolled LSTMCell
graph; the layered layout here handles that in a fraction of a second, so `auto` gives dot a
short, bounded try on small graphs and uses ours otherwise. Coordinates are pixels, y down,
node positions are centres.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

import numpy as np

from memlens.core.graph import graphviz
from memlens.core.graph.layout_types import Layout, LayoutCancelled, LayoutRequest, Point

RANK_GAP = 36.0  # vertical space between layers
NODE_GAP = 14.0  # horizontal space between neighbours in a layer
MARGIN = 12.0

# `auto` tries Graphviz dot only on graphs this small, and only for this long.
DOT_MAX_NODES = 700
DOT_TIME_LIMIT_S = 1.0
DOT_CHOSEN_TIME_S = 60.0  # when the user picks dot explicitly

__all__ = ["Layout", "LayoutCancelled", "LayoutRequest", "Point", "layered_layout",
           "layout_graph"]


def layout_graph(
    request: LayoutRequest,
    engine: str = "auto",
    *,
    time_limit: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    dot_max_nodes: int = DOT_MAX_NODES,
) -> Layout:
    """Lay out with `engine`: "layered" (ours), "dot" (Graphviz, up to DOT_CHOSEN_TIME_S),
    or "auto": Graphviz dot races our layout on graphs of up to `dot_max_nodes` and wins if
    it finishes within `time_limit` (DOT_TIME_LIMIT_S); otherwise ours, already done.
    `Layout.dot_lost` tells the caller that dot was too slow at this size.
    """
    start = time.perf_counter()
    notes: list[str] = []
    job = None
    if engine in ("auto", "dot") and request.ids:
        dot = graphviz.find_dot()
        if dot is None:
            notes.append(graphviz.missing_text())
        elif engine == "auto" and len(request.ids) > dot_max_nodes:
            why = ("over {:,} nodes it can take minutes" if dot_max_nodes == DOT_MAX_NODES
                   else "it ran out of time on graphs over {:,} nodes here")
            notes.append(f"{len(request.ids):,} nodes: Graphviz dot skipped "
                         f"({why.format(dot_max_nodes)})")
        else:
            try:
                job = graphviz.DotLayoutJob(request, dot)
            except graphviz.DotError as exc:
                notes.append(str(exc))
    if job is not None and engine == "dot":
        try:
            out = job.result(time_limit or DOT_CHOSEN_TIME_S, should_stop)
            out.notes = notes
            return out
        except graphviz.DotError as exc:
            if should_stop is not None and should_stop():
                raise LayoutCancelled from None
            notes.append(str(exc))
            job = None
    try:
        ours = layered_layout(request, should_stop=should_stop)
    except LayoutCancelled:
        if job is not None:
            job.kill()
        raise
    if job is not None:
        left = (time_limit or DOT_TIME_LIMIT_S) - (time.perf_counter() - start)
        try:
            out = job.result(max(left, 0.0), should_stop)
            out.notes = notes
            return out
        except graphviz.DotError as exc:
            if should_stop is not None and should_stop():
                raise LayoutCancelled from None
            notes.append(f"{exc}; used memlens' layered layout")
            ours.dot_lost = True
    ours.notes = notes + ours.notes
    return ours


# --- the layered layout ---------------------------------------------------------------------
def layered_layout(
    request: LayoutRequest,
    *,
    sweeps: int = 4,
    passes: int = 8,
    deadline_s: float = 5.0,
    should_stop: Callable[[], bool] | None = None,
) -> Layout:
    """Layers by longest path (as late as possible), barycentre ordering, then x by isotonic
    regression (each node as close to the mean of its neighbours as the layer's order allows).

    Refinement stops early at `deadline_s`; the result is then still a valid layout.
    """
    t0 = time.perf_counter()
    ids = list(request.ids)
    n = len(ids)
    if n == 0:
        return Layout({}, {}, [], 0.0, 0.0, "memlens layered")
    index = {k: i for i, k in enumerate(ids)}
    w = np.array([s[0] for s in request.sizes], dtype=float)
    h = np.array([s[1] for s in request.sizes], dtype=float)
    attached = np.zeros(n, dtype=bool)
    for k in request.attached:
        if k in index:
            attached[index[k]] = True

    pairs = {(index[s], index[d]) for s, d, _ in request.edges
             if s in index and d in index and s != d}
    src, dst = _acyclic(n, sorted(pairs))

    def stop() -> None:
        if should_stop is not None and should_stop():
            raise LayoutCancelled

    layer = _layers(n, src, dst, attached, w)
    stop()
    rows = _Rows(n, src, dst, layer, w)
    _order(rows, sweeps, t0 + deadline_s / 3, stop)
    _x_positions(rows, passes, t0 + deadline_s, stop)
    x = np.array(rows.x)

    n_layers = int(layer.max()) + 1
    layer_h = np.zeros(n_layers)
    np.maximum.at(layer_h, layer, h)
    tops = MARGIN + np.concatenate([[0.0], np.cumsum(layer_h + RANK_GAP)[:-1]])
    y = tops[layer] + layer_h[layer] / 2
    x = x - (x - w / 2).min() + MARGIN

    positions = {ids[i]: (float(x[i]), float(y[i])) for i in range(n)}
    sizes = {ids[i]: (float(w[i]), float(h[i])) for i in range(n)}
    edges = [
        (s, d, style, _curve(positions[s], sizes[s], positions[d], sizes[d], style))
        for s, d, style in dict.fromkeys(request.edges)
        if s in positions and d in positions and s != d
    ]
    width = float((x + w / 2).max() + MARGIN)
    height = float(tops[-1] + layer_h[-1] + MARGIN)
    return Layout(positions, sizes, edges, width, height, "memlens layered",
                  time.perf_counter() - t0)


def _acyclic(n: int, pairs: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Edges as arrays, with the few that close a cycle reversed (Kahn's order, forced)."""
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    if len(src) == 0:
        return src, dst
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = np.bincount(dst, minlength=n)
    for s, d in pairs:
        succ[s].append(d)
    rank = np.full(n, -1, dtype=np.int64)
    ready = [i for i in range(n) if indeg[i] == 0]
    done = 0
    left = indeg.copy()
    while done < n:
        if not ready:  # a cycle: take the waiting node with the fewest unmet inputs
            waiting = np.flatnonzero(rank < 0)
            ready.append(int(waiting[np.argmin(left[waiting])]))
        v = ready.pop()
        if rank[v] >= 0:
            continue
        rank[v] = done
        done += 1
        for d in succ[v]:
            left[d] -= 1
            if left[d] == 0 and rank[d] < 0:
                ready.append(d)
    back = rank[src] > rank[dst]
    src2 = np.where(back, dst, src)
    dst2 = np.where(back, src, dst)
    return src2, dst2


def _topo(n: int, src: np.ndarray, dst: np.ndarray) -> list[int]:
    succ: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        succ[s].append(d)
    left = np.bincount(dst, minlength=n) if len(dst) else np.zeros(n, dtype=np.int64)
    out = [i for i in range(n) if left[i] == 0]
    k = 0
    while k < len(out):
        for d in succ[out[k]]:
            left[d] -= 1
            if left[d] == 0:
                out.append(d)
        k += 1
    return out


def _layers(
    n: int, src: np.ndarray, dst: np.ndarray, attached: np.ndarray, w: np.ndarray,
) -> np.ndarray:
    """Layers by longest path to the output, then shortened and balanced the way dot's
    ranking is: a node with more inputs than outputs moves up next to its latest input, one
    with more outputs moves down, and one with as many of each goes to the least crowded
    layer it may take. Single-input chains hanging from a source (leaf -> AccumulateGrad ->
    t()) follow their first use; attached nodes sit just below their op.
    """
    order = _topo(n, src, dst)
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        succ[s].append(d)
        pred[d].append(s)
    outs = [[d for d in succ[v] if not attached[d]] for v in range(n)]
    chain = np.zeros(n, dtype=bool)
    for v in order:
        chain[v] = not attached[v] and (
            not pred[v] or (len(pred[v]) == 1 and chain[pred[v][0]]))
    height = np.zeros(n, dtype=np.int64)  # longest path to a sink, ignoring attached nodes
    for v in reversed(order):
        hs = [height[d] + 1 for d in outs[v]]
        height[v] = max(hs) if hs else 0
    layer = height.max() - height

    def settle_chains() -> None:
        for v in reversed(order):
            if chain[v] and not attached[v] and outs[v]:
                layer[v] = min(layer[d] for d in outs[v]) - 1

    movable = [v for v in order if not attached[v] and not chain[v]]
    for _ in range(3):
        settle_chains()
        base = int(layer.min())
        load = np.bincount(layer - base, weights=w, minlength=int(layer.max()) - base + 1)
        moved = False
        for v in movable:
            fixed = [layer[p] for p in pred[v] if not chain[p]]
            lo = max(fixed) + 1 if fixed else base
            hi = min(layer[d] for d in outs[v]) - 1 if outs[v] else layer[v]
            if lo > hi:
                continue
            if len(fixed) > len(outs[v]):
                target = lo
            elif len(outs[v]) > len(fixed) or hi - lo > 400:
                target = hi
            else:  # neither way shortens edges: spread out wide layers
                target = lo + int(np.argmin(load[lo - base: hi - base + 1]))
                if load[target - base] >= load[layer[v] - base]:
                    target = int(layer[v])
            if target != layer[v]:
                load[layer[v] - base] -= w[v]
                load[target - base] += w[v]
                layer[v] = target
                moved = True
        if not moved:
            break
    settle_chains()
    for v in order:
        if attached[v] and pred[v]:
            layer[v] = max(layer[p] for p in pred[v]) + 1
    used = np.unique(layer)  # drop layers left empty
    return np.searchsorted(used, layer)


class _Rows:
    """The layers as Python lists: most layers hold a handful of nodes, where list work beats
    numpy's per-call overhead many times over."""

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray, layer: np.ndarray,
                 w: np.ndarray) -> None:
        self.n_layers = int(layer.max()) + 1
        self.members: list[list[int]] = [[] for _ in range(self.n_layers)]
        for v in range(n):  # walk order within each layer to start with
            self.members[int(layer[v])].append(v)
        self.w = w.tolist()
        self.preds: list[list[int]] = [[] for _ in range(n)]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for s, d in zip(src.tolist(), dst.tolist(), strict=True):
            self.preds[d].append(s)
            self.succs[s].append(d)
        self.x = [0.0] * n
        for m in self.members:
            self.pack(m)

    def pack(self, m: list[int]) -> None:
        """Boxes side by side in this order, the row centred on 0."""
        w, x = self.w, self.x
        total = sum(w[v] for v in m) + NODE_GAP * (len(m) - 1)
        left = -total / 2
        for v in m:
            x[v] = left + w[v] / 2
            left += w[v] + NODE_GAP

    def mean_x(self, v: int, down: bool, up: bool) -> float | None:
        x = self.x
        total, count = 0.0, 0
        if down:
            for p in self.preds[v]:
                total += x[p]
                count += 1
        if up:
            for s in self.succs[v]:
                total += x[s]
                count += 1
        return total / count if count else None


def _order(rows: _Rows, sweeps: int, deadline: float, stop) -> None:
    """Barycentre crossing reduction over all edges (no dummy nodes: a long edge counts by
    where its far end sits now), sweeping down and up."""
    x = rows.x
    for sweep in range(2 * sweeps):
        down = sweep % 2 == 0
        k_range = range(1, rows.n_layers) if down else range(rows.n_layers - 2, -1, -1)
        for k in k_range:
            m = rows.members[k]
            if len(m) < 2:
                continue
            keys = {}
            for v in m:
                mean = rows.mean_x(v, down, not down)
                keys[v] = x[v] if mean is None else mean
            m.sort(key=keys.__getitem__)
            rows.pack(m)
        stop()
        if time.perf_counter() > deadline:
            break


def _x_positions(rows: _Rows, passes: int, deadline: float, stop) -> None:
    """Pull each node towards its neighbours' mean x, keeping the order and the gaps."""
    x, w = rows.x, rows.w
    for p in range(passes):
        mode = ("down", "up", "both")[p % 3] if p < passes - 2 else "both"
        k_range = range(rows.n_layers - 1, -1, -1) if mode == "up" else range(rows.n_layers)
        down, up = mode in ("down", "both"), mode in ("up", "both")
        for k in k_range:
            m = rows.members[k]
            want = []
            for v in m:
                mean = rows.mean_x(v, down, up)
                want.append(x[v] if mean is None else mean)
            for v, xv in zip(m, _isotonic_place(want, [w[v] for v in m]), strict=True):
                x[v] = xv
        stop()
        if time.perf_counter() > deadline:
            break


def _isotonic_place(want: list[float], widths: list[float]) -> list[float]:
    """Positions closest (least squares) to `want`, in this order, with no overlaps.

    With offsets o_i = the minimum distance from the first box, z_i = x_i - o_i must not
    decrease: isotonic regression of want - o, solved by pool-adjacent-violators.
    """
    if len(want) == 1:
        return want
    offsets = [0.0]
    for a, b in itertools.pairwise(widths):
        offsets.append(offsets[-1] + (a + b) / 2 + NODE_GAP)
    means: list[float] = []
    counts: list[int] = []
    for t, o in zip(want, offsets, strict=True):
        means.append(t - o)
        counts.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            m2, c2 = means.pop(), counts.pop()
            m1, c1 = means[-1], counts[-1]
            means[-1] = (m1 * c1 + m2 * c2) / (c1 + c2)
            counts[-1] = c1 + c2
    out = []
    for mean, count in zip(means, counts, strict=True):
        out.extend([mean] * count)
    return [z + o for z, o in zip(out, offsets, strict=True)]


def _curve(p: Point, ps: Point, q: Point, qs: Point, style: str) -> tuple[Point, ...]:
    """A cubic Bezier from the bottom of p's box to the top of q's box."""
    (x0, y0), (x1, y1) = p, q
    if y1 > y0:  # downwards, the usual case
        a = (x0, y0 + ps[1] / 2)
        b = (x1, y1 - qs[1] / 2)
    elif y1 < y0:  # upwards (a reversed cycle edge)
        a = (x0, y0 - ps[1] / 2)
        b = (x1, y1 + qs[1] / 2)
    else:  # same layer: side to side
        sign = 1.0 if x1 > x0 else -1.0
        a = (x0 + sign * ps[0] / 2, y0)
        b = (x1 - sign * qs[0] / 2, y1)
        mid = (a[0] + b[0]) / 2
        return (a, (mid, a[1] - 12), (mid, b[1] - 12), b)
    if style == "none":
        return (a, a, b, b)
    dy = (b[1] - a[1]) / 2
    return (a, (a[0], a[1] + dy), (b[0], b[1] - dy), b)

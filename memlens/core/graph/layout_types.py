"""What a graph layout takes and gives: shared by our layered layout and Graphviz's."""

from __future__ import annotations

from dataclasses import dataclass, field

Point = tuple[float, float]


class LayoutCancelled(Exception):
    """The caller no longer wants this layout (a newer one was asked for)."""


@dataclass
class Layout:
    """Where every node goes, and each edge as a cubic Bezier: p0, (c1, c2, p)... .

    All tuples of numbers and strings, which the garbage collector stops tracking: a shown
    2,000-node layout is otherwise ~8,000 more objects for every full collection to walk.
    """

    positions: dict[str, Point]
    sizes: dict[str, Point]
    edges: list[tuple[str, str, str, tuple[Point, ...]]]
    width: float
    height: float
    engine: str  # "graphviz dot" | "memlens layered"
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    dot_lost: bool = False  # an `auto` race that dot did not finish in time


@dataclass(frozen=True)
class LayoutRequest:
    """What a layout needs: node ids and sizes, edges (src, dst, style), attached nodes.

    Attached nodes (saved tensors hanging off an op) sit one layer below their op instead of
    being pulled down to the output's layer.
    """

    ids: tuple[str, ...]
    sizes: tuple[Point, ...]
    edges: tuple[tuple[str, str, str], ...]
    attached: frozenset[str] = frozenset()

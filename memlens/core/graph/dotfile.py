"""DOT text: torchviz's make_dot, a small parser for it, and our writer in the same form."""

from __future__ import annotations

import itertools
import re
import sys
import warnings
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from memlens.core.graph.snapshot import TORCHVIZ_COLOURS, GraphEdge, GraphNode

# make_dot's node style, reused by our own writer so both DOTs look the same.
NODE_ATTR = dict(style="filled", shape="box", align="left", fontsize="10", ranksep="0.1",
                 height="0.2", fontname="monospace")
COLOUR_KIND = {"lightblue": "param", "orange": "saved", "darkolivegreen1": "output",
               "darkolivegreen3": "output", "": "op"}


def torchviz_dot(loss: Any, params: dict[str, Any], depth_hint: int = 0) -> str:
    """make_dot(loss, params, show_saved=True).source; deep graphs get the recursion room
    make_dot's recursive walk needs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchviz imports distutils' LooseVersion
        from torchviz import make_dot

        limit = sys.getrecursionlimit()
        need = depth_hint + 1000
        if need > limit:
            sys.setrecursionlimit(need)
        try:
            return make_dot(loss, params=params, show_saved=True).source
        finally:
            if need > limit:
                sys.setrecursionlimit(limit)


# --- parsing ------------------------------------------------------------------------------
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|->|--|[{}\[\];=,]|[^\s{}\[\];=,"]+', re.S)


def _unquote(tok: str) -> str:
    if len(tok) >= 2 and tok[0] == '"' and tok[-1] == '"':
        return re.sub(r'\\(["\\])', r"\1", tok[1:-1])
    return tok


def parse_dot(text: str) -> tuple[dict[str, dict[str, str]], list[tuple[str, str, dict]]]:
    """Nodes {id: attrs} (later statements update earlier ones) and edges [(src, dst, attrs)].

    Enough of the DOT language for what make_dot and our writer produce (one graph, no
    subgraphs); raises ValueError on anything else.
    """
    toks = _TOKEN.findall(text)
    pos = 0
    nodes: dict[str, dict[str, str]] = {}
    edges: list[tuple[str, str, dict]] = []

    def attrs() -> dict[str, str]:
        nonlocal pos
        out: dict[str, str] = {}
        while pos < len(toks) and toks[pos] == "[":
            pos += 1
            while toks[pos] != "]":
                key = _unquote(toks[pos])
                if toks[pos + 1] != "=":
                    raise ValueError(f"DOT: expected '=' after {key!r}")
                out[key] = _unquote(toks[pos + 2])
                pos += 3
                if toks[pos] in (",", ";"):
                    pos += 1
            pos += 1
        return out

    while pos < len(toks) and toks[pos] != "{":
        pos += 1
    if pos == len(toks):
        raise ValueError("DOT: no graph body")
    pos += 1
    while pos < len(toks) and toks[pos] != "}":
        tok = toks[pos]
        if tok == ";":
            pos += 1
            continue
        if tok in ("graph", "node", "edge"):
            pos += 1
            attrs()
            continue
        if tok in ("{", "[", "subgraph"):
            raise ValueError("DOT: subgraphs are not supported here")
        chain = [_unquote(tok)]
        pos += 1
        if pos < len(toks) and toks[pos] == "=":  # graph attribute a=b
            pos += 2
            continue
        while pos < len(toks) and toks[pos] in ("->", "--"):
            chain.append(_unquote(toks[pos + 1]))
            pos += 2
        a = attrs()
        if len(chain) == 1:
            nodes.setdefault(chain[0], {}).update(a)
        else:
            for s, d in itertools.pairwise(chain):
                nodes.setdefault(s, {})
                nodes.setdefault(d, {})
                edges.append((s, d, a))
    if pos == len(toks):
        raise ValueError("DOT: missing closing brace")
    return nodes, edges


def map_dot_ids(walk: Any, dot_nodes: dict[str, dict], dot_edges: list) -> tuple[dict, list]:
    """Match our walk's nodes to make_dot's: {walk id: DOT id} and a list of disagreements.

    Most nodes share an id (the same Python object). A saved output (`_saved_result`) is a
    fresh tensor object on every read, so make_dot's differs from ours: those match by the
    op that saved them and their label.
    """
    ids: dict[str, str] = {}
    unmatched = []
    for did in dot_nodes:
        if did in walk.nodes:
            ids[did] = did
        else:
            unmatched.append(did)
    waiting: dict[tuple[str, str], list[str]] = defaultdict(list)
    for n in walk.nodes.values():
        if n.id not in ids:
            waiting[(n.owner, n.label)].append(n.id)
    left = set(unmatched)
    owner: dict[str, str] = {}
    for s, d, a in dot_edges:
        if a.get("dir") == "none":
            if d in left:
                owner.setdefault(d, s)
            elif s in left:
                owner.setdefault(s, d)
    problems = []
    for did in unmatched:
        queue = waiting.get((owner.get(did, ""), dot_nodes[did].get("label", "")))
        if queue:
            ids[queue.pop(0)] = did
        else:
            problems.append(f"DOT node {did} ({dot_nodes[did].get('label', '')!r}) "
                            "has no match in the graph walk")
    for wid, n in walk.nodes.items():
        if wid not in ids:
            problems.append(f"walk node {n.label!r} ({n.kind}) is not in the DOT")
        else:
            colour = dot_nodes[ids[wid]].get("fillcolor", "")
            if COLOUR_KIND.get(colour, "?") != n.kind:
                problems.append(f"node {n.label!r}: {n.kind} here, {colour or 'grey'} in DOT")
    if problems:
        problems = [f"view and DOT disagree on {len(problems)} nodes", *problems[:5]]
    return ids, problems


# --- writing ------------------------------------------------------------------------------
def memlens_dot(nodes: Iterable[GraphNode], edges: Iterable[GraphEdge]) -> str:
    """A DOT in make_dot's form, for graphs make_dot could not draw (freed buffers)."""
    from graphviz import Digraph

    dot = Digraph(node_attr=NODE_ATTR, graph_attr=dict(size="12,12"))
    for n in nodes:
        label = n.label
        if any(t.problem for t in n.saved) and n.kind == "op":
            label = f"{n.label}\n(saved tensors unreadable)"
        if n.kind == "op":
            dot.node(n.id, label)
        else:
            dot.node(n.id, label, fillcolor=TORCHVIZ_COLOURS[n.kind])
    for src, dst, style in edges:
        if style == "none":
            dot.edge(src, dst, dir="none")
        elif style == "dotted":
            dot.edge(src, dst, style="dotted")
        else:
            dot.edge(src, dst)
    return dot.source

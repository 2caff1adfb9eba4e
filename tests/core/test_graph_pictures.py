"""The headless graph picture and the module groups, as a user reads them: each box holds its
text, a saved tensor shows its bytes, a group says which module (path and class) it is."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import torch
from torch import nn

from memlens.core.graph import graphviz
from memlens.core.graph.capture import GraphCapture
from memlens.core.graph.export import export_graph
from memlens.core.graph.groups import view_graph
from memlens.core.graph.snapshot import GraphSnapshot

SVG = "{http://www.w3.org/2000/svg}"
MONO_ADVANCE = 0.6  # a monospace glyph's advance, in em (DejaVu/Liberation Mono: 0.6)
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()),
        nn.Flatten(), nn.Linear(8 * 6 * 6, 10))


def capture(model: nn.Module) -> GraphSnapshot:
    cap = GraphCapture({"model": model})
    cap.begin()
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 6, 6)), torch.tensor([1, 2, 3, 4]))
    return cap.finish(loss, 0)


def test_module_groups_are_named_by_path_and_class():
    model = conv_net()
    snap = capture(model)
    classes = {name: type(m).__name__ for name, m in model.named_modules() if name}
    view = view_graph(snap, grouped=True)
    groups = {v.group: v.title for v in view.nodes if v.kind == "group"}
    assert groups, "the conv net's calls should group"
    for key, title in groups.items():
        assert title == f"{key}: {classes[key]}", (key, title)
    assert "0: Sequential" in groups.values()
    inner = view_graph(snap, {"0"}, grouped=True)
    titles = {v.title for v in inner.nodes if v.kind == "group"}
    assert {"0.0: Conv2d", "0.1: BatchNorm2d"} <= titles, titles
    again = GraphSnapshot.from_dict(snap.to_dict())  # a saved capture keeps the names
    assert again.module_types == snap.module_types


@pytest.mark.skipif(graphviz.find_dot() is None, reason="needs a Graphviz dot binary")
def test_graph_svg_boxes_hold_their_text_and_saved_tensors_show_bytes(tmp_path):
    snap = capture(conv_net())
    out = export_graph(snap, tmp_path / "g.svg").path
    root = ET.parse(out).getroot()
    nodes = [g for g in root.iter(f"{SVG}g") if g.get("class") == "node"]
    assert len(nodes) == snap.node_count
    saved_seen = 0
    for g in nodes:
        poly = g.find(f"{SVG}polygon")
        xs = [float(p.split(",")[0]) for p in poly.get("points").split()]
        texts = [t for t in g.findall(f"{SVG}text")]
        size = float(texts[0].get("font-size"))
        widest = max(len((t.text or "").strip()) for t in texts) * MONO_ADVANCE * size
        assert max(xs) - min(xs) >= widest, ([t.text for t in texts], max(xs) - min(xs))
        if poly.get("fill") == "orange":  # a saved tensor: name, shape, bytes
            lines = [(t.text or "").strip() for t in texts]
            if lines[-1] == "parameter":
                continue
            dims = [int(d) for d in re.findall(r"\d+", lines[-2])]
            numel = 1
            for d in dims:
                numel *= d
            value, unit = lines[-1].split()
            expected = numel * (8 if lines[0] == "target" else 4)  # int64 labels, else float32
            assert abs(float(value) * UNITS[unit] - expected) <= 0.01 * expected, lines
            saved_seen += 1
    assert saved_seen >= 4

"""Graph capture on the real loop: the ops and leaves, saved bytes equal to the engine's,
torchviz's node set, valid exports, and what toggles do to the graph."""

from __future__ import annotations

import itertools
import json
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

from memlens.core.config import RunConfig
from memlens.core.controls import RunControls
from memlens.core.graph import graphviz
from memlens.core.graph.capture import NO_GRAPH, GraphCapture
from memlens.core.graph.dotfile import COLOUR_KIND, parse_dot, torchviz_dot
from memlens.core.graph.export import export_graph
from memlens.core.graph.groups import view_graph
from memlens.core.graph.layout import LayoutRequest, layered_layout, layout_graph
from memlens.core.graph.snapshot import GraphSnapshot
from memlens.core.loop import run_training
from memlens.core.preset_factory import build_preset
from memlens.core.runfolder.atomic import ExportError
from memlens.core.sinks import Sink
from tests.core.helpers import TINY, run, tiny_config

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Graphs(Sink):
    """A sink keeping every snapshot (and every step record)."""

    def __init__(self) -> None:
        self.snapshots: list[GraphSnapshot] = []
        self.records = {}

    def on_graph(self, snapshot) -> None:
        self.snapshots.append(snapshot)

    def on_steps(self, rows) -> None:
        for record, _ in rows:
            self.records[record.step] = record

    def of(self, kind: str) -> list[GraphSnapshot]:
        return [s for s in self.snapshots if s.kind == kind]


def captured(preset: str = "mlp", steps: int = 1, **values) -> Graphs:
    sink = Graphs()
    run(preset, steps=steps, sink=sink, capture_every=1, **values)
    return sink


def param_names(preset: str, **values) -> set[str]:
    p = build_preset(tiny_config(preset, **values), torch.device("cpu"))
    if len(p.models) == 1:
        return {n for m in p.models.values() for n, _ in m.named_parameters()}
    return {f"{k}.{n}" for k, m in p.models.items() for n, _ in m.named_parameters()}


@pytest.fixture(scope="module")
def mlp() -> Graphs:
    return captured("mlp", steps=2)


def test_mlp_graph_has_the_expected_ops_and_parameter_leaves(mlp):
    snap = mlp.of("train")[0]
    ops = Counter(snap.ops())
    names = param_names("mlp")
    linears = len(names) // 2
    assert ops["AddmmBackward0"] == linears
    assert ops["ReluBackward0"] == linears - 1
    assert ops["NllLossBackward0"] == 1 and ops["LogSoftmaxBackward0"] == 1
    assert ops["AccumulateGrad"] == len(names)
    leaves = {n.param for n in snap.nodes if n.kind == "param"}
    assert leaves == names
    # Each parameter's node sits in the scope of the Linear that owns it.
    for n in snap.nodes:
        if n.kind == "param":
            assert n.module == n.param.rsplit(".", 1)[0]
    (out,) = [n for n in snap.nodes if n.kind == "output"]
    assert out.shape == ()
    assert mlp.records[0].graph_nodes == sum(ops.values())


@pytest.mark.parametrize("preset", ["mlp", "cnn", "lstm", "gan", "transformer"])
def test_saved_bytes_equal_the_engines_figure(preset):
    sink = captured(preset, steps=2)
    for snap in sink.of("train"):
        assert snap.saved_bytes > 0
        assert snap.saved_bytes == sink.records[snap.step].saved_bytes
        # each storage once: the ops' shares add up to the total
        assert sum(n.saved_bytes for n in snap.nodes) == snap.saved_bytes
        assert not snap.notes


def test_saved_bytes_count_a_shared_storage_once_and_skip_parameters():
    lin = nn.Linear(4, 4)
    cap = GraphCapture({"model": lin})
    cap.begin()
    x = torch.randn(3, 4, requires_grad=True)
    h = lin(x)
    loss = (h * h).sum() + (lin.weight * 2).sum()  # h saved twice; the weight saved by Mul
    snap = cap.finish(loss, 0)
    stored = [t for n in snap.nodes if n.kind == "op" for t in n.saved]
    assert any(t.is_param for t in stored)
    keys = {t.storage for t in stored if not t.is_param}
    expected = sum(next(t.bytes for t in stored if t.storage == k) for k in keys)
    assert snap.saved_bytes == expected
    assert sum(t.counted for t in stored) == len(keys)


def test_dot_is_torchviz_and_the_view_has_its_node_set():
    model = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 2))
    cap = GraphCapture({"model": model})
    cap.begin()
    loss = model(torch.randn(4, 5)).pow(2).mean()
    snap = cap.finish(loss, 3)
    assert snap.dot_by == "torchviz" and not snap.notes
    nodes, edges = parse_dot(snap.dot)
    assert set(nodes) == {n.id for n in snap.nodes}
    for n in snap.nodes:
        assert COLOUR_KIND[nodes[n.id].get("fillcolor", "")] == n.kind
        assert nodes[n.id]["label"] == n.label
    assert len(edges) == len(snap.edges)
    # A make_dot of our own on the same loss draws the same nodes (labels and colours).
    again, _ = parse_dot(torchviz_dot(loss, dict(model.named_parameters())))
    seen = Counter((a.get("label"), a.get("fillcolor", "")) for a in again.values())
    ours = Counter((a.get("label"), a.get("fillcolor", "")) for a in nodes.values())
    assert seen == ours
    # and Graphviz itself reads the DOT with that many nodes
    dot = graphviz.find_dot()
    if dot is not None:
        plain = graphviz.run_dot(dot, snap.dot, ["-Tplain"], timeout=30).decode()
        assert sum(1 for line in plain.splitlines() if line.startswith("node ")) == len(nodes)


def test_custom_function_saved_tensors_match_torchviz():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    lin = nn.Linear(3, 3)
    cap = GraphCapture({"model": lin})
    cap.begin()
    loss = Square.apply(lin(torch.randn(2, 3))).sum()
    snap = cap.finish(loss, 0)
    assert not snap.notes
    nodes, _ = parse_dot(snap.dot)
    assert set(nodes) == {n.id for n in snap.nodes}
    (op,) = [n for n in snap.nodes if n.op == "SquareBackward"]
    assert [t.shape for t in op.saved] == [(2, 3)]
    assert op.saved_bytes == 2 * 3 * 4  # its input, float32
    assert snap.saved_bytes == sum(n.saved_bytes for n in snap.nodes)


@pytest.mark.skipif(graphviz.find_dot() is None, reason="needs a dot binary (graphviz-pure)")
def test_svg_and_png_are_valid_files(mlp, tmp_path, monkeypatch):
    snap = mlp.of("train")[0]
    svg = export_graph(snap, tmp_path / "g.svg")
    root = ET.parse(svg.path).getroot()
    assert root.tag.endswith("svg")
    titles = {t.text for t in root.iter("{http://www.w3.org/2000/svg}title")}
    assert {n.id for n in snap.nodes} <= titles
    png = export_graph(snap, tmp_path / "g.png")
    data = png.path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 100
    assert "layout and drawing" in png.how
    # A graph too large for a dot layout: our layout, drawn by dot with positions pinned.
    monkeypatch.setattr("memlens.core.graph.export.DOT_MAX_NODES", 5)
    pinned = export_graph(snap, tmp_path / "pinned.svg")
    assert "memlens layered layout drawn by" in pinned.how
    titles = {t.text for t in ET.parse(pinned.path).getroot().iter(
        "{http://www.w3.org/2000/svg}title")}
    assert {n.id for n in snap.nodes} <= titles
    dot = export_graph(snap, tmp_path / "g.dot")
    assert dot.path.read_text() == snap.dot


def test_without_graphviz_svg_comes_from_our_writer_and_png_says_what_to_install(
        mlp, tmp_path, monkeypatch):
    monkeypatch.setenv(graphviz.ENV_VAR, "none")
    snap = mlp.of("train")[0]
    out = export_graph(snap, tmp_path / "g.svg")
    assert out.how == "memlens layered layout and SVG writer"
    root = ET.parse(out.path).getroot()
    ids = {t.text for t in root.iter("{http://www.w3.org/2000/svg}title")}
    assert {n.id for n in snap.nodes} <= ids
    with pytest.raises(ExportError, match="pip install graphviz-pure"):
        export_graph(snap, tmp_path / "g.png")
    assert not (tmp_path / "g.png").exists()
    layout = layout_graph(LayoutRequest(("a", "b"), ((40, 20), (40, 20)), (("a", "b", ""),)))
    assert layout.engine == "memlens layered"
    assert "graphviz-pure" in layout.notes[0]


def test_no_grad_eval_gives_an_empty_graph_and_grad_eval_a_full_one():
    sink = captured("mlp", steps=1, eval_every=1)
    (train,), (ev,) = sink.of("train"), sink.of("eval")
    assert ev.is_empty and ev.message == NO_GRAPH and ev.saved_bytes == 0
    assert "no_grad" in ev.summary()
    assert train.node_count > 0
    sink = captured("mlp", steps=1, eval_every=1, no_grad_eval=False)
    (ev,) = sink.of("eval")
    assert not ev.is_empty and ev.saved_bytes > 0


def test_amp_adds_the_cast_nodes():
    plain = captured("mlp")
    amp = captured("mlp", amp="bf16")
    casts = Counter(amp.of("train")[0].ops())["ToCopyBackward0"]
    assert Counter(plain.of("train")[0].ops())["ToCopyBackward0"] == 0
    assert casts >= len(param_names("mlp")) // 2  # at least each Linear's weight
    bf16 = [t for n in amp.of("train")[0].nodes for t in n.saved if t.dtype == "bfloat16"]
    assert bf16


def test_lstm_graph_grows_from_capture_to_capture_without_detach():
    cfg = tiny_config("lstm", steps=4, detach_state=False, retain_graph=True, capture_every=1)
    sink = Graphs()
    sink.on_start = sink.on_samples = sink.on_event = sink.on_finish = lambda *a: None
    run_training(cfg, RunControls(cfg.techniques), sink, on_error="continue")
    counts = [s.node_count for s in sink.of("train")]
    saved = [s.saved_bytes for s in sink.of("train")]
    assert len(counts) == 4
    assert all(b > a for a, b in itertools.pairwise(counts))
    assert all(b > a for a, b in itertools.pairwise(saved))
    # detached, every capture is the same size
    steady = [s.node_count for s in captured("lstm", steps=3).of("train")]
    assert len(set(steady)) == 1 and steady[0] == counts[0]


def test_lstm_cell_graph_groups_by_module_call():
    sink = captured("lstm", lstm_cell=True)
    snap = sink.of("train")[0]
    seq_len = TINY["lstm"]["seq_len"]
    calls = {s for n in snap.nodes for s in n.scope if s.startswith("rnn#")}
    assert calls == {f"rnn#{i}" for i in range(seq_len)}
    assert {n.scope for n in snap.nodes if n.kind == "param" and n.param.startswith("rnn.")} \
        == {("rnn",)}
    full = view_graph(snap)
    grouped = view_graph(snap, grouped=True)
    assert len(full.nodes) == snap.node_count
    assert len(grouped.nodes) < snap.node_count / 3
    groups = {v.group for v in grouped.nodes if v.kind == "group"}
    assert calls <= groups
    ids = {v.id for v in grouped.nodes}
    assert all(s in ids and d in ids for s, d, _ in grouped.edges)
    # every snapshot node is drawn exactly once: as itself or inside its group
    members = [m for v in grouped.nodes for m in v.members]
    assert len(members) + sum(1 for v in grouped.nodes if v.kind != "group") == snap.node_count
    opened = view_graph(snap, {"rnn#3"}, grouped=True)
    inside = [v for v in opened.nodes if v.node is not None and "rnn#3" in v.node.scope]
    assert len(inside) == len(next(v for v in grouped.nodes if v.group == "rnn#3").members)
    assert sorted(opened.find(snap, "rnn #3")) == sorted(v.id for v in inside)


def test_layered_layout_places_every_node_without_overlaps():
    snap = captured("lstm", lstm_cell=True).of("train")[0]
    view = view_graph(snap)
    request = LayoutRequest(tuple(v.id for v in view.nodes),
                            tuple((60.0 + 6 * len(v.title), 30.0) for v in view.nodes),
                            view.edges, view.attached)
    layout = layered_layout(request)
    assert set(layout.positions) == set(request.ids)
    rows: dict[float, list[tuple[float, float]]] = {}
    for k, (x, y) in layout.positions.items():
        w = layout.sizes[k][0]
        rows.setdefault(y, []).append((x - w / 2, x + w / 2))
    for boxes in rows.values():
        boxes.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(boxes))
    # data flows down: every non-attached edge ends below where it starts
    for s, d, style in view.edges:
        if style != "none":
            assert layout.positions[d][1] > layout.positions[s][1]
    assert all(len(pts) == 4 for *_, pts in layout.edges)
    # Asked for dot with no time to run, it says so and falls back to ours.
    if graphviz.find_dot() is not None:
        quick = layout_graph(request, "dot", time_limit=0.001)
        assert quick.engine == "memlens layered"
        assert "did not finish" in quick.notes[-1]


def test_snapshot_is_plain_data_and_round_trips():
    snap = captured("gan").of("train")[0]
    data = json.loads(json.dumps(snap.to_dict()))
    back = GraphSnapshot.from_dict(data)
    assert back.nodes == snap.nodes and back.edges == snap.edges
    assert back.saved_bytes == snap.saved_bytes and back.dot == snap.dot
    # several models: parameter names carry the model's key
    assert {n.param.split(".")[0] for n in snap.nodes if n.kind == "param"} == {"G", "D"}


def test_a_kept_capture_costs_the_garbage_collector_little():
    """The app keeps dozens of captures, and every full collection walks each object the
    collector tracks (holding the GIL, so the GUI waits): a snapshot keeps its nodes and
    edges as tuples of strings and numbers, which it stops tracking, and still reads as
    GraphNode objects; view nodes have no per-instance dict."""
    import gc

    snap = captured("lstm", lstm_cell=True).of("train")[0]
    assert snap.node_count > 250 and len(snap.edges) > 250
    for _ in range(4):  # a collection untracks nested tuples a level or so at a time
        gc.collect()
    tracked, seen, todo = 0, set(), [snap]
    while todo:  # every object the snapshot holds, not following into classes
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        tracked += gc.is_tracked(obj)
        todo += gc.get_referents(obj)
    assert tracked < 20, tracked
    op = next(n for n in snap.nodes if n.kind == "op" and n.saved)
    assert snap.node(op.id) == op and op.saved[0].bytes > 0
    assert snap.count("op") == sum(1 for n in snap.nodes if n.kind == "op")
    # what a shown graph keeps: view nodes (no dict, the snapshot node as a row) and
    # the layout's positions and edge curves, all plain tuples
    view = view_graph(snap)
    request = LayoutRequest(ids=tuple(v.id for v in view.nodes),
                            sizes=tuple((60.0, 30.0) for _ in view.nodes),
                            edges=view.edges, attached=view.attached)
    layout = layered_layout(request)
    for _ in range(4):
        gc.collect()
    assert not any(gc.is_tracked(e) for e in layout.edges)
    assert not any(gc.is_tracked(p) for p in layout.positions.values())
    shown = next(v for v in view.nodes if v.id == op.id)
    assert not hasattr(shown, "__dict__") and not gc.is_tracked(shown.row)
    assert shown.node == op


def test_hooks_come_off_after_finish_and_abort():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    cap = GraphCapture({"model": model})
    cap.begin()
    assert all(m._forward_hooks for m in model.children())
    cap.abort()
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    cap.begin()
    with torch.no_grad():
        out = model(torch.randn(1, 3)).sum()
    snap = cap.finish(out, 7, kind="eval")
    assert snap.is_empty and snap.step == 7 and snap.kind == "eval"
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_graph_command_writes_the_step_and_rejects_bad_input(tmp_path, capsys):
    import main

    sets = [a for k, v in TINY["mlp"].items() for a in ("--set", f"{k}={v}")]
    out = tmp_path / "g.dot"
    assert main.main(["graph", "--preset", "mlp", *sets, "--step", "2", "--out", str(out)]) == 0
    assert "step 2 (train)" in capsys.readouterr().out
    nodes, _ = parse_dot(out.read_text())
    assert len(nodes) > 20
    assert main.main(["graph", "--preset", "mlp", "--out", str(tmp_path / "g.txt")]) == 2
    assert ".dot, .svg or .png" in capsys.readouterr().err
    assert main.main(["graph", "--set", "nope=1", "--out", str(tmp_path / "g.svg")]) == 2
    assert "unknown setting 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "g.svg").exists()


def test_graph_command_imports_nothing_heavy():
    code = ("import sys, memlens.cli.graph, memlens.core.graph; "
            "print(','.join(m for m in ('torch', 'torchviz', 'numpy', 'PySide6') "
            "if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == ""


def test_graph_command_config_keeps_user_settings():
    from argparse import Namespace

    from memlens.cli.graph import graph_config

    args = Namespace(config=None, preset="cnn", sets=["amp=bf16", "eval_every=3"], step=4,
                     eval=True)
    cfg = graph_config(args)
    assert cfg.preset == "cnn" and cfg.techniques.amp == "bf16"
    assert cfg.steps == 5 and cfg.eval_every == 5 and cfg.capture_every == 0
    assert isinstance(cfg, RunConfig)

"""Watching a user's own script: what it records, and that it never changes the results."""

from __future__ import annotations

import gc
import json
import textwrap
import weakref

import pytest
import torch

from memlens.core.runfolder.reader import load_run
from memlens.core.watch.script import run_script

HEAD = """
import sys
import torch
from torch import nn
torch.manual_seed(0)
"""

ADAM_LOOP = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(int(sys.argv[1])):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    print(repr(loss.item()))
"""


def write(tmp_path, source: str, name: str = "train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def watch_script(tmp_path, source: str, args=(), out: str = "run"):
    """Run a script under watch in this process; returns (exit code, run.json, folder)."""
    path = write(tmp_path, source)
    folder = tmp_path / out
    code = run_script(str(path), list(args), out=folder, quiet=True)
    return code, json.loads((folder / "run.json").read_text()), folder


def plain(tmp_path, source: str, args=()):
    import runpy
    import sys

    path = write(tmp_path, source, "plain.py")
    old = sys.argv
    sys.argv = [str(path), *args]
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = old


def diagnoses(doc: dict, key: str | None = None) -> list[dict]:
    return [e for e in doc["events"] if e["kind"] == "diagnosis" and key in (None, e["key"])]


# --- item 1: the run folder --------------------------------------------------------------------


def test_watch_writes_a_run_folder_with_steps_phases_and_categories(tmp_path, capsys):
    code, doc, folder = watch_script(tmp_path, ADAM_LOOP, ["4"])
    assert code == 0
    assert doc["source"] == "watch" and doc["finished"] is True
    assert doc["argv"][1:] == ["4"] and doc["script"].endswith("train.py")
    assert doc["version"] >= 2 and doc["summary"]["steps_done"] == 4
    history = load_run(folder)
    assert len(history.steps) == 4
    phases = [r[1] for r in history.samples.rows()]
    from memlens.core.records import SAMPLE_PHASE_CODE

    step1 = [p for r, p in zip(history.samples.rows(), phases, strict=True) if r[0] == 1]
    assert step1 == [SAMPLE_PHASE_CODE[p]
                     for p in ("zero_grad", "forward", "backward", "optimizer")]
    # independent counts on the model the script made: parameters, and Adam's two moments
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    param_bytes = sum(p.nbytes for p in model.parameters())
    rows = {(int(r[0]), int(r[1])): r for r in history.samples.rows()}
    cols = history.samples.columns
    opt_row = rows[(2, SAMPLE_PHASE_CODE["optimizer"])]
    assert opt_row[cols.index("params")] == param_bytes
    assert opt_row[cols.index("grads")] == param_bytes  # every parameter has a gradient
    # Adam: exp_avg and exp_avg_sq per parameter, plus a 4-byte step counter each
    assert opt_row[cols.index("optimizer")] == 2 * param_bytes + 4 * len(list(model.parameters()))
    # the first step too, where the optimizer is found only at its step
    assert rows[(0, SAMPLE_PHASE_CODE["optimizer"])][cols.index("grads")] == param_bytes
    zero_row = rows[(2, SAMPLE_PHASE_CODE["zero_grad"])]
    assert zero_row[cols.index("grads")] == 0  # set_to_none
    fwd = rows[(2, SAMPLE_PHASE_CODE["forward"])]
    assert fwd[cols.index("activations")] > 0
    losses = [float(x) for x in capsys.readouterr().out.split()]
    # the file keeps 6 significant digits
    assert history.steps.column("loss").tolist() == pytest.approx(losses, rel=1e-5)


def test_activations_match_saved_tensor_hooks_on_plain_torch(tmp_path):
    """The forward sample's activations: the bytes autograd saves, counted independently."""
    _, _, folder = watch_script(tmp_path, ADAM_LOOP, ["2"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    x = torch.randn(32, 8)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            saved[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    from memlens.core.records import SAMPLE_PHASE_CODE

    history = load_run(folder)
    cols = history.samples.columns
    fwd = [r for r in history.samples.rows() if r[1] == SAMPLE_PHASE_CODE["forward"]]
    assert fwd[0][cols.index("activations")] == sum(saved.values())


def test_memlens_watch_api_phase_and_manual_steps(tmp_path):
    import memlens

    torch.manual_seed(0)
    w = torch.zeros(4, requires_grad=True)
    x = torch.randn(16, 4)
    with memlens.watch(out=tmp_path / "api") as watch:
        for _ in range(3):
            loss = (x @ w - 1).pow(2).mean()
            loss.backward()
            with watch.phase("optimizer"), torch.no_grad():
                w -= 0.1 * w.grad
                w.grad = None
            watch.step()
    history = load_run(tmp_path / "api")
    assert len(history.steps) == 3
    assert (history.steps.column("optimizer_ms") > 0).all()
    assert (history.steps.column("backward_ms") > 0).all()


def test_import_memlens_is_lazy():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = "import sys, memlens; print('torch' in sys.modules); print(memlens.watch.__name__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    assert out == ["False", "watch"]


# --- item 2: never changes the user's results ----------------------------------------------------

DROPOUT_LOOP = HEAD + """
model = nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.3), nn.Tanh(), nn.Linear(32, 3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
for step in range(5):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    print(loss.item().hex(), model[0].weight.sum().item().hex())
"""


def test_seeded_script_prints_the_same_losses_bit_for_bit(tmp_path, capsys):
    plain(tmp_path, DROPOUT_LOOP)
    expected = capsys.readouterr().out
    code, _, _ = watch_script(tmp_path, DROPOUT_LOOP)
    assert code == 0
    got = capsys.readouterr().out
    assert got == expected and len(expected.split()) == 10


def test_autograd_in_place_check_still_fires(tmp_path, capsys):
    source = HEAD + """
lin = nn.Linear(4, 4)
y = lin(torch.randn(2, 4)).sigmoid()
y.mul_(2)  # sigmoid saved its output: backward must refuse
y.sum().backward()
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 1
    err = capsys.readouterr().err
    assert "modified by an inplace operation" in err
    assert doc["summary"]["stopped_by"] == "error"


def test_a_never_backwarded_graph_is_freed(tmp_path):
    """Nothing memlens keeps holds a user's graph: a saved activation's storage dies with the
    output that holds its graph."""
    import memlens

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64)
            self.refs = []

        def forward(self, x):
            h = self.lin(x).exp()  # exp saves its output for backward
            self.refs.append(weakref.ref(h.untyped_storage()))
            return h * 2

    net = Net()
    with memlens.watch(out=tmp_path / "free"):
        out = net(torch.randn(128, 64))
        kept = net(torch.randn(128, 64))
        del out
        gc.collect()
        assert net.refs[0]() is None  # freed: memlens kept nothing of it
        assert net.refs[1]() is not None  # the control: the held graph keeps its storage
        del kept
        gc.collect()
        assert net.refs[1]() is None


# --- item 6: bad input ------------------------------------------------------------------------


def test_missing_and_non_python_scripts_exit_2(tmp_path, capsys):
    from memlens.__main__ import main

    assert main(["watch", str(tmp_path / "nope.py")]) == 2
    assert "nope.py: does not exist" in capsys.readouterr().err
    (tmp_path / "data.py").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")
    assert main(["watch", str(tmp_path / "data.py")]) == 2
    assert "not a Python script" in capsys.readouterr().err


def test_raising_script_passes_exit_code_and_keeps_files(tmp_path, capsys):
    source = ADAM_LOOP + "\nraise ValueError('boom from the script')\n"
    code, doc, folder = watch_script(tmp_path, source, ["2"])
    assert code == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ValueError: boom from the script" in err
    assert "train.py" in err and "runpy" not in err
    assert doc["summary"]["stopped_by"] == "error" and doc["summary"]["extra"]["exit_code"] == 1
    assert len(load_run(folder).steps) == 2


def test_sys_exit_code_is_passed_through(tmp_path):
    code, doc, _ = watch_script(tmp_path, ADAM_LOOP + "\nsys.exit(7)\n", ["1"])
    assert code == 7 and doc["summary"]["extra"]["exit_code"] == 7


def test_nothing_found_says_how_to_pass_models(tmp_path, capsys):
    """A loop of plain tensors (no nn.Module, no torch.optim): steps, and how to pass what
    it trains."""
    path = write(tmp_path, HEAD + """
w = torch.randn(8, 1, requires_grad=True)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for _ in range(3):
    loss = (x @ w - y).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        w.grad = None
""")
    code = run_script(str(path), [], out=tmp_path / "none")
    assert code == 0
    err = capsys.readouterr().err
    assert "found no model and no optimizer" in err and "memlens.watch(models=" in err
    assert (tmp_path / "none" / "run.json").exists()


@pytest.mark.parametrize("args, code", [(["--epochs", "x"], 2), (["--help"], 0)])
def test_a_script_that_ends_before_it_trains_leaves_no_run_folder(tmp_path, capsys, args,
                                                                   code):
    """Its own argparse refuses the arguments (or prints its help): nothing was recorded,
    so no empty folder is left, and memlens says why in one line, not "found nothing"."""
    path = write(tmp_path, ADAM_LOOP.replace("int(sys.argv[1])", "args.epochs").replace(
        "torch.manual_seed(0)", "torch.manual_seed(0)\nimport argparse\n"
        "p = argparse.ArgumentParser()\np.add_argument('--epochs', type=int, default=2)\n"
        "args = p.parse_args()"))
    runs = tmp_path / "runs"
    import os
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert run_script(str(path), args) == code
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert not runs.exists() or not any(runs.iterdir())
    assert "before it trained" in err and "found no model" not in err
    assert ("invalid int value: 'x'" in err) == (code == 2)  # the script's own message


def test_torch_compiled_model_works_with_the_same_losses(tmp_path, capsys):
    source = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
compiled = torch.compile(model, backend="aot_eager")  # AOTAutograd, no C++ compiler needed
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for step in range(3):
    opt.zero_grad()
    loss = nn.functional.mse_loss(compiled(x), y)
    loss.backward()
    opt.step()
    print(loss.item().hex())
"""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's note on global module hooks
        plain(tmp_path, source)
        expected = capsys.readouterr().out
        code, _, folder = watch_script(tmp_path, source)
    assert code == 0 and capsys.readouterr().out == expected
    history = load_run(folder)
    assert len(history.steps) == 3
    from memlens.core.records import SAMPLE_PHASE_CODE

    cols = history.samples.columns
    fwd = [r for r in history.samples.rows() if r[1] == SAMPLE_PHASE_CODE["forward"]]
    assert all(r[cols.index("activations")] > 0 for r in fwd)


def test_optimizer_step_with_closure(tmp_path, capsys):
    source = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)
x, y = torch.randn(32, 8), torch.randn(32, 1)
def closure():
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss
for step in range(3):
    print(opt.step(closure).item().hex())
"""
    plain(tmp_path, source)
    expected = capsys.readouterr().out
    code, doc, folder = watch_script(tmp_path, source)
    assert code == 0 and capsys.readouterr().out == expected
    history = load_run(folder)
    assert len(history.steps) == 3  # one optimizer step each, its closure's calls inside
    assert not [e for e in doc["events"] if e["kind"] in ("diagnosis", "info")]
    assert (history.steps.column("forward_ms") > 0).all()


def test_capture_every_n_steps_from_the_loss(tmp_path, capsys):
    path = write(tmp_path, ADAM_LOOP)
    plain(tmp_path, ADAM_LOOP, ["8"])
    expected = capsys.readouterr().out
    code = run_script(str(path), ["8"], out=tmp_path / "cap", capture_every=3, quiet=True)
    assert code == 0 and capsys.readouterr().out == expected
    doc = json.loads((tmp_path / "cap" / "run.json").read_text())
    assert [g["step"] for g in doc["graphs"]] == [0, 3, 6]
    assert diagnoses(doc) == []  # a capture keeps no graph alive: no "graph kept" alarm
    # independent: the nodes reachable from this loop's loss on plain torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    loss = torch.nn.functional.mse_loss(model(torch.randn(32, 8)), torch.randn(32, 1))
    seen, stack = {loss.grad_fn}, [loss.grad_fn]
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    assert all(g["nodes"] >= len(seen) for g in doc["graphs"])
    assert all(g["saved_bytes"] > 0 for g in doc["graphs"])


def test_precise_mode_tracks_every_storage_with_the_same_losses(tmp_path, capsys):
    path = write(tmp_path, ADAM_LOOP)
    plain(tmp_path, ADAM_LOOP, ["3"])
    expected = capsys.readouterr().out
    code = run_script(str(path), ["3"], out=tmp_path / "precise", precise=True, quiet=True)
    assert code == 0 and capsys.readouterr().out == expected
    history = load_run(tmp_path / "precise")
    assert len(history.steps) == 3 and len(history.allocs) > 0
    doc = json.loads((tmp_path / "precise" / "run.json").read_text())
    assert doc["environment"]["precise"] is True
    # the exact in-step peak is at least every phase-end total of its step
    cols = history.samples.columns
    for row in history.steps.rows():
        totals = [r[cols.index("total")] for r in history.samples.rows() if r[0] == row[0]]
        assert row[history.steps.columns.index("peak_bytes")] >= max(totals)


def test_an_error_of_memlens_own_stops_recording_not_the_script(tmp_path, capsys, monkeypatch):
    from memlens.core.watch.session import WatchSession

    def broken(self, closing=False):
        raise ZeroDivisionError("a bug in memlens")

    plain(tmp_path, ADAM_LOOP, ["3"])
    expected = capsys.readouterr().out
    monkeypatch.setattr(WatchSession, "_end_step", broken)
    code, doc, _ = watch_script(tmp_path, ADAM_LOOP, ["3"])
    assert code == 0 and capsys.readouterr().out == expected
    assert [e["key"] for e in doc["events"]] == ["memlens stopped recording"]
    assert "ZeroDivisionError" in doc["events"][0]["message"]
    assert doc["summary"] is not None


def test_a_script_calling_memlens_watch_under_the_watch_command_joins_it(tmp_path):
    source = HEAD + """
import memlens
w_ = torch.zeros(4, requires_grad=True)
x = torch.randn(16, 4)
with memlens.watch() as w:
    for _ in range(3):
        (x @ w_ - 1).pow(2).mean().backward()
        with w.phase("optimizer"), torch.no_grad():
            w_ -= 0.1 * w_.grad
            w_.grad = None
        w.step()
"""
    code, doc, folder = watch_script(tmp_path, source)
    assert code == 0 and doc["summary"]["steps_done"] == 3
    assert (load_run(folder).steps.column("optimizer_ms") > 0).all()


INPUTS_LOOP = HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("scale", torch.full((64,), 2.0))

    def forward(self, x, context):
        return self.lin(x) + context  # add saves neither input: context is no activation

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, context = torch.randn(32, 8), torch.randn(32, 8)
for step in range(3):
    opt.zero_grad()
    model(x, context).pow(2).mean().backward()
    opt.step()
"""


def test_other_holds_the_batches_the_model_was_called_with_and_buffers_apart(tmp_path):
    """On CPU `other` is the tensors the models were called with, as a preset's carried
    tensors are, each storage once and not when saved for backward; buffers their own."""
    from memlens.core.records import SAMPLE_PHASE_CODE

    _, _, folder = watch_script(tmp_path, INPUTS_LOOP)
    history = load_run(folder)
    cols = history.samples.columns
    rows = {(int(r[0]), int(r[1])): r for r in history.samples.rows()}
    batch = torch.randn(32, 8).untyped_storage().nbytes()  # x and context alike
    # after the forward, linear saved x for backward: only context is `other`
    assert rows[1, SAMPLE_PHASE_CODE["forward"]][cols.index("other")] == batch
    # after backward the graph is gone: x and context both
    assert rows[1, SAMPLE_PHASE_CODE["backward"]][cols.index("other")] == 2 * batch
    assert rows[1, SAMPLE_PHASE_CODE["backward"]][cols.index("buffers")] == torch.empty(64).nbytes


AMP_LOOP = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 8)
for step in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
"""


def test_amp_weight_copies_are_amp_casts_not_activations(tmp_path):
    """bf16 autocast on CPU: the weight copies the forward saved, counted apart."""
    from memlens.core.records import SAMPLE_PHASE_CODE

    _, _, folder = watch_script(tmp_path, AMP_LOOP)
    history = load_run(folder)
    cols = history.samples.columns
    fwd = [r for r in history.samples.rows() if r[1] == SAMPLE_PHASE_CODE["forward"]]
    # counted independently: the bf16 tensors autograd saves that are a weight's copy (the
    # first layer's is not saved: its input needs no gradient, so neither does its weight)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    shapes = {tuple(p.shape) for p in model.parameters()}
    copies: dict[int, int] = {}

    def pack(t):
        if t.dtype == torch.bfloat16 and (tuple(t.shape) in shapes
                                          or tuple(t.shape[::-1]) in shapes):
            copies[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with (torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
          torch.autocast("cpu", dtype=torch.bfloat16)):
        model(torch.randn(32, 8))
    assert sum(copies.values()) == 16 * 4 * 2
    assert all(r[cols.index("amp_casts")] == sum(copies.values()) for r in fwd)
    back = [r for r in history.samples.rows() if r[1] == SAMPLE_PHASE_CODE["backward"]]
    assert all(r[cols.index("amp_casts")] == 0 for r in back)  # freed with the graph


SQUARE_AMP_LOOP = HEAD + """
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                      nn.Linear(16, 16))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 16, requires_grad=True)  # a batch as wide as every layer
for step in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
"""


def test_amp_casts_are_weight_copies_by_identity_not_by_size(tmp_path):
    """A batch as wide as a layer: its bf16 activations have a weight's element count, and
    are activations all the same. Counted independently: the saved bf16 tensors equal to a
    bf16 cast of a weight, each storage once."""
    from memlens.core.records import SAMPLE_PHASE_CODE

    _, _, folder = watch_script(tmp_path, SQUARE_AMP_LOOP)
    history = load_run(folder)
    cols = history.samples.columns
    fwd = [r for r in history.samples.rows() if r[1] == SAMPLE_PHASE_CODE["forward"]]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 16))
    x = torch.randn(16, 16, requires_grad=True)
    weights = [m.weight.to(torch.bfloat16) for m in model if isinstance(m, torch.nn.Linear)]
    held: dict[int, torch.Tensor] = {}

    def pack(t):
        held.setdefault(t.untyped_storage().data_ptr(), t)
        return t

    with (torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
          torch.autocast("cpu", dtype=torch.bfloat16)):
        model(x)
    params = {q.untyped_storage().data_ptr() for q in model.parameters()}
    copies = sum(t.untyped_storage().nbytes() for ptr, t in held.items()
                 if ptr not in params and t.dtype == torch.bfloat16 and any(
                     torch.equal(v, w) for w in weights for v in (t, t.t()) if v.shape == w.shape))
    bf16_saved = sum(t.untyped_storage().nbytes() for t in held.values()
                     if t.dtype == torch.bfloat16)
    assert 0 < copies < bf16_saved  # some bf16 activations have a weight's size
    assert [r[cols.index("amp_casts")] for r in fwd] == [copies] * len(fwd)


def test_grad_norm_is_the_norm_of_the_gradients_the_optimizer_steps_with(tmp_path):
    """steps.csv's grad_norm at step 0, against the 2-norm taken by hand on plain torch."""
    _, _, folder = watch_script(tmp_path, ADAM_LOOP, ["1"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    torch.nn.functional.mse_loss(model(x), y).backward()
    norm = sum(float((p.grad.double() ** 2).sum()) for p in model.parameters()) ** 0.5
    assert load_run(folder).steps.column("grad_norm")[0] == pytest.approx(norm, rel=1e-5)


# --- how the watch hooks in: what it changes of torch while on, and after ---------------------


def test_module_call_is_torch_own_again_after_close_and_models_pickle_while_watched(tmp_path):
    """The watch wraps nn.Module.__call__ (not global module hooks, not the models): a model
    pickles and deep-copies while watched, its hook dicts stay empty, and closing puts
    torch's own __call__ back."""
    import copy
    import io

    from torch import nn

    from memlens.core.watch.api import Watch

    original = nn.Module.__dict__["__call__"]
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    w = Watch(out=tmp_path / "run", script="t")
    try:
        assert nn.Module.__dict__["__call__"] is not original
        model(torch.randn(2, 4)).sum().backward()
        torch.save(model, buf := io.BytesIO())  # the whole module, as many scripts save it
        clone = copy.deepcopy(model)
        assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    finally:
        w.close()
    assert nn.Module.__dict__["__call__"] is original
    assert not torch.nn.modules.module._global_forward_hooks
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    x = torch.randn(3, 4)
    assert torch.equal(loaded(x), model(x)) and torch.equal(clone(x), model(x))


def test_forward_calls_followed_natively_agree_with_torch_own_prehooks(tmp_path):
    """Whether backward reached a forward's graph, counted by memlens (a C++ pre-hook where
    the native helpers are built) and by torch's own Python pre-hooks on the same nodes."""
    from memlens.core.native import load

    native = load(build=False)
    if native is None:
        pytest.skip("native helpers not built")
    track, fired, alive, release, _unreleased = native.CallTracker().fast_functions()
    a = torch.randn(5, requires_grad=True)
    cases = {"backwarded once": 1, "twice (retain_graph)": 2, "never": 0}
    for what, passes in cases.items():
        y, h = a * 2, (a + 1).tanh()  # a model's output and its carried state
        reached = [0]

        def count(_grads, reached=reached):
            reached[0] += 1

        for node in (y.grad_fn, h.grad_fn):
            node.register_prehook(count)
        del node
        handle = track((y, {"state": [h, y]}))
        for i in range(passes):
            (y.sum() + h.sum()).backward(retain_graph=i < passes - 1)
        # torch's hooks fire once per node a pass; memlens counts passes
        assert fired(handle) * 2 == reached[0] == 2 * passes, what
        markers = [weakref.ref(t.grad_fn.metadata.setdefault("m", type("M", (), {})()))
                   for t in (y, h)]  # die with the nodes
        assert alive(handle)
        del y, h
        gc.collect()
        assert all(m() is None for m in markers)
        assert not alive(handle), what
        release(handle)
    assert track(a.detach()) == -1  # nothing to backward: an eval forward


def test_unreleased_keeps_only_graphs_alive_and_unreleased():
    """A step without detail's forwards, checked at its end in one call: a graph never
    backwarded or backwarded with retain_graph=True is kept; one backwarded (its buffers
    freed) or dead is let go, its handle free for the next forward."""
    from memlens.core.native import load

    native = load(build=False)
    if native is None:
        pytest.skip("native helpers not built")
    track, _fired, _alive, _release, unreleased = native.CallTracker().fast_functions()
    a = torch.randn(5, requires_grad=True)
    never, retained, freed, dead = a * 2, a * 3, a * 4, a * 5
    handles = [track(t) for t in (never, retained, freed, dead)]
    retained.sum().backward(retain_graph=True)
    freed.sum().backward()
    with pytest.raises(RuntimeError):  # torch's own word that its buffers were freed
        freed.sum().backward()
    del dead
    gc.collect()
    assert unreleased(handles) == handles[:2]
    assert {track(a * 6), track(a * 7)} == set(handles[2:])  # let go: handles reused
    assert unreleased([]) == []
    with pytest.raises(TypeError):
        unreleased(tuple(handles))


def test_a_failing_write_stops_recording_and_never_the_script(tmp_path, capsys, monkeypatch):
    """Rows are written on the watch's writer thread: a write that fails there (a full disk)
    stops the recording, and the script runs on with the same results."""
    from memlens.core.runfolder.writer import FolderFiles

    def full(self, rows):
        raise OSError(28, "No space left on device")

    plain(tmp_path, ADAM_LOOP, ["40"])
    expected = capsys.readouterr().out
    monkeypatch.setattr(FolderFiles, "on_steps", full)
    code, _doc, _ = watch_script(tmp_path, ADAM_LOOP, ["40"])
    said = capsys.readouterr()
    assert code == 0 and said.out == expected
    assert "No space left on device" in said.err and "ran unchanged" in said.err


def test_a_forked_child_records_nothing_into_the_parents_run(tmp_path):
    """A DataLoader worker is a fork of the training process: the watch's hooks are in it,
    and must neither record nor write there."""
    import os

    from torch import nn

    from memlens.core.watch.api import Watch

    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = Watch(out=tmp_path / "run", script="t")
    try:
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
        pid = os.fork()
        if pid == 0:  # the child: a worker that happens to run the model and a step
            code = 1
            try:
                opt.zero_grad()
                model(torch.randn(8, 4)).sum().backward()
                opt.step()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        steps_in_parent = w.step_index
    finally:
        w.close()
    history = load_run(tmp_path / "run")
    assert steps_in_parent == 3 and len(history.steps) == 3


OPTIMIZER_IN_BACKWARD = HEAD + """
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)  # steps once a step, as usual
x, y = torch.randn(32, 8), torch.randn(32, 1)
seen = []
for step in range(int(sys.argv[1])):
    opt.zero_grad()
    if step == 2:  # the script adds its own post-accumulate-grad hooks once training runs
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.norm().item()))
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    print(repr(loss.item()), len(seen))
print(repr(sum(seen)))
"""


def test_a_scripts_own_post_accumulate_grad_hooks_run_as_without_memlens(tmp_path, capsys):
    """memlens's grad-norm hooks take a parameter's post-accumulate-grad slot: a hook the
    script registers later runs all the same, with the same results."""
    plain(tmp_path, OPTIMIZER_IN_BACKWARD, ["5"])
    expected = capsys.readouterr().out
    code, doc, _ = watch_script(tmp_path, OPTIMIZER_IN_BACKWARD, ["5"])
    assert code == 0 and capsys.readouterr().out == expected
    assert expected.splitlines()[-2].endswith(" 12")  # 4 parameters x 3 steps: they ran
    assert doc["summary"]["steps_done"] == 5


def test_a_watch_never_closed_still_ends_its_files_at_exit(tmp_path):
    """`w = memlens.watch(...)` with no close(): the interpreter's exit closes it, and every
    step the writer thread had not written yet reaches the files."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = write(tmp_path, ADAM_LOOP.replace(
        "torch.manual_seed(0)", f"torch.manual_seed(0)\nimport memlens\n"
        f"w = memlens.watch(out={str(tmp_path / 'run')!r})"))
    done = subprocess.run([sys.executable, str(script), "7"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"},
                          timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["finished"] is True and doc["summary"]["steps_done"] == 7
    assert len(load_run(tmp_path / "run").steps) == 7


def test_models_and_optimizers_passed_in_and_manual_steps_after_an_automatic_one(tmp_path):
    """memlens.watch(model, opt): both measured from the start. The script's optimizer ends
    step 0 by itself; its first watch.step() right after must not add an empty step."""
    import memlens

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    losses = []
    with memlens.watch(model, opt, out=tmp_path / "given") as watch:
        for _ in range(5):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            watch.step()
    history = load_run(tmp_path / "given")
    assert len(history.steps) == 5
    assert history.steps.column("loss").tolist() == pytest.approx(losses, rel=1e-5)  # .6g
    doc = json.loads((tmp_path / "given" / "run.json").read_text())
    assert doc["summary"]["extra"]["optimizers"] == ["SGD"]


def test_another_threads_module_calls_are_not_this_loops_phases(tmp_path):
    """A background thread evaluating a model while the main thread trains: its calls pass
    through, and the training loop's steps and models are as without it."""
    import threading

    from memlens.core.watch.api import Watch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    aux = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 4)
    stop = threading.Event()
    calls = [0]

    def evaluate():
        with torch.no_grad():
            while not stop.is_set() or calls[0] < 50:
                aux(x)
                model(x)
                calls[0] += 1

    w = Watch(out=tmp_path / "run", script="t")
    thread = threading.Thread(target=evaluate)
    try:
        thread.start()
        for _ in range(6):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    finally:
        stop.set()
        thread.join()
        w.close()
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [m["name"] for m in doc["models"] if m.get("called", True)] == ["model"]
    history = load_run(tmp_path / "run")
    assert len(history.steps) == 6 and (history.steps.column("eval_ms") == 0).all()


def test_script_sees_its_absolute_file_and_a_traceback_without_memlens_frames(
        tmp_path, capsys, monkeypatch):
    """As `python script.py`: __file__ absolute (argv[0] as typed), and an error raised
    through memlens's wrappers (backward) printed without their frames."""
    script = write(tmp_path, HEAD + """
print(__file__, sys.argv[0])
x = torch.ones(2, requires_grad=True)
y = (x * 2).sum()
y.backward()
y.backward()  # a second time: autograd raises
""")
    monkeypatch.chdir(tmp_path)
    code = run_script(script.name, [], out=tmp_path / "run", quiet=True)
    said = capsys.readouterr()
    assert said.out.split() == [str(script), script.name]
    assert code == 1 and "backward through the graph a second time" in said.err
    assert "core/watch" not in said.err, said.err
    line = next(i for i, t in enumerate(script.read_text().splitlines(), 1) if "second" in t)
    assert f'"{script}", line {line}' in said.err


def test_a_model_passed_in_is_a_model_even_where_its_parameters_are_hidden(tmp_path):
    """memlens.watch(models=[model]) where the model's own named_modules hides its children
    (so its parameters() shows none): it is still the model, its forwards recorded as its
    phase, named as passed, and the script's losses unchanged."""
    import contextlib

    import memlens

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(4, 1)

        def named_modules(self, *args, **kwargs):
            yield "", self

        def forward(self, x):
            return self.body(x)

    def train(watch_it):
        torch.manual_seed(0)
        model = Hidden()
        assert not list(model.parameters())
        opt = torch.optim.SGD(model.body.parameters(), lr=0.1)
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        losses = []
        ctx = (memlens.watch(models=[model], out=tmp_path / "run", quiet=True) if watch_it
               else contextlib.nullcontext())
        with ctx:
            for _ in range(4):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return losses

    assert train(True) == train(False)
    history = load_run(tmp_path / "run")
    assert len(history.steps) == 4
    assert (history.steps.column("forward_ms") > 0).all()
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [m["name"] for m in doc["summary"]["extra"]["models"]] == ["model"]

"""`main.py fix` on scripts with the bugs, as users write them (tests/core/fix_scripts: functions,
classes, an imported module, a LightningModule) and from the zoo: the patch applies, the
patched copy runs, the diagnosis is gone from it, what it held and its growth drop to what
plain torch counts, and the results are equal where they should be.

Each case is one `fix` (two watched processes), run once and shared by its asserts. The
plain-torch counts walk the autograd graphs of what the program keeps (`saved`) or count
what a forward saves through torch's own saved_tensors_hooks (`saved_by_forward`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import shutil
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from memlens.__main__ import main as memlens_main
from memlens.core import findings as dx
from memlens.core.findings import GRAPH_GROWS

HERE = Path(__file__).parent
SCRIPTS, ZOO = HERE / "fix_scripts", HERE.parent / "zoo" / "scripts"

CASES = {  # name: (the files, the script, its arguments, fix's --steps, fix's other options)
    "kept_predictions": ([SCRIPTS / "kept_predictions.py"], ["--steps", "8"], 8, []),
    "multitask": ([SCRIPTS / "multitask.py", SCRIPTS / "losses.py"], ["--steps", "6"], 6, []),
    "dropout_preview": ([SCRIPTS / "dropout_preview.py"], ["--steps", "6"], 6, []),
    "lightning_probe": ([SCRIPTS / "lightning_probe.py"], ["--batches", "4"], 4, []),
    "cached_activations": ([SCRIPTS / "cached_activations.py"], ["--steps", "6"], 6, []),
    "bug_no_zero_grad": ([ZOO / "bug_no_zero_grad.py", ZOO / "zoo_truth.py"],
                         ["--steps", "4"], 4, []),
    "bug_hidden_no_detach": ([ZOO / "bug_hidden_no_detach.py", ZOO / "zoo_truth.py"],
                             ["--steps", "4"], 4, ["--write"]),
    "bug_growing_graph": ([ZOO / "bug_growing_graph.py", ZOO / "zoo_truth.py"],
                          ["--steps", "8"], 8, []),
}


class FixRun:
    def __init__(self, folder: Path, script: Path, code: int, out: str, err: str) -> None:
        self.folder, self.script, self.code, self.out, self.err = folder, script, code, out, err
        self.fix_dir = folder / "fix"
        path = self.fix_dir / "fix.json"
        self.entries = json.loads(path.read_text()) if path.exists() else None

    def entry(self, kind: str) -> dict:
        return next(e for e in self.entries if e["kind"] == kind)

    def fixed(self, name: str | None = None) -> Path:
        return self.fix_dir / "fixed" / (name or self.script.name)


def run_cli(cwd: Path, *argv: str) -> tuple[int, str, str]:
    """`memlens ARGV` in this process from `cwd`: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = memlens_main(list(argv))
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def fix_run(tmp_path_factory):
    done: dict[str, FixRun] = {}

    def run(name: str) -> FixRun:
        if name not in done:
            files, args, steps, options = CASES[name]
            folder = tmp_path_factory.mktemp(name)
            for f in files:
                shutil.copy(f, folder / f.name)
            script = folder / files[0].name
            code, out, err = run_cli(folder, "fix", str(script), "--out", "fix", "--steps",
                                     str(steps), *options, "--", *args)
            done[name] = FixRun(folder, script, code, out, err)
        return done[name]

    return run


# --- plain torch's counts ------------------------------------------------------------------------
def _param_storage(t: torch.Tensor) -> bool:
    base = t._base if t._base is not None else t
    return base.is_leaf and base.requires_grad


def saved(tensors) -> int:
    """The bytes of every tensor saved for backward that the graphs of `tensors` still hold,
    read off autograd's nodes: each storage once, the parameters' left out, and a tensor
    without autograd history that reaches part of its storage (a batch sliced from a
    corpus) counting the bytes it reaches (several: their union), as docs/watch.md says."""
    whole: dict[int, int] = {}
    parts: dict[int, list[tuple[int, int]]] = {}
    seen: set = set()
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                value = getattr(node, name)
            except RuntimeError:  # freed by a backward
                continue
            for t in value if isinstance(value, (tuple, list)) else [value]:
                if isinstance(t, torch.Tensor) and not _param_storage(t):
                    st = t.untyped_storage()
                    start = t.storage_offset() * t.element_size()
                    end = start + t.element_size() * (1 + sum(
                        (n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)))
                    if t.requires_grad or end - start >= st.nbytes():
                        whole[st.data_ptr()] = st.nbytes()
                    else:
                        parts.setdefault(st.data_ptr(), []).append((start, end))
        stack += [n for n, _ in node.next_functions]
    total = sum(whole.values())
    for ptr, ranges in parts.items():
        if ptr not in whole:
            covered = 0
            for start, end in sorted(ranges):
                covered = max(covered, start)
                total += max(0, end - covered)
                covered = max(covered, end)
    return total


def saved_by_forward(fn) -> int:
    """The bytes autograd saves while `fn()` runs (each storage once, parameters out)."""
    storages: dict[int, int] = {}

    def pack(t):
        if not _param_storage(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        kept = fn()
    del kept
    return sum(storages.values())


def script_function(path: Path, name: str):
    """A function of a script, its module run as a module (not `__main__`), with the
    script's folder first on sys.path (a fixed copy imports its patched module)."""
    sys.path.insert(0, str(path.parent))
    for module in ("losses",):  # the original's and the copy's are two modules
        sys.modules.pop(module, None)
    try:
        return runpy.run_path(str(path), run_name="fix_check")[name]
    finally:
        sys.path.remove(str(path.parent))


def figures(entry: dict) -> tuple[dict, dict]:
    return entry["before"], entry["after"]


# --- the cases -----------------------------------------------------------------------------
def test_kept_validation_outputs_and_a_running_loss(fix_run):
    r = fix_run("kept_predictions")
    assert r.code == 0, r.err
    no_grad, item = r.entry("no_grad"), r.entry("item")
    assert no_grad["keys"] == [dx.GRAD_NOT_BACKWARDED] and item["keys"] == [dx.GRAPH_KEPT]
    text = r.fixed().read_text()
    assert "running_loss += loss.item()" in text
    assert "    with torch.no_grad():\n        predictions.append(model(x_val))" in text
    for e in (no_grad, item):
        assert e["applied"] and e["diagnosis_gone"] and e["results_equal"] is True
    # plain torch: the graphs the kept predictions hold, after 8 steps and after 4
    train = script_function(r.script, "train")
    with contextlib.redirect_stdout(io.StringIO()):
        held_8, held_4 = saved(train(8)), saved(train(4))
        fixed_held = saved(script_function(r.fixed(), "train")(8))
    before, after = figures(no_grad)
    assert before["held_bytes"] == held_8 > 0
    assert after["held_bytes"] == fixed_held == 0
    assert before["growth_bytes_per_step"] == pytest.approx((held_8 - held_4) / 4, rel=0.05)
    assert abs(after["growth_bytes_per_step"]) < before["growth_bytes_per_step"] / 20
    assert "memory: peak" in r.out and "results: unchanged" in r.out


def test_a_module_caching_its_losses_is_fixed_in_the_imported_module(fix_run):
    r = fix_run("multitask")
    assert r.code == 0, r.err
    [e] = r.entries
    assert e["kind"] == "detach" and e["where"].startswith(str(r.folder / "losses.py"))
    assert r.fixed("multitask.py").read_text() == r.script.read_text()
    assert "self.history.append(loss.detach())" in r.fixed("losses.py").read_text()
    assert (r.folder / "losses.py").read_text() == (SCRIPTS / "losses.py").read_text()
    assert "losses.py" in (r.fix_dir / "fix.diff").read_text()
    assert e["diagnosis_gone"] and e["results_equal"] is True
    # plain torch: what the histories hold after the run; after the fix, only the last
    # step's losses (returned by fit) hold a graph
    with contextlib.redirect_stdout(io.StringIO()):
        trainer = script_function(r.script, "Trainer")()
        trainer.fit(6)
        held = saved(trainer.loss_a.history + trainer.loss_b.history)
        fixed = script_function(r.fixed("multitask.py"), "Trainer")()
        last = saved(fixed.fit(6))
        assert saved(fixed.loss_a.history + fixed.loss_b.history) == 0
    before, after = figures(e)
    assert before["held_bytes"] == held and after["held_bytes"] == last < held
    assert after["growth_bytes_per_step"] < before["growth_bytes_per_step"] / 10


def test_validation_in_train_mode_gets_eval_and_the_preview_no_grad(fix_run):
    r = fix_run("dropout_preview")
    assert r.code == 0, r.err
    assert sorted(e["kind"] for e in r.entries) == ["eval", "no_grad+eval"]
    text = r.fixed().read_text()
    assert ("    model.eval()\n    with torch.no_grad():\n        val_loss = "
            "F.cross_entropy(model(x_val), y_val)\n    model.train()\n") in text
    assert ("            model.eval()\n            with torch.no_grad():\n"
            "                preview = model(x_preview)") in text
    for e in r.entries:
        assert e["diagnosis_gone"] and e["results_equal"] is None
        assert "eval() switches Dropout off" in e["results_reason"]
    # plain torch: what the preview's forward saved, held by `preview` across the step's
    # end until the next preview; never saved after the fix
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, 4))
    preview = saved_by_forward(lambda: model(torch.randn(512, 16)).softmax(1))
    before, after = figures(r.entry("no_grad+eval"))
    assert before["held_bytes"] == preview and after["held_bytes"] == 0
    assert before["saved_bytes"] - after["saved_bytes"] >= preview


def test_a_lightning_modules_probe_forward_gets_no_grad_in_its_training_step(fix_run):
    pytest.importorskip("lightning")
    r = fix_run("lightning_probe")
    assert r.code == 0, r.err
    [e] = r.entries
    assert e["kind"] == "no_grad" and e["diagnosis_gone"] and e["results_equal"] is True
    assert ("        with torch.no_grad():\n            probe_acc = (self(self.probe_x)"
            in r.fixed().read_text())
    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    probe = saved_by_forward(lambda: net(torch.randn(512, 16)))
    before, after = figures(e)
    assert before["saved_bytes"] - after["saved_bytes"] == probe


def test_a_module_caching_its_output_gets_detach_where_forward_stores_it(fix_run):
    r = fix_run("cached_activations")
    assert r.code == 0, r.err
    [e] = r.entries
    assert e["kind"] == "detach_cache" and e["diagnosis_gone"] and e["results_equal"] is True
    text = r.fixed().read_text()
    # the line forward stores, not `self.last_out = None` in __init__ (never `None.detach()`)
    assert "        self.last_out = out.detach()\n" in text
    assert "        self.last_out = None\n" in text and "None.detach()" not in text
    # plain torch: the original's blocks keep a graph across steps (whose saved tensors
    # backward freed: held 0 B), the fixed copy's keep none
    with contextlib.redirect_stdout(io.StringIO()):
        model = script_function(r.script, "train")(6)
        fixed = script_function(r.fixed(), "train")(6)
    kept = [model.b1.last_out, model.b2.last_out]
    assert all(t.grad_fn is not None for t in kept)
    assert all(b.last_out.grad_fn is None for b in (fixed.b1, fixed.b2))
    before, after = figures(e)
    assert before["held_bytes"] == saved(kept) and after["held_bytes"] == 0
    assert after["graph_nodes"] == before["graph_nodes"]


def test_zoo_no_zero_grad_clears_before_the_backward(fix_run):
    r = fix_run("bug_no_zero_grad")
    assert r.code == 0, r.err
    [e] = r.entries
    assert e["kind"] == "zero_grad" and e["diagnosis_gone"]
    text = r.fixed().read_text()
    assert text.index("    optimizer.zero_grad()\n") < text.index("    loss.backward()")
    assert e["results_equal"] is None and "clearing the gradients" in e["results_reason"]
    # the first step's gradient is the same (nothing to clear yet), the second is not
    before = (r.fix_dir / "before.stdout").read_text().splitlines()
    after = (r.fix_dir / "after.stdout").read_text().splitlines()
    gnorm = [[ln for ln in lines if ln.startswith("GNORM")] for lines in (before, after)]
    assert gnorm[0][0] == gnorm[1][0] and gnorm[0][1] != gnorm[1][1]
    assert e["before"]["held_bytes"] == e["after"]["held_bytes"] == 0


def test_zoo_hidden_state_detached_and_written_with_a_backup(fix_run):
    r = fix_run("bug_hidden_no_detach")
    assert r.code == 0, r.err
    [e] = r.entries
    assert e["kind"] == "detach_state" and e["keys"] == [dx.STATE_NOT_DETACHED]
    assert e["before"]["exit_code"] == 1 and e["before"]["steps"] == 1
    assert e["after"]["exit_code"] == 0 and e["after"]["steps"] == 4
    assert e["diagnosis_gone"] and e["results_equal"] is None
    assert "truncates backpropagation" in e["results_reason"]
    # --write: the user's file is the patched copy, the original beside it
    original = (ZOO / "bug_hidden_no_detach.py").read_text()
    assert (r.folder / "bug_hidden_no_detach.py.orig").read_text() == original
    assert r.script.read_text() == r.fixed().read_text() != original
    assert "    hidden = hidden.detach()\n    logits, hidden = model(x, hidden)" in (
        r.script.read_text())


def test_zoo_growing_graph_holds_one_step_after_the_fix(fix_run):
    r = fix_run("bug_growing_graph")
    assert r.code == 0, r.err
    [e] = r.entries
    assert e["kind"] == "detach_state" and e["keys"] == [GRAPH_GROWS] and e["diagnosis_gone"]
    assert "    hidden = tuple(h.detach() for h in hidden)\n" in r.fixed().read_text()

    def held(steps: int, detach: bool) -> int:  # the zoo script's loop, counted in plain torch
        torch.manual_seed(0)
        enc, rnn, dec = nn.Embedding(50, 16), nn.LSTM(16, 32), nn.Linear(32, 50)
        params = [*enc.parameters(), *rnn.parameters(), *dec.parameters()]
        corpus = torch.randint(0, 50, (6 * 10 + 1, 4))
        hidden = (torch.zeros(1, 4, 32), torch.zeros(1, 4, 32))
        for step in range(steps):
            for p in params:
                p.grad = None
            if detach:
                hidden = tuple(h.detach() for h in hidden)
            out, hidden = rnn(enc(corpus[step * 6:(step + 1) * 6]), hidden)
            out = dec(out)
            loss = nn.functional.cross_entropy(out.view(-1, 50),
                                               corpus[step * 6 + 1:(step + 1) * 6 + 1].reshape(-1))
            loss.backward(retain_graph=True)
            for p in params:
                p.data.add_(p.grad, alpha=-0.5)
        return saved([*hidden, out, loss])

    before, after = figures(e)
    assert before["held_bytes"] == held(8, False)
    assert after["held_bytes"] == held(8, True) < before["held_bytes"] / 4
    assert before["growth_bytes_per_step"] == pytest.approx(
        (held(8, False) - held(4, False)) / 4, rel=0.05)
    assert abs(after["growth_bytes_per_step"]) < before["growth_bytes_per_step"] / 20

"""`fix`'s source changes, planned from diagnoses as the watch reports them (no runs here:
tests/core/test_fix.py runs them): the smallest change, made at the nodes' places with the
user's formatting kept, `.item()` only where every later use takes a number, and no change
with a one-line reason where none is safe."""

from __future__ import annotations

import ast
import textwrap

import pytest

from memlens.core import findings as dx
from memlens.core.findings import GRAPH_GROWS
from memlens.core.fix.plan import Planner, patched_texts


def plan(tmp_path, source: str, *diagnoses: tuple[str, str, str], name: str = "train.py"):
    """(fixes, the patched text of `name`) for diagnoses (key, marker, message): the
    place of each is the line holding `marker`."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    lines = path.read_text().splitlines()
    events = [{"key": key, "message": message,
               "where": f"{path}:{next(i for i, t in enumerate(lines, 1) if marker in t)}"}
              for key, marker, message in diagnoses]
    planner = Planner(path)
    fixes = planner.plan(events)
    text = patched_texts(planner, fixes).get(path.resolve())
    if text is not None:
        ast.parse(text)  # every patch is Python
    return fixes, text


def changed_lines(source: str, text: str) -> tuple[list[str], list[str]]:
    """(lines removed, lines added), as a diff shows them."""
    import difflib

    diff = list(difflib.ndiff(textwrap.dedent(source).splitlines(), text.splitlines()))
    return ([d[2:] for d in diff if d.startswith("- ")],
            [d[2:] for d in diff if d.startswith("+ ")])


KEPT = """
import torch
from torch import nn

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train(steps):
    {init}
    for step in range(steps):
        opt.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        {keep}  # KEEP
    {use}
"""


@pytest.mark.parametrize("init, keep, use, fixed", [
    ("total = 0.0", "total += loss", 'print(f"mean {total / steps:.4f}")',
     "total += loss.item()"),
    ("total = 0.0", "total += loss", "return total / steps", "total += loss.detach()"),
    ("losses = []", "losses.append(loss)", "return torch.stack(losses).mean()",
     "losses.append(loss.detach())"),
    ("losses = []", "losses.append(loss)", 'print(f"{sum(losses) / len(losses):.3f}")',
     "losses.append(loss.item())"),
    ("total = 0.0", "total = total + loss * 2", "if total > 10:\n        print('high')",
     "total = total + (loss * 2).item()"),
])
def test_a_kept_loss_gets_item_only_where_every_later_use_takes_a_number(
        tmp_path, init, keep, use, fixed):
    holder = init.split()[0]
    source = KEPT.format(init=init, keep=keep, use=use)
    fixes, text = plan(tmp_path, source, (dx.GRAPH_KEPT, "# KEEP",
                                          f"... held by local `{holder}` in train()"))
    assert [f.kind for f in fixes] == [fixed.rpartition(".")[2].strip("()")]
    assert changed_lines(source, text) == ([f"        {keep}  # KEEP"],
                                           [f"        {fixed}  # KEEP"])


def test_kept_tensors_backwarded_later_are_left_alone(tmp_path):
    source = KEPT.format(init="total = 0.0", keep="total = total + loss",
                         use="total.backward()  # LATER")
    fixes, text = plan(tmp_path, source, (dx.GRAPH_KEPT, "# KEEP",
                                          "held by local `total` in train()"))
    assert text is None and not fixes[0].applied
    line = next(i for i, t in enumerate(textwrap.dedent(source).splitlines(), 1)
                if "# LATER" in t)
    assert f"backwarded later (line {line})" in fixes[0].refused


def test_an_unnamed_holder_is_left_alone(tmp_path):
    source = KEPT.format(init="total = 0.0", keep="total += loss", use="")
    fixes, text = plan(tmp_path, source, (
        dx.GRAPH_KEPT, "# KEEP", "held by a reference memlens could not name"))
    assert text is None and "could not name" in fixes[0].refused


VALIDATION = '''
"""A docstring."""
import torch.nn as nn
import torch.nn.functional as F

model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 1))


def check(x, y):
    out = model(x)  # VAL
    note = """a string
spanning lines"""
    return F.mse_loss(out, y), note


def validate(batches):
    total = 0.0
    for x, y in batches:
        total += F.mse_loss(model(x),  # LOOP
                            y).item()   # odd spacing, kept
    return total
'''


def test_no_grad_wraps_the_statement_and_adds_the_import_torch(tmp_path):
    fixes, text = plan(tmp_path, VALIDATION, (dx.GRAD_NOT_BACKWARDED, "# VAL",
                                              "model forward under grad is never backwarded"))
    assert [f.kind for f in fixes] == ["no_grad"]
    removed, added = changed_lines(VALIDATION, text)
    assert removed == ["    out = model(x)  # VAL"]
    assert added == ["import torch", "    with torch.no_grad():", "        out = model(x)  # VAL"]
    assert text.index("import torch\n") > text.index("import torch.nn.functional as F")


def test_a_validation_loop_is_wrapped_whole_its_lines_reindented_as_written(tmp_path):
    _, text = plan(tmp_path, VALIDATION, (dx.GRAD_NOT_BACKWARDED, "# LOOP",
                                          "model forward under grad is never backwarded"))
    removed, added = changed_lines(VALIDATION, text)
    assert removed == ["    for x, y in batches:",
                       "        total += F.mse_loss(model(x),  # LOOP",
                       "                            y).item()   # odd spacing, kept"]
    assert added == ["import torch", "    with torch.no_grad():", "        for x, y in batches:",
                     "            total += F.mse_loss(model(x),  # LOOP",
                     "                                y).item()   # odd spacing, kept"]


def test_no_grad_and_eval_together_never_reindent_a_multiline_string(tmp_path):
    source = VALIDATION.replace("    out = model(x)  # VAL\n    note", "    out, note = model(x), '''a\nb'''  # VAL\n    note")  # noqa: E501
    fixes, text = plan(
        tmp_path, source,
        (dx.GRAD_NOT_BACKWARDED, "# VAL", "model forward under grad is never backwarded"),
        (dx.EVAL_IN_TRAIN_MODE, "# VAL", "model is evaluated (no backward) while ..."))
    assert [f.kind for f in fixes] == ["no_grad+eval"]
    _, added = changed_lines(source, text)
    assert added == ["import torch", "    model.eval()", "    with torch.no_grad():",
                     "        out, note = model(x), '''a", "    model.train()"]
    assert "\nb'''  # VAL\n" in text  # the string's own second line, as it was


def test_torch_imported_under_another_name_is_used_as_it_is(tmp_path):
    source = VALIDATION.replace("import torch.nn as nn",
                                "import torch as th\nimport torch.nn as nn")
    _, text = plan(tmp_path, source, (dx.GRAD_NOT_BACKWARDED, "# VAL",
                                      "model forward under grad is never backwarded"))
    _, added = changed_lines(source, text)
    assert added == ["    with th.no_grad():", "        out = model(x)  # VAL"]


@pytest.mark.parametrize("source, why", [
    ("for out in model(x):  # HERE\n    pass\n", "header of a compound statement"),
    ("a = 1; out = model(x)  # HERE\n", "more than one statement"),
    ("out = model(x)  # HERE\nout.sum().backward()\n", "is backwarded at line 3"),
])
def test_no_grad_is_refused_where_it_is_not_safe(tmp_path, source, why):
    fixes, text = plan(tmp_path, "import torch\n" + source, (
        dx.GRAD_NOT_BACKWARDED, "# HERE", "model forward under grad is never backwarded"))
    assert text is None and why in fixes[0].refused


def test_eval_around_a_validation_that_returns_from_inside_is_refused(tmp_path):
    source = """
    import torch
    def evaluate(model, x):
        with torch.no_grad():
            return model(x).mean()  # HERE
    """
    fixes, text = plan(tmp_path, source, (dx.EVAL_IN_TRAIN_MODE, "# HERE",
                                          "model is evaluated (no backward) while ..."))
    assert text is None and "would not run" in fixes[0].refused


CARRIED = """
import torch
from torch import nn

rnn = nn.GRU(4, 8)
{init}
for step in range(3):
    out, hidden = rnn(torch.randn(5, 2, 4), hidden)  # CARRY
    out.sum().backward()
"""


@pytest.mark.parametrize("init, inserted", [
    ("hidden = torch.zeros(1, 2, 8)", ["    hidden = hidden.detach()"]),
    ("hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))",
     ["    hidden = tuple(h.detach() for h in hidden)"]),
    ("hidden = make_hidden()",
     ["    hidden = hidden.detach() if isinstance(hidden, torch.Tensor) else "
      "tuple(h.detach() for h in hidden)"]),
    ("hidden = None", ["    if hidden is not None:", "        hidden = hidden.detach() if "
                       "isinstance(hidden, torch.Tensor) else tuple(h.detach() for h in hidden)"]),
])
def test_carried_state_is_detached_before_the_call_in_the_form_it_has(tmp_path, init, inserted):
    source = CARRIED.format(init=init)
    fixes, text = plan(tmp_path, source, (
        dx.STATE_NOT_DETACHED, "# CARRY",
        "backward reached a graph an earlier backward had freed: it comes from the rnn "
        "forward at x:8 of step 0, carried into this step"))
    assert [f.kind for f in fixes] == ["detach_state"]
    removed, added = changed_lines(source, text)
    assert removed == [] and added == inserted
    assert text.index(inserted[-1]) < text.index("# CARRY")


def test_a_growing_graph_detaches_the_holder_it_names(tmp_path):
    source = CARRIED.format(init="hidden = torch.zeros(1, 2, 8)")
    _, text = plan(tmp_path, source, (
        GRAPH_GROWS, "# CARRY", "... held by `hidden` passed to rnn at x:8 with the graph"))
    _, added = changed_lines(source, text)
    assert added == ["    hidden = hidden.detach()"]


ZERO_GRAD = """
import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    {clear}loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    {step}  # STEP
"""


def test_zero_grad_goes_before_the_backward(tmp_path):
    source = ZERO_GRAD.format(clear="", step="optimizer.step()")
    fixes, text = plan(tmp_path, source, (dx.GRADS_NOT_CLEARED, "# STEP", "3 optimizer steps"))
    assert [f.kind for f in fixes] == ["zero_grad"]
    _, added = changed_lines(source, text)
    assert added == ["    optimizer.zero_grad()"]
    assert text.index("optimizer.zero_grad()") < text.index("loss.backward()")


@pytest.mark.parametrize("clear, step, why", [
    ("if step % 2 == 0:\n        optimizer.zero_grad()\n    ", "optimizer.step()",
     "under a condition"),
    ("", "optimizer.step(lambda: loss)", "takes a closure"),
])
def test_zero_grad_is_refused_for_accumulation_and_closures(tmp_path, clear, step, why):
    source = ZERO_GRAD.format(clear=clear, step=step)
    fixes, text = plan(tmp_path, source, (dx.GRADS_NOT_CLEARED, "# STEP", "3 optimizer steps"))
    assert text is None and why in fixes[0].refused


def test_a_diagnosis_inside_a_library_or_outside_the_scripts_folder_changes_nothing(tmp_path):
    lib = tmp_path / "venv" / "lib" / "site-packages" / "somelib"
    lib.mkdir(parents=True)
    (lib / "mod.py").write_text("x = 1\n")
    other = tmp_path.parent / f"{tmp_path.name}-elsewhere.py"
    other.write_text("x = 1\n")
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    fixes = Planner(script).plan([
        {"key": dx.GRAPH_KEPT, "where": f"{lib / 'mod.py'}:1", "message": "`x`"},
        {"key": dx.GRAPH_KEPT, "where": f"{other}:1", "message": "`x`"}])
    assert "inside an installed library" in fixes[0].refused
    assert "outside the script's folder" in fixes[1].refused
    other.unlink()


CACHED = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.cache = []

    def forward(self, x):
        h = self.lin(x).relu()
        self.cache.append(h)  # CACHE
        return h


class Remember(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = None

    def forward(self, x):
        h = self.lin(x)
        self.last = h * 2  # LAST
        return h
"""


def test_what_a_module_caches_on_itself_is_detached_where_it_is_stored(tmp_path):
    """Diagnosis 7 (activations cached on a module) points at the class line that stores
    the value: `.detach()` goes on the value, appended or assigned."""
    fixes, text = plan(
        tmp_path, CACHED,
        (dx.MODULE_CACHE, "# CACHE", "`self.cache` of `model.0` keeps 4 tensors with ..."),
        (dx.MODULE_CACHE, "# LAST", "`self.last` of `model.1` keeps 1 tensor with ..."))
    assert [f.rule.kind for f in fixes] == ["detach_cache", "detach_cache"]
    removed, added = changed_lines(CACHED, text)
    assert [a.strip() for a in added] == ["self.cache.append(h.detach())  # CACHE",
                                          "self.last = (h * 2).detach()  # LAST"]
    assert len(removed) == 2


def test_a_cache_pointed_at_where_it_starts_as_none_is_never_detached(tmp_path):
    """A diagnosis whose line sets the cache to a constant (`self.last = None` in
    __init__) gets no change and a reason: `None.detach()` would break the copy."""
    fixes, text = plan(
        tmp_path, CACHED,
        (dx.MODULE_CACHE, "self.last = None", "`self.last` of `model.1` keeps 1 tensor ..."))
    assert text is None
    [f] = fixes
    assert not f.applied and "constant" in f.refused

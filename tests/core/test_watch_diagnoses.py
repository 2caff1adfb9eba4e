"""The five diagnoses of a watched script: each found in a buggy script, none in a clean one."""

from __future__ import annotations

import pytest

from memlens.core import findings
from tests.core.test_watch import HEAD, diagnoses, watch_script

MLP = HEAD + """
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 8), torch.randn(64, 1)
xv, yv = torch.randn(256, 8), torch.randn(256, 1)
"""


def line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


def run(tmp_path, body: str):
    source = MLP + body
    code, doc, _ = watch_script(tmp_path, source)
    return code, doc, source


VALIDATION = """
for step in range(4):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    {ctx}
        val = nn.functional.mse_loss(model(xv), yv).item()  # VAL
"""


def test_1_validation_under_grad(tmp_path):
    code, doc, source = run(tmp_path, VALIDATION.format(ctx="if True:"))
    assert code == 0
    found = diagnoses(doc)
    assert [d["key"] for d in found] == [findings.GRAD_NOT_BACKWARDED]
    d = found[0]
    assert d["where"].endswith(f"train.py:{line_of(source, '# VAL')}")
    # independent: ReLU saves its 256x32 float output, Linear saves its input (256x8, 256x32)
    assert d["bytes"] >= 256 * 32 * 4
    assert "no_grad" in d["fix"]


def test_1_clean_validation_under_no_grad(tmp_path):
    code, doc, _ = run(tmp_path, VALIDATION.format(ctx="with torch.no_grad():"))
    assert code == 0 and diagnoses(doc) == []


KEPT = """
total = 0
def train():
    global total
    kept = []
    for step in range(4):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        {line}
train()
"""


@pytest.mark.parametrize("line, holder", [
    ("total += loss  # HOLD", "global `total`"),
    ("kept.append(loss)  # HOLD", "local `kept` in train()"),
])
def test_2_graph_kept_across_steps_names_the_holder(tmp_path, line, holder):
    code, doc, source = run(tmp_path, KEPT.format(line=line))
    assert code == 0
    found = diagnoses(doc, findings.GRAPH_KEPT)
    assert len(found) == 1 and holder in found[0]["message"]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# HOLD')}")
    assert "item()" in found[0]["fix"]
    assert [d["key"] for d in diagnoses(doc)] == [findings.GRAPH_KEPT]


def test_2_clean_item(tmp_path):
    code, doc, _ = run(tmp_path, KEPT.format(line="total += loss.item(); kept.append(loss.item())"))
    assert code == 0 and diagnoses(doc) == []


def test_2_clean_when_the_loop_holds_the_last_steps_loss(tmp_path):
    """`loss = train_step(batch)` keeps the last loss until the next step returns: while the
    next step runs its graph is alive, and harmless (backward freed what it saved)."""
    source = """
def train_step():
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss
for step in range(5):
    loss = train_step()
    print(loss.item())
"""
    code, doc, _ = run(tmp_path, source)
    assert code == 0 and diagnoses(doc) == []


CLEARING = """
for step in range(6):
    {zero}
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()  # STEP
"""


def test_3_gradients_never_cleared(tmp_path):
    code, doc, source = run(tmp_path, CLEARING.format(zero="pass"))
    assert code == 0
    found = diagnoses(doc)
    assert [d["key"] for d in found] == [findings.GRADS_NOT_CLEARED]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# STEP')}")
    assert "zero_grad" in found[0]["fix"]


@pytest.mark.parametrize("zero", ["opt.zero_grad()", "model.zero_grad()",
                                  "[setattr(p, 'grad', None) for p in model.parameters()]"])
def test_3_clean_when_cleared_any_way(tmp_path, zero):
    code, doc, _ = run(tmp_path, CLEARING.format(zero=zero))
    assert code == 0 and diagnoses(doc) == []


RNN = HEAD + """
rnn = nn.RNN(4, 8, batch_first=True)
head = nn.Linear(8, 1)
opt = torch.optim.SGD([*rnn.parameters(), *head.parameters()], lr=1e-2)
xs = torch.randn(3, 2, 5, 4)
hidden = torch.zeros(1, 2, 8)
for step in range(3):
    {detach}
    opt.zero_grad()
    out, hidden = rnn(xs[step], hidden)  # RNN
    loss = head(out).pow(2).mean()
    loss.backward()
    opt.step()
"""


def test_4_carried_state_without_detach(tmp_path, capsys):
    source = RNN.format(detach="pass")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 1
    assert "backward through the graph a second time" in capsys.readouterr().err
    found = diagnoses(doc, findings.STATE_NOT_DETACHED)
    assert len(found) == 1
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# RNN')}")
    assert "rnn forward" in found[0]["message"]  # named as the script names it
    assert "detach()" in found[0]["fix"]


def test_4_clean_with_detach(tmp_path):
    code, doc, _ = watch_script(tmp_path, RNN.format(detach="hidden = hidden.detach()"))
    assert code == 0 and diagnoses(doc) == []


TRAIN_MODE = HEAD + """
model = nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.2), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(3):
    model.train()
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    {mode}
    with torch.no_grad():
        val = model(x).mean().item()  # EVAL
"""


def test_5_validation_in_train_mode(tmp_path):
    source = TRAIN_MODE.format(mode="pass")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 0
    found = diagnoses(doc)
    assert [d["key"] for d in found] == [findings.EVAL_IN_TRAIN_MODE]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# EVAL')}")
    assert "model.eval()" in found[0]["fix"]


def test_5_clean_with_eval(tmp_path):
    code, doc, _ = watch_script(tmp_path, TRAIN_MODE.format(mode="model.eval()"))
    assert code == 0 and diagnoses(doc) == []


def test_call_site_names_each_files_own_line_however_often_asked(tmp_path):
    """call_site (the file:line a diagnosis names) keeps each site's text once made: two
    files of the same code (which compare equal as code objects) each get their own path,
    and two lines of one function their own lines, on every call."""
    import importlib.util

    from memlens.core.watch.diagnoses import call_site

    source = "def where(ask):\n    first = ask(1)\n    second = ask(1)\n    return first, second\n"
    sites = {}
    for name in ("a", "b"):
        path = tmp_path / name / "same.py"
        path.parent.mkdir()
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"same_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sites[str(path)] = [module.where(call_site) for _ in range(3)]
    for path, asked in sites.items():
        assert asked == [(f"{path}:2", f"{path}:3")] * 3

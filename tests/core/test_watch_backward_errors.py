"""A backward that raises, watched (#48): the user's own error comes back unchanged (the
script's `except RuntimeError` catches it, the exit code is the plain one), from code at
any depth (a module-level backward inside `memlens.watch()`), and the diagnosis points at
the user's backward line with the fix for what happened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memlens.core import findings
from tests.core.test_watch import HEAD, diagnoses, watch_script

ROOT = Path(__file__).resolve().parents[2]


def line_of(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if marker in line)


IN_CODE = """
import sys
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
{open}
for step in range(2):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
loss = model(x).pow(2).mean()
loss.backward()
{catch}
    loss.backward()  # AGAIN
{handler}
print("after", round(loss.item(), 6))
"""


def _run(tmp_path, source: str, name: str) -> subprocess.CompletedProcess:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize("caught", [True, False])
def test_a_module_level_backward_error_inside_memlens_watch_is_the_users_own(tmp_path,
                                                                             caught):
    catch = "try:" if caught else "if True:"
    handler = ("except RuntimeError as e:\n    print('caught', type(e).__name__)" if caught
               else "")
    body = IN_CODE.format(catch=catch, handler=handler, open="{open}")
    plain = _run(tmp_path, body.format(open=""), "plain.py")
    watched_source = body.format(open="import memlens\nw = memlens.watch(out='run', quiet=True)")
    watched = _run(tmp_path, watched_source, "watched.py")
    assert watched.returncode == plain.returncode == (0 if caught else 1)
    assert watched.stdout == plain.stdout
    last = _last_line(watched.stderr)
    assert last == _last_line(plain.stderr)
    if not caught:
        assert last.startswith("RuntimeError: Trying to backward through the graph a second")
    assert "ValueError" not in watched.stderr  # memlens's own error never replaces the user's
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    found = diagnoses(doc)
    assert [d["key"] for d in found] == [findings.BACKWARD_TWICE]
    assert found[0]["where"].endswith(f"watched.py:{line_of(watched_source, '# AGAIN')}")


CLI = HEAD + """
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
for step in range(3):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward({retain})
    opt.step()
loss = model(x).pow(2).mean()
loss.backward({retain})
loss.backward()  # AGAIN
"""


def test_a_double_backward_under_main_py_watch_points_at_the_users_line(tmp_path, capsys):
    source = CLI.format(retain="")
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 1
    assert "backward through the graph a second time" in capsys.readouterr().err
    found = diagnoses(doc)
    assert [d["key"] for d in found] == [findings.BACKWARD_TWICE]
    d = found[0]
    assert d["where"].endswith(f"train.py:{line_of(source, '# AGAIN')}")
    assert "main.py" not in d["where"]
    assert "retain_graph=True" in d["fix"] and "hidden" not in d["fix"]


def test_clean_a_second_backward_of_a_retained_graph(tmp_path):
    code, doc, _ = watch_script(tmp_path, CLI.format(retain="retain_graph=True"))
    assert code == 0 and diagnoses(doc) == []


def test_two_losses_of_one_forward_each_backwarded_are_a_graph_backwarded_twice(tmp_path):
    source = HEAD + """
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
opt.zero_grad()
out = model(x)
out[:, 0].pow(2).mean().backward()
out[:, 1].pow(2).mean().backward()  # SECOND
opt.step()
"""
    code, doc, _ = watch_script(tmp_path, source)
    assert code == 1
    found = diagnoses(doc)
    assert [d["key"] for d in found] == [findings.BACKWARD_TWICE]
    assert found[0]["where"].endswith(f"train.py:{line_of(source, '# SECOND')}")

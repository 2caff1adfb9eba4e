"""One vocabulary of findings: the lab and a watch name the same bug with the same key, and
docs/watch.md's table is the findings module's."""

from __future__ import annotations

import json
from pathlib import Path

from memlens.core import findings
from memlens.core.watch.script import run_script
from tests.core.helpers import run

ROOT = Path(__file__).resolve().parents[2]

TOTAL_LOSS_SCRIPT = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
total_loss = 0
for step in range(12):
    opt.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    total_loss += loss
print(float(total_loss))
"""


def test_docs_table_of_diagnoses_is_the_findings_module():
    text = (ROOT / "docs" / "watch.md").read_text()
    assert findings.markdown_table() in text


def test_every_finding_says_what_main_py_fix_applies_as_fix_does():
    """A finding's `fix_applies` is the kind of the rule `fix` has for its key (core/fix):
    none where fix has none."""
    from memlens.core.fix import table

    assert len(findings.BY_KEY) == len(findings.FINDINGS)
    for f in findings.FINDINGS:
        assert f.fix and f.found_when and f.where and set(f.seen_by) <= {"lab", "watch"}
        rule = table.rule_for(f.key)
        assert (rule.kind if rule is not None else None) == f.fix_applies, f.key
    assert set(table.FIXES) <= set(findings.BY_KEY)


def test_the_lab_and_a_watch_name_total_loss_plus_equals_loss_alike(tmp_path, capsys):
    """`total_loss += loss` in training: the lab's leak preset and a user's script with the
    same bug are reported under one key, the finding's."""
    history, _ = run("mlp", steps=14, leak_loss_sum=True, no_grad_eval=True)
    lab = {e.key for e in history.events() if e.kind == "leak"}
    script = tmp_path / "train.py"
    script.write_text(TOTAL_LOSS_SCRIPT)
    assert run_script(str(script), [], out=tmp_path / "run", quiet=True) == 0
    capsys.readouterr()
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    watched = {e["key"] for e in doc["events"] if e["kind"] == "diagnosis"}
    assert findings.GRAPH_KEPT in lab and findings.GRAPH_KEPT in watched
    fixes = {e["fix"] for e in doc["events"] if e["key"] == findings.GRAPH_KEPT}
    assert fixes == {findings.fix_of(findings.GRAPH_KEPT)}

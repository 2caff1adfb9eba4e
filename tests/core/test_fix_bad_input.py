"""`main.py fix` on bad input: exit 2 with one line, nothing of the user's changed; a clean
script gives `[]`; `--write`'s checks (core.fix.write), each before anything is written."""

from __future__ import annotations

import json
import os
import stat

import pytest

from memlens.core.fix.write import FixWriteError, save_patch, write_fix
from tests.core.test_fix import run_cli

CLEAN = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
"""


def refused(code: int, err: str) -> str:
    """The one line that says what is wrong (after any progress line, `[1/3] ...`)."""
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("memlens fix: [")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("memlens fix: "), err
    return lines[0]


def test_a_script_that_does_not_parse(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("for step in range(3)\n    pass\n")
    line = refused(*run_cli(tmp_path, "fix", str(script), "--out", "fix")[::2])
    assert "not a Python script" in line
    assert not (tmp_path / "fix").exists()


def test_a_script_the_watch_finds_nothing_in(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("print('no training here')\n")
    line = refused(*run_cli(tmp_path, "fix", str(script), "--out", "fix")[::2])
    assert "no model call and no optimizer" in line and "exit code 0" in line
    assert script.read_text() == "print('no training here')\n"
    # nothing trained, so nothing under --out refuses the next try: the same line again
    assert refused(*run_cli(tmp_path, "fix", str(script), "--out", "fix")[::2]) == line


def test_a_script_that_fails_before_it_trains_asks_for_its_arguments(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nsys.exit('train.py: error: --data is required')\n")
    line = refused(*run_cli(tmp_path, "fix", str(script), "--out", "fix")[::2])
    assert "failed before it trained (exit code 1" in line and "--data is required" in line
    assert "after --" in line


def test_a_clean_script_gives_an_empty_list(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CLEAN)
    code, out, err = run_cli(tmp_path, "fix", str(script), "--out", "fix")
    assert code == 0, err
    assert json.loads((tmp_path / "fix" / "fix.json").read_text()) == []
    assert not (tmp_path / "fix" / "fixed").exists() and not (tmp_path / "fix" / "after").exists()
    assert "nothing to fix" in out
    # an --out folder that holds a fix is refused, the fix in it kept
    line = refused(*run_cli(tmp_path, "fix", str(script), "--out", "fix")[::2])
    assert "fix.json" in line and "a fix" in line and "nothing was deleted" in line
    assert json.loads((tmp_path / "fix" / "fix.json").read_text()) == []


def test_write_on_a_read_only_script_is_refused_before_anything_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CLEAN)
    script.chmod(0o444)
    line = refused(*run_cli(tmp_path, "fix", str(script), "--out", "fix", "--write")[::2])
    assert "read-only" in line
    assert script.read_text() == CLEAN and not (tmp_path / "train.py.orig").exists()
    assert not (tmp_path / "fix").exists()


# --- --write's checks on a fix folder ------------------------------------------------------------
@pytest.fixture
def patch(tmp_path):
    """A fix folder as fix leaves it: the script, its patched copy, patch.json."""
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    script.chmod(0o640)
    out = tmp_path / "fix"
    (out / "fixed").mkdir(parents=True)
    copy = out / "fixed" / "train.py"
    copy.write_text("x = 2\n")

    def make(ok: bool = True):
        save_patch(out, script=script, args=[], steps=3, cwd=tmp_path,
                   files={script: (script.read_bytes(), copy)}, patched_ok=ok,
                   why_not=None if ok else "the patched copy failed (exit code 1)")
        return script, out

    return make


def test_write_backs_up_then_writes_keeping_the_mode(patch):
    script, out = patch()
    assert write_fix(out) == [script]
    assert script.read_text() == "x = 2\n"
    assert script.with_name("train.py.orig").read_text() == "x = 1\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o640


@pytest.mark.parametrize("spoil, why", [
    (lambda s: s.write_text("x = 3\n"), "changed since the fix was planned"),
    (lambda s: s.chmod(0o444), "read-only"),
    (lambda s: s.with_name("train.py.orig").write_text("mine\n"), "already exists"),
])
def test_write_refuses_and_changes_nothing(patch, spoil, why):
    script, out = patch()
    spoil(script)
    before = script.read_text()
    backup = script.with_name("train.py.orig")
    had_backup = backup.read_text() if backup.exists() else None
    with pytest.raises(FixWriteError, match=why):
        write_fix(out)
    assert script.read_text() == before
    assert (backup.read_text() if backup.exists() else None) == had_backup


def test_write_refuses_a_patch_whose_copy_failed(patch):
    script, out = patch(ok=False)
    with pytest.raises(FixWriteError, match="did not run as the original did"):
        write_fix(out)
    assert script.read_text() == "x = 1\n" and not os.path.exists(f"{script}.orig")

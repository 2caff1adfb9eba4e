"""Toggles given to Lightning's MemlensCallback(at=[...]) act at Lightning's global steps,
as `main.py watch --at` does on a plain loop (tests/core/test_watch_toggles.py)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("lightning")

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "core" / "toggle_scripts"


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_zero_grad_zeros_and_a_no_op_no_grad_given_to_the_lightning_callback(tmp_path):
    script = str(SCRIPTS / "lightning_module.py")
    with ThreadPoolExecutor(2) as pool:
        watched = pool.submit(_run, [script, str(tmp_path / "run")],
                              AT="3:zero_grad=zeros,4:no_grad_eval=true")
        plain = pool.submit(_run, [str(SCRIPTS / "plain_count.py"), script])
    watched, plain = watched.result(), plain.result()
    assert watched.returncode == 0, watched.stderr[-2000:]
    assert plain.returncode == 0, plain.stderr[-2000:]

    def lines(out):
        return [ln for ln in out.splitlines() if ln.startswith(("step ", "val "))]

    assert lines(watched.stdout) == lines(plain.stdout)  # zeros for None: the same results
    assert len(lines(watched.stdout)) == 12
    truth = {int(ln.split("=")[1]) for ln in plain.stdout.splitlines()
             if ln.startswith("GRADS ")}
    with (tmp_path / "run" / "memory.csv").open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["phase"] == "zero_grad"]
    params = 4 * (16 * 32 + 32 + 32 * 4 + 4)
    # Lightning's zero_grad calls (its optimizer's, and the module's before validation),
    # forced to zeros from step 3: the gradients stay allocated, as plain torch counts
    # them; before, set_to_none freed them as in the plain run
    assert truth == {0}
    grads = [(int(r["step"]), int(r["grads_bytes"])) for r in rows]
    assert {g for s, g in grads if s < 3} == {0} and {g for s, g in grads if s >= 3} == {params}
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    toggles = [e for e in doc["events"] if e["kind"] == "toggle"]
    assert [(e["step"], e["key"], e["old"], e["new"]) for e in toggles] == [
        (3, "zero_grad", "set_to_none", "zeros"), (4, "no_grad_eval", True, True)]
    # Lightning runs validation under no_grad and in eval mode itself
    assert toggles[1]["message"] == "no-op: the script's evaluation forwards run under no_grad"

"""`lessons` without a display: the report and its PNG charts are written (Qt offscreen
whatever the environment says), and its progress in a log is one line per lesson."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.core.test_cli_run import ROOT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_lessons_without_a_display_writes_the_report_and_pngs(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["OMP_NUM_THREADS"] = "1"
    out = tmp_path / "rep"
    p = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), "lessons", "--preset", "mlp", "--quick",
         "--lesson", "zero_grad", "leak_loss_sum", "--set", "batch_size=32", "width=64",
         "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (out / "lessons.md").exists()
    pngs = sorted((out / "charts").glob("*.png"))
    assert [f.stem for f in pngs] == ["mlp-leak_loss_sum", "mlp-zero_grad"]
    assert all(f.read_bytes()[:8] == PNG_MAGIC for f in pngs)
    assert "(charts/mlp-zero_grad.png)" in (out / "lessons.md").read_text()
    # stderr is a pipe here: a line per lesson, never a carriage return
    assert "\r" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip().startswith("lesson ")]
    # leak_loss_sum runs at least 8 steps an arm: its heap growth is a median of changes
    assert lines == ["  lesson 1/2: zero_grad on mlp, 8 steps",
                     "  lesson 2/2: leak_loss_sum on mlp, 16 steps"]

"""Ctrl-C and SIGTERM end a command with one line and 128 + N, its files complete: during a
watch, during lessons (also in its first seconds, before its own handler is set), and
during a shot whose model's forward never returns (no Qt abort over a running thread)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.core.cli_child import ROOT, TINY, TRAIN_SCRIPT, child_env, model_file

MARKER_HEAD = """
import os as _os, pathlib as _pathlib
_MARKER = _pathlib.Path(_os.environ["MEMLENS_TEST_MARKER"])
"""


def _wait_for(proc: subprocess.Popen, done) -> None:
    """Until `done()` or the child exits (the bound only keeps a broken child from hanging
    the suite)."""
    for _ in range(20_000):
        if done():
            return
        try:
            proc.wait(timeout=0.05)
            return
        except subprocess.TimeoutExpired:
            pass


def _signal_when(args: list, done, sig: int, env: dict | None = None):
    """main.py `args` in a child; `sig` once `done()`: (exit code, stdout, stderr)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "main.py"), *map(str, args)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(env))
    try:
        _wait_for(proc, done)
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def _rows(csv: Path, rows: int):
    return lambda: csv.is_file() and len(csv.read_text().splitlines()) > rows


def test_watch_on_sigterm_finishes_run_json(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    out = tmp_path / "w"
    code, _, err = _signal_when(["watch", script, "--out", out, "--", "100000000"],
                                _rows(out / "steps.csv", 3), signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "SIGTERM" in err
    rows = (out / "steps.csv").read_text().splitlines()[1:]
    doc = json.loads((out / "run.json").read_text())
    assert doc["summary"] is not None and doc["summary"]["steps_done"] == len(rows)
    assert doc["summary"]["extra"]["exit_code"] == 128 + signal.SIGTERM


def test_lessons_on_sigterm_writes_the_report(tmp_path):
    out = tmp_path / "report"
    code, _, err = _signal_when(["lessons", "--lesson", "zero_grad", "--steps", "100000000",
                                 *TINY[:3], "--quiet", "--out", out],
                                _rows(out / "runs" / "mlp-zero_grad-off" / "steps.csv", 3),
                                signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "SIGTERM" in err
    report = json.loads((out / "lessons.json").read_text())
    assert report["stopped"] is True and (out / "lessons.md").is_file()
    for arm in ("off", "on"):
        folder = out / "runs" / f"mlp-zero_grad-{arm}"
        rows = (folder / "steps.csv").read_text().splitlines()[1:]
        summary = json.loads((folder / "run.json").read_text())["summary"]
        assert summary is not None and summary["steps_done"] == len(rows)


def test_ctrl_c_in_the_first_seconds_of_lessons_is_one_line_and_130(tmp_path):
    """Ctrl-C while the model file loads for the memory check, before lessons measures
    anything (and before its own Ctrl-C handling is in place)."""
    marker = tmp_path / "loading"
    preset = model_file(tmp_path, MARKER_HEAD + "_MARKER.touch()\nimport time\n"
                        "time.sleep(120)\n")
    code, _, err = _signal_when(["lessons", "--preset", preset, "--lesson", "zero_grad",
                                   "--steps", "2", "--quiet", "--out", tmp_path / "rep"],
                                  marker.exists, signal.SIGINT,
                                  {"MEMLENS_TEST_MARKER": str(marker)})
    assert code == 130, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert [line for line in err.splitlines() if line.strip()] == [
        "memlens: stopped by Ctrl-C (SIGINT)"]


STUCK_FORWARD = MARKER_HEAD + """
import time
from torch import nn
class Stuck(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        if not x.is_meta:  # the memory estimate runs on the meta device
            _MARKER.touch()
            while True:  # a step that never returns, as a deadlocked kernel would
                time.sleep(0.05)
        return self.fc(x)
"""


def test_sigint_during_a_shot_whose_forward_never_returns_saves_it_and_exits_130(tmp_path):
    marker = tmp_path / "in-forward"
    preset = model_file(tmp_path, STUCK_FORWARD, build="    return Stuck()")
    out = tmp_path / "s.png"
    code, _, err = _signal_when(["shot", "--preset", preset, "--steps", "5", "--out", out],
                                marker.exists, signal.SIGINT,
                                {"MEMLENS_TEST_MARKER": str(marker)})
    assert code == 130, err[-2000:]
    assert "QThread" not in err and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("memlens shot:")] == [
        "memlens shot: stopped by SIGINT after 0 steps; the picture shows them"]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

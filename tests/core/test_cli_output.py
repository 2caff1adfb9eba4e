"""The `run` command's output as a log reads it: lines, not carriage returns; a rate without the
start-up; bytes in the unit that fits each value; --help with every valid value and default."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from memlens.cli.progress import LOG_EVERY_S, Progress

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def step(i: int) -> SimpleNamespace:
    return SimpleNamespace(step=i, loss=1.0, allocated_bytes=3 * 2**20)


def test_a_log_gets_a_line_every_few_seconds_and_no_carriage_return():
    out, clock = io.StringIO(), FakeClock(1000.0)  # start-up took long before step 0
    progress = Progress(100, stream=out, clock=clock, tty=False)
    for i in range(100):
        clock.t += 0.25  # 4 steps a second
        progress.on_steps([(step(i), ())])
    progress.on_finish(None)
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    # 25 s of steps: the first step, one line every LOG_EVERY_S, and the last step
    assert len(lines) == 1 + int(25 / LOG_EVERY_S - 1e-9) + 1, lines
    assert lines[0].startswith("  step 1/100") and lines[-1].startswith("  step 100/100")
    assert "steps/s" not in lines[0]  # no rate from one step
    assert "4.0 steps/s" in lines[-1]  # 99 steps in 24.75 s, the start-up not counted
    assert "3.00 MiB" in lines[-1]


def test_a_terminal_gets_one_redrawn_line_cleared_at_the_end():
    out, clock = io.StringIO(), FakeClock(0.0)
    progress = Progress(10, stream=out, clock=clock, tty=True)
    for i in range(10):
        clock.t += 1.0
        progress.on_steps([(step(i), ())])
    progress.on_finish(None)
    text = out.getvalue()
    assert "\n" not in text and text.count("\r") == 10 + 2  # 10 redraws, one clear


def test_quiet_writes_nothing():
    out = io.StringIO()
    progress = Progress(3, quiet=True, stream=out, clock=FakeClock(0.0), tty=False)
    for i in range(3):
        progress.on_steps([(step(i), ())])
    assert out.getvalue() == ""


def test_cli_output_in_a_log_and_its_summary_units(tmp_path):
    p = cli("run", "--preset", "mlp", "--steps", "6", "--set", "batch_size=8", "width=16",
            "--out", str(tmp_path / "r"))
    assert p.returncode == 0, p.stderr
    assert "\r" not in p.stderr and "step 6/6" in p.stderr
    from memlens.core.config import RunConfig
    from memlens.core.preset_factory import build_preset

    cfg = RunConfig().with_values({"preset": "mlp", "batch_size": 8, "width": 16})
    params = sum(t.numel() * t.element_size()
                 for t in build_preset(cfg, torch.device("cpu")).parameters())
    lines = {ln.split()[0]: ln for ln in p.stdout.splitlines() if ln.startswith("  ")}
    _, value, unit = lines["params"].split()[:3]
    assert unit == "KiB", lines["params"]  # the tiny mlp's params are under a MiB
    assert abs(float(value) * 1024 - params) <= 0.01 * params, (value, params)


def test_temporaries_not_measured_in_light_mode_read_as_not_measured(tmp_path):
    """Light mode on CPU does not measure temporaries: the summary prints a dash, not 0 B;
    precise mode measures them and prints bytes (lstm holds its logits past the phase)."""
    lines = {}
    for mode in ("light", "precise"):
        p = cli("run", "--preset", "lstm", "--steps", "2", "--set", "batch_size=4",
                "width=16", "seq_len=8", *(["--precise"] if mode == "precise" else []),
                "--out", str(tmp_path / mode))
        assert p.returncode == 0, p.stderr
        lines[mode] = next(ln for ln in p.stdout.splitlines()
                           if ln.split()[:1] == ["temporaries"])
    assert "—" in lines["light"] and "not measured" in lines["light"]
    assert "B" not in lines["light"].split("(")[0]
    assert "—" not in lines["precise"] and lines["precise"].rstrip().endswith("B")


def test_cuda_only_setting_on_cpu_is_said(tmp_path):
    if torch.cuda.is_available():
        return
    p = cli("run", "--preset", "mlp", "--steps", "2", "--set", "batch_size=8", "width=16",
            "cuda_snapshot_steps=5", "device=cpu", "--out", str(tmp_path / "r"))
    assert p.returncode == 0, p.stderr
    assert "cuda_snapshot_steps=5 has no effect" in p.stderr


def test_run_help_lists_valid_values_and_defaults():
    from memlens.core.options import RUN_OPTIONS, TECHNIQUE_OPTIONS

    p = cli("run", "--help")
    assert p.returncode == 0
    rows = {ln.split()[0]: ln for ln in p.stdout.splitlines() if ln.startswith("  ")}
    for opt in RUN_OPTIONS + TECHNIQUE_OPTIONS:
        row = rows[opt.key]
        for choice in opt.choices:
            assert choice in row, (opt.key, row)
        assert "default" in row
    assert "default set_to_none" in rows["zero_grad"]
    assert "default true" in rows["detach_state"] and "True" not in p.stdout
    assert "default 0.001" in rows["lr"]

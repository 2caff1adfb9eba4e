"""bf16 where the CPU lacks it: the probe, the refusals (start, live switch, a failing step),
the lessons' rows, the emulated-bf16 note, and the threads setting.

A CPU without bf16 LSTM is simulated by memlens's own probe (MEMLENS_CPU_BF16_FAIL) on a
machine that has it; in a subprocess, ONEDNN_MAX_CPU_ISA=AVX2 makes oneDNN such a CPU for
real, and the probe must agree with plain torch there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import memlens.__main__ as main
from memlens.core import cpu_support
from memlens.core.cpu_support import SIMULATE_ENV, bf16_support, is_unsupported_error
from tests.core.helpers import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_bf16_lstm(monkeypatch):
    """This process's CPU, as one whose oneDNN has no bf16 LSTM (nor native bf16)."""
    monkeypatch.setenv(SIMULATE_ENV, "lstm")
    bf16_support.cache_clear()
    yield
    monkeypatch.delenv(SIMULATE_ENV)
    bf16_support.cache_clear()


def test_the_probe_agrees_with_plain_torch_on_a_cpu_capped_at_avx2():
    code = (
        "import torch\n"
        "from memlens.core.cpu_support import bf16_support\n"
        "try:\n"
        "    with torch.autocast('cpu', dtype=torch.bfloat16):\n"
        "        torch.nn.LSTM(4, 4)(torch.randn(2, 1, 4))[0].float().sum().backward()\n"
        "    plain = True\n"
        "except RuntimeError:\n"
        "    plain = False\n"
        "s = bf16_support()\n"
        "print(plain, 'lstm' not in s.failed, s.native)\n")
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    env.pop(SIMULATE_ENV, None)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    plain, probed, native = done.stdout.split()
    assert plain == probed  # the probe says what plain torch does on this CPU
    assert native == "False"  # oneDNN capped below AVX512-BF16 has no native bf16


def test_start_with_bf16_on_lstm_exits_2_with_one_line_and_makes_no_folder(
        no_bf16_lstm, tmp_path, capsys):
    out = tmp_path / "r"
    code = main.main(["run", "--preset", "lstm", "--set", "amp=bf16", "batch_size=4",
                      "width=16", "seq_len=4", "--steps", "2", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "cannot run an LSTM under bf16 autocast" in err[0], err
    assert "CUDA" in err[0] and "models without an LSTM run bf16 here" in err[0]
    assert not out.exists()


def test_other_presets_run_bf16_where_lstm_cannot(no_bf16_lstm):
    history, summary = run("mlp", steps=3, amp="bf16")
    assert summary.stopped_by == "completed" and summary.steps_done == 3
    casts = history.samples.column("amp_casts")
    assert casts.max() > 0  # bf16 copies of the weights: it ran under autocast


def test_switching_bf16_on_mid_run_is_refused_at_the_step_and_the_run_goes_on(no_bf16_lstm):
    history, summary = run("lstm", steps=6, at=("2:amp=bf16", "4:amp=off"))
    assert summary.stopped_by == "completed" and summary.steps_done == 6
    events = history.events()
    (refused,) = [e for e in events if e.kind == "refused"]
    assert (refused.step, refused.key, refused.old, refused.new) == (2, "amp", "off", "bf16")
    assert "cannot run an LSTM under bf16" in refused.explanation
    assert not [e for e in events if e.kind == "error"]
    # amp stayed off: the 4:amp=off is no change, and no bf16 weight copy was ever saved
    assert not [e for e in events if e.kind == "toggle" and e.key == "amp"]
    assert history.samples.column("amp_casts").max() == 0


MODEL_FILE = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        if torch.is_autocast_enabled("cpu"):  # as a kernel this CPU lacks would fail
            raise RuntimeError("could not create a primitive descriptor for a matmul primitive")
        return self.fc(x)

def build_model():
    return Net()

def make_batch(step, split):
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)

CONFIG = {"batch_size": 16, "eval_every": 0}
'''


def test_a_step_that_fails_in_onednn_under_bf16_is_run_again_in_fp32(tmp_path):
    from memlens.core.config import RunConfig, ScheduledChange
    from memlens.core.controls import RunControls
    from memlens.core.history import RunHistory
    from memlens.core.loop import run_training
    from memlens.core.model_file import with_model_file

    path = tmp_path / "net.py"
    path.write_text(MODEL_FILE)

    def build(cfg):
        return cfg.with_values({"preset": str(path), "steps": 5})

    cfg = with_model_file(build(RunConfig()), build).with_schedule(
        [ScheduledChange.parse("2:amp=bf16")])
    history = RunHistory()
    summary = run_training(cfg, RunControls(cfg.techniques, cfg.schedule), history)
    assert summary.stopped_by == "completed" and summary.steps_done == 5
    assert list(history.steps.column("step")) == [0, 1, 2, 3, 4]
    (refused,) = [e for e in history.events() if e.kind == "refused"]
    assert refused.step == 2 and refused.old == "off" and refused.new == "bf16"
    assert "could not create a primitive descriptor" in refused.explanation
    assert not [e for e in history.events() if e.kind == "error"]


def test_the_lessons_mark_bf16_on_lstm_not_measurable_and_measure_the_rest(no_bf16_lstm):
    from memlens.core.lessons.runner import NOT_MEASURABLE, LessonRunner

    runner = LessonRunner(["lstm"], quick=True, names=("amp_bf16", "zero_grad"),
                          settings={"batch_size": 4, "width": 16, "seq_len": 4})
    rows = runner.run().rows
    amp = [r for r in rows if r.lesson == "amp_bf16"]
    assert amp and all(r.verdict == NOT_MEASURABLE and r.off is None for r in amp)
    assert all("cannot run an LSTM under bf16" in r.note for r in amp)
    grads = next(r for r in rows if r.metric == "grads at zero_grad")
    assert grads.off > 0 and grads.on == 0  # the rest is measured


def test_bf16_emulated_on_this_cpu_is_measured_with_a_note(no_bf16_lstm):
    from memlens.core.lessons.runner import LessonRunner

    history, _ = run("mlp", steps=2, amp="bf16")
    (note,) = [e for e in history.events() if e.key == "bf16 emulated"]
    assert note.kind == "setup" and "no native bf16" in note.explanation
    rows = LessonRunner(["mlp"], quick=True, names=("amp_bf16",),
                        settings={"batch_size": 16, "width": 32}).run().rows
    time_row = next(r for r in rows if r.metric == "step time")
    assert time_row.on is not None and time_row.off is not None  # measured
    assert "no native bf16" in time_row.note


def test_no_emulation_note_where_bf16_is_native():
    if not bf16_support().native:
        pytest.skip(f"this CPU ({bf16_support().cpu_text()}) has no native bf16")
    history, _ = run("mlp", steps=2, amp="bf16")
    assert not [e for e in history.events() if e.key == "bf16 emulated"]


def test_onednn_errors_are_told_from_others():
    assert is_unsupported_error(RuntimeError(
        "could not create a primitive descriptor for the LSTM forward propagation primitive"))
    assert not is_unsupported_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_unsupported_error(ValueError("could not create a primitive descriptor"))


def test_the_threads_setting_is_used_and_recorded():
    before = torch.get_num_threads()
    try:
        history, _ = run("mlp", steps=2, threads=1)
        assert torch.get_num_threads() == 1
        assert history.meta["environment"]["threads"] == 1
        assert history.meta["config"]["threads"] == 1
        history, _ = run("mlp", steps=2)  # 0: torch's default again
        assert history.meta["environment"]["threads"] == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_the_environment_names_the_cpu_and_its_bf16():
    history, _ = run("mlp", steps=1)
    cpu = history.meta["environment"]["cpu"]
    assert cpu["cpu"] == cpu_support.cpu_name()
    assert cpu["isa"].startswith(torch.backends.cpu.get_cpu_capability())
    assert isinstance(cpu["native_bf16"], bool)


def test_lessons_report_writes_the_reason_into_lessons_md(no_bf16_lstm, tmp_path):
    from memlens.core.lessons.report import write_report
    from memlens.core.lessons.runner import LessonRunner

    report = LessonRunner(["lstm"], quick=True, names=("amp_bf16",),
                          settings={"batch_size": 4, "width": 16, "seq_len": 4}).run()
    write_report(report, tmp_path)
    md = (tmp_path / "lessons.md").read_text()
    assert "not measurable on this CPU [1]" in md
    assert "[1] This CPU" in md and "cannot run an LSTM" in md
    rows = json.loads((tmp_path / "lessons.json").read_text())["rows"]
    assert {r["note"] for r in rows} == {report.rows[0].note}

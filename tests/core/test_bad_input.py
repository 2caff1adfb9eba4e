"""Bad settings, reused folders, runs that cannot fit, disk and allocation failures, signals:
each is an exit code and one clear message, never a traceback or a mixed-up run folder."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import main as memlens_main
from memlens.core.options import OPTIONS
from memlens.core.runfolder.writer import RunWriter

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "batch_size=16", "width=32", "eval_every=0"]


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = memlens_main.main([str(a) for a in args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("key,value", [
    ("seed", 2**64), ("eval_every", 2**63), ("steps", 10**12), ("capture_every", 2**63),
    ("cuda_snapshot_start", 2**63),
])
def test_huge_integer_settings_exit_2_naming_the_setting_and_its_bound(capsys, tmp_path, key,
                                                                       value):
    code, err = run_cli(capsys, "run", "--set", f"{key}={value}", "--out", tmp_path / "r")
    assert code == 2
    assert err.startswith(f"memlens run: {key}:") and "<=" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_every_integer_setting_has_an_upper_bound():
    unbounded = [o.key for o in OPTIONS.values() if o.kind is int and o.maximum is None]
    assert unbounded == []


def test_graph_step_far_past_any_run_is_refused(capsys, tmp_path):
    code, err = run_cli(capsys, "graph", "--step", 10**20, "--out", tmp_path / "g.dot")
    assert code == 2 and "--step" in err
    assert not (tmp_path / "g.dot").exists()


def test_empty_out_is_an_error(capsys):
    code, err = run_cli(capsys, "run", "--steps", "1", *TINY, "--out", "")
    assert code == 2 and "--out ''" in err


def _steps(folder: Path) -> list[str]:
    return (folder / "steps.csv").read_text().splitlines()


def test_reusing_out_is_refused_and_leaves_the_old_run_whole(capsys, tmp_path):
    out = tmp_path / "r"
    assert run_cli(capsys, "run", "--steps", "3", *TINY, "--precise", "--quiet",
                   "--out", out)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert "allocations.npy" in before
    code, err = run_cli(capsys, "run", "--steps", "2", *TINY, "--quiet", "--out", out)
    assert code == 2 and str(out) in err and "--force" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_force_clears_the_old_runs_files_and_keeps_others(capsys, tmp_path):
    out = tmp_path / "r"
    assert run_cli(capsys, "run", "--steps", "3", *TINY, "--precise", "--quiet",
                   "--out", out)[0] == 0
    (out / "notes.txt").write_text("mine")
    code, err = run_cli(capsys, "run", "--steps", "2", *TINY, "--quiet", "--force",
                        "--out", out)
    assert code == 0, err
    assert not (out / "allocations.npy").exists()
    assert len(_steps(out)) == 1 + 2
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_leaves_no_folder(capsys, tmp_path):
    code, err = run_cli(capsys, "run", "--steps", "1", "--set", "device=cuda",
                        "--out", tmp_path / "c")
    assert code == 2 and "cuda" in err
    assert not (tmp_path / "c").exists()


def test_at_past_the_last_step_or_twice_at_one_step_is_warned_about(capsys, tmp_path):
    code, err = run_cli(capsys, "run", "--steps", "3", *TINY, "--quiet", "--out", tmp_path / "r",
                        "--at", "7:zero_grad=off", "1:amp=bf16", "1:amp=off", "2:accumulate=2")
    assert code == 0
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 2
    assert any("7:zero_grad=off" in w and "last step is 2" in w for w in warnings)
    assert any("1:amp=off" in w and "more than once" in w for w in warnings)


# --- memory check before a run ----------------------------------------------------------------


def test_estimate_matches_plain_torch_counts_of_the_same_model():
    from memlens.core.config import RunConfig, TechniqueToggles
    from memlens.core.preflight import estimate_run_memory
    from memlens.core.preset_factory import build_preset

    cfg = RunConfig(preset="mlp", batch_size=8, width=48)
    estimate = estimate_run_memory(cfg)
    preset = build_preset(cfg, torch.device("cpu"))
    params = preset.parameters()
    saved: list[int] = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.append(t.nbytes) or t, lambda t: t):
        loss = preset.forward_train(TechniqueToggles()).report_loss
    loss.backward()
    preset.optimizers[0].step()
    state = [t for s in preset.optimizers[0].state.values() for k, t in s.items() if k != "step"]
    assert estimate.params == sum(p.nbytes for p in params)
    assert estimate.grads == sum(p.grad.nbytes for p in params)
    assert estimate.optimizer == sum(t.nbytes for t in state)
    assert estimate.data == sum(t.nbytes for t in preset.data_tensors())
    assert estimate.activations == sum(saved)


def test_a_run_that_cannot_fit_is_refused_with_the_estimate(capsys, tmp_path, monkeypatch):
    import memlens.core.preflight

    monkeypatch.setattr(memlens.core.preflight, "available_memory",
                        lambda device: (4096, "the test"))
    code, err = run_cli(capsys, "run", "--steps", "2", *TINY, "--out", tmp_path / "r")
    assert code == 2
    assert "needs about" in err and "4.00 KiB is available" in err and "force=true" in err
    assert not (tmp_path / "r").exists()
    code, err = run_cli(capsys, "run", "--steps", "2", *TINY, "--set", "force=true", "--quiet",
                        "--out", tmp_path / "r")
    assert code == 0, err
    assert len(_steps(tmp_path / "r")) == 3


def test_headers_and_a_preliminary_run_json_are_on_disk_before_the_first_step(tmp_path):
    writer = RunWriter(tmp_path / "r", meta={"config": {"preset": "mlp"}})
    try:
        assert _steps(tmp_path / "r")[0].startswith("step,time_s,")
        assert (tmp_path / "r" / "memory.csv").read_text().startswith("step,phase,")
        doc = json.loads((tmp_path / "r" / "run.json").read_text())
        assert doc["config"] == {"preset": "mlp"} and doc["summary"] is None
    finally:
        writer.close()


def test_out_of_memory_while_building_the_model_exits_2(capsys, tmp_path, monkeypatch):
    import memlens.core.training

    def build_too_big(config, device):
        return torch.empty(2**50, dtype=torch.uint8)  # the CPU allocator's own refusal

    monkeypatch.setattr(memlens.core.training, "build_preset", build_too_big)
    code, err = run_cli(capsys, "run", "--steps", "2", *TINY, "--out", tmp_path / "r")
    assert code == 2
    assert "out of memory while building the mlp model" in err and "Traceback" not in err
    doc = json.loads((tmp_path / "r" / "run.json").read_text())
    assert doc["summary"]["stopped_by"] == "setup_error" and doc["config"]["preset"] == "mlp"


def test_a_full_disk_during_a_run_stops_it_with_exit_2_and_keeps_the_rows(capsys, tmp_path,
                                                                          monkeypatch):
    from memlens.core.runfolder.writer import FolderFiles

    written = []
    real = FolderFiles.on_steps

    def on_steps(self, rows):  # on the writer's thread, where a real disk fills up
        if len(written) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.extend(record.step for record, _ in rows)
        real(self, rows)

    monkeypatch.setattr(FolderFiles, "on_steps", on_steps)
    out = tmp_path / "r"
    code, err = run_cli(capsys, "run", "--steps", "50", *TINY, "--quiet", "--out", out)
    assert code == 2 and "No space left on device" in err and "Traceback" not in err
    assert [int(r.split(",")[0]) for r in _steps(out)[1:]] == written == [0, 1, 2]
    doc = json.loads((out / "run.json").read_text())
    assert doc["summary"]["stopped_by"] == "write_error"
    assert doc["summary"]["steps_done"] < 50


# --- Ctrl-C and SIGTERM -------------------------------------------------------------------------


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_with_one_line_and_a_final_run_json(tmp_path, sig, code):
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "main.py"), "run", "--steps", "100000000", *TINY,
         "--quiet", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Wait for a step row (the file is flushed row by row), looking between short waits
        # for the process to exit; the bound only keeps a broken run from hanging the suite.
        for _ in range(10_000):
            if (out / "steps.csv").is_file() and len(_steps(out)) >= 2:
                break
            try:
                proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                pass
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.startswith("memlens run:")]
    assert len(lines) == 1 and "Traceback" not in err
    rows = _steps(out)[1:]
    last = int(rows[-1].split(",")[0])
    assert f"stopped at step {last} ({sig.name}); files complete up to it" in lines[0]
    doc = json.loads((out / "run.json").read_text())
    assert doc["summary"]["stopped_by"] == sig.name
    assert doc["summary"]["steps_done"] == len(rows)
    assert np.isfinite(float(rows[-1].split(",")[2]))  # the last row is whole


def test_new_run_folders_are_made_fresh_even_in_the_same_second(tmp_path):
    from memlens.core.runfolder.claim import new_run_folder

    folders = [new_run_folder(tmp_path, "mlp") for _ in range(3)]
    assert len(set(folders)) == 3
    assert all(f.is_dir() and not any(f.iterdir()) for f in folders)

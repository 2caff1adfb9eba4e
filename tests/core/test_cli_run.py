"""The headless CLI: files, exit codes, messages without tracebacks."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "batch_size=16", "--set", "width=32"]


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)


def test_run_writes_the_three_files_with_the_documented_columns(tmp_path):
    out = tmp_path / "r"
    p = cli("run", "--preset", "mlp", "--steps", "12", *TINY, "--set", "eval_every=4",
            "--at", "6:zero_grad=off", "--out", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    steps = read_csv(out / "steps.csv")
    assert len(steps) == 12
    for col in ("step", "time_s", "loss", "grad_norm", "step_ms", "zero_grad_ms", "forward_ms",
                "backward_ms", "optimizer_ms", "eval_ms", "allocated_bytes", "peak_bytes",
                "reserved_bytes", "graph_nodes", "saved_bytes"):
        assert col in steps[0]
    assert steps[0]["reserved_bytes"] == ""  # no allocator on CPU
    assert float(steps[3]["eval_ms"]) > 0 and float(steps[2]["eval_ms"]) == 0
    mem = read_csv(out / "memory.csv")
    assert mem[0]["phase"] == "start"
    assert {r["phase"] for r in mem} == {"start", "zero_grad", "forward", "backward",
                                         "optimizer", "eval_forward", "eval"}
    for r in mem:
        parts = sum(int(r[f"{c}_bytes"]) for c in
                    ("params", "grads", "optimizer", "activations", "other"))
        assert parts == int(r["total_bytes"])
    doc = json.loads((out / "run.json").read_text())
    assert doc["config"]["preset"] == "mlp" and doc["schedule"] == ["6:zero_grad=off"]
    assert doc["environment"]["memory_source"] == "cpu_tensor_bytes"
    assert doc["summary"]["steps_done"] == 12
    assert [(e["step"], e["key"]) for e in doc["events"] if e["kind"] == "toggle"] == [
        (6, "zero_grad")]
    assert "steps: 12 (completed)" in p.stdout


def test_bad_setting_exits_2_with_a_message_and_no_traceback(tmp_path):
    p = cli("run", "--set", "zero_grad=maybe", "--out", str(tmp_path / "x"))
    assert p.returncode == 2
    assert "zero_grad" in p.stderr and "set_to_none" in p.stderr
    assert "Traceback" not in p.stderr
    p = cli("run", "--config", str(tmp_path / "missing.toml"))
    assert p.returncode == 2 and "does not exist" in p.stderr


def test_training_error_exits_3_and_keeps_the_steps_before_it(tmp_path):
    out = tmp_path / "lstm"
    p = cli("run", "--preset", "lstm", "--steps", "6", "--set", "batch_size=4",
            "--set", "seq_len=8", "--set", "width=16", "--set", "detach_state=false",
            "--out", str(out), "--quiet")
    assert p.returncode == 3, p.stderr
    assert "detach" in p.stderr and "Traceback" not in p.stderr
    steps = read_csv(out / "steps.csv")
    assert [s["step"] for s in steps] == ["0"]
    doc = json.loads((out / "run.json").read_text())
    assert doc["summary"]["stopped_by"] == "error"
    assert doc["events"][-1]["kind"] == "error" and doc["events"][-1]["explanation"]


def test_unwritable_out_is_a_clear_message(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = cli("run", "--steps", "1", *TINY, "--out", str(blocker / "sub"))
    assert p.returncode == 2 and "cannot write the run folder" in p.stderr


def test_precise_run_exports_every_format_through_the_cli(tmp_path):
    out = tmp_path / "p"
    p = cli("run", "--preset", "mlp", "--steps", "4", *TINY, "--precise", "--export", "all",
            "--out", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    allocs = np.load(out / "allocations.npy")
    assert set(allocs["action"].tolist()) == {0, 1}  # alloc and free
    assert not (out / "allocations.csv").exists()  # text only when asked for
    for name in ("snapshot.pickle", "trace.json", "memory_timeline.json"):
        assert (out / name).stat().st_size > 0
    p = cli("run", "--steps", "1", *TINY, "--export", "snapshot", "--out", str(tmp_path / "q"))
    assert p.returncode == 2 and "precise" in p.stderr


def test_allocations_csv_is_written_when_asked_for(tmp_path):
    out = tmp_path / "p"
    p = cli("run", "--preset", "mlp", "--steps", "2", *TINY, "--precise",
            "--export", "allocations", "--out", str(out), "--quiet")
    assert p.returncode == 0, p.stderr
    rows = read_csv(out / "allocations.csv")
    assert len(rows) == len(np.load(out / "allocations.npy"))
    assert {r["action"] for r in rows} == {"alloc", "free"}
    assert not (out / "trace.json").exists()

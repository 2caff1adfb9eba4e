"""The two example scripts under watch: steps found as the script makes them, no false alarm."""

from __future__ import annotations

import json
from pathlib import Path

from memlens.core.run_files import load_run
from memlens.core.watch.cli import run_script

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def watched(tmp_path, name: str, *args: str):
    out = tmp_path / name
    code = run_script(str(EXAMPLES / name), list(args), out=out, quiet=True)
    return code, json.loads((out / "run.json").read_text()), load_run(out)


def test_rnn_lm_hand_written_update_one_backward_a_step(tmp_path):
    code, doc, history = watched(tmp_path, "rnn_lm.py", "--steps", "4")
    assert code == 0
    assert len(history.steps) == 4  # no optimizer: each backward ends a step
    assert [m["class"] for m in doc["summary"]["extra"]["models"]] == ["CharLM"]
    assert [e for e in doc["events"] if e["kind"] == "diagnosis"] == []
    assert (history.steps.column("optimizer_ms") == 0).all()
    assert (history.steps.column("graph_nodes") > 0).all()


def test_dcgan_two_models_two_optimizers_one_step_each_iteration(tmp_path):
    code, doc, history = watched(tmp_path, "dcgan.py", "--steps", "4", "--sample-every", "2")
    assert code == 0
    assert len(history.steps) == 4  # D's and G's optimizer steps make one step
    assert doc["summary"]["extra"]["optimizers"] == ["Adam", "Adam"]
    assert len(doc["summary"]["extra"]["models"]) == 2
    source = (EXAMPLES / "dcgan.py").read_text().splitlines()
    line = next(i for i, s in enumerate(source, 1) if "sample = netG(fixed_noise)" in s)
    found = {(e["key"], e["where"].rsplit(":", 1)[1]) for e in doc["events"]
             if e["kind"] == "diagnosis"}
    # the sample under grad, in train mode (BatchNorm): exactly what the script does
    assert found == {("forward under grad never backwarded", str(line)),
                     ("validation in train mode", str(line))}

"""The Hugging Face side of #48: a compute_loss that keeps its outputs (the Trainer backwards
the loss, divided for accumulation, and the kept outputs hold every step's graph) and its
clean twin; memlens's figures reaching the Trainer's reporters through on_log; the
callback's exception path (a training that raises ends its run, and the next starts anew).
A tiny GPT-2 built from its config (no download)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from memlens.core import findings  # noqa: E402
from memlens.core.runfolder.reader import load_run  # noqa: E402
from memlens.core.watch.script import run_script  # noqa: E402
from memlens.integrations.attach import attach_framework_callback  # noqa: E402
from memlens.integrations.transformers import MemlensCallback  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, sys, tempfile
os.environ["HF_HUB_OFFLINE"] = "1"
import torch, transformers

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        self.ids = torch.randint(0, 64, (n, 12), generator=torch.Generator().manual_seed(seed))
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

class KeepingTrainer(transformers.Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.kept = []
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        self.kept.append(KEPT)  # KEEP
        return (outputs.loss, outputs) if return_outputs else outputs.loss

torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
    n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
args = transformers.TrainingArguments(
    output_dir=tempfile.mkdtemp(), num_train_epochs=1, per_device_train_batch_size=4,
    gradient_accumulation_steps=2, save_strategy="no", report_to="none", use_cpu=True,
    disable_tqdm=True, seed=0, logging_steps=100)
trainer = KeepingTrainer(model=model, args=args, train_dataset=Tokens(48, 1))
trainer.train()
"""


def _watch(tmp_path, kept: str):
    source = textwrap.dedent(SCRIPT).replace("KEPT", kept)
    script = tmp_path / "train.py"
    script.write_text(source)
    code = run_script(str(script), [], out=tmp_path / "run", quiet=True,
                      model_found=attach_framework_callback)
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    return code, doc, source


def test_a_compute_loss_keeping_its_outputs_is_a_graph_kept(tmp_path):
    code, doc, source = _watch(tmp_path, "outputs")
    assert code == 0
    found = [e for e in doc["events"] if e["kind"] == "diagnosis"]
    assert [d["key"] for d in found] == [findings.GRAPH_KEPT]
    assert "`trainer.kept`" in found[0]["message"]
    line = next(i for i, ln in enumerate(source.splitlines(), 1) if "# KEEP" in ln)
    assert found[0]["where"].endswith(f"train.py:{line}")


def test_clean_a_compute_loss_keeping_its_logits_detached(tmp_path):
    code, doc, _ = _watch(tmp_path, "outputs.logits.detach()")
    assert code == 0
    assert [e for e in doc["events"] if e["kind"] in ("diagnosis", "info")] == []


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        self.ids = torch.randint(0, 64, (n, 12), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Reporter(transformers.TrainerCallback):
    """What a reporter (TensorBoard, W&B) is handed at each log."""

    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


class Failing(transformers.Trainer):
    fail_at = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.state.global_step == self.fail_at:
            raise RuntimeError("a bad batch")
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def _trainer(tmp_path, callbacks, fail_at=None):
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), num_train_epochs=1, per_device_train_batch_size=4,
        logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
        disable_tqdm=True, seed=0)
    trainer = Failing(model=model, args=args, train_dataset=Tokens(16, 1),
                      callbacks=callbacks)
    trainer.fail_at = fail_at
    return trainer


def test_memlens_figures_reach_the_trainers_reporters(tmp_path):
    reporter = Reporter()  # before memlens's callback: memlens puts itself first
    trainer = _trainer(tmp_path, [reporter, MemlensCallback()])
    trainer.train()
    steps = load_run(tmp_path / "memlens").steps
    logged = [e for e in reporter.logs if "memlens/peak_bytes" in e]
    assert len(logged) == len(steps) - 1  # at each step's log: the step before it
    assert [e["memlens/peak_bytes"] for e in logged] == steps.column("peak_bytes").tolist()[:-1]
    assert [e["memlens/step_ms"] for e in logged] == pytest.approx(
        steps.column("step_ms").tolist()[:-1], rel=1e-5)
    # the Trainer's own history is as without memlens
    assert not any(k.startswith("memlens/") for e in trainer.state.log_history for k in e)


def test_a_training_that_raises_ends_its_run_and_the_next_starts_anew(tmp_path):
    callback = MemlensCallback()
    trainer = _trainer(tmp_path, [callback], fail_at=2)
    with pytest.raises(RuntimeError, match="a bad batch"):
        trainer.train()
    trainer.fail_at = None
    trainer.train()  # the script caught it and trains again
    first = json.loads((tmp_path / "memlens" / "run.json").read_text())
    assert first["finished"] is True and first["summary"]["stopped_by"] == "error"
    assert first["summary"]["steps_done"] == 2
    second = json.loads((tmp_path / "memlens-2" / "run.json").read_text())
    assert second["finished"] is True and second["summary"]["stopped_by"] == "completed"
    assert second["summary"]["steps_done"] == 4


UNCAUGHT = """
import os, sys
sys.path.insert(0, {tests!r})
from tests.integrations.test_transformers_under_watch import _trainer
from memlens.integrations.transformers import MemlensCallback
_trainer(sys.argv[1], [MemlensCallback()], fail_at=1).train()
"""


def test_an_uncaught_error_ends_the_run_with_it(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(UNCAUGHT.format(tests=str(ROOT)))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "RuntimeError: a bad batch"
    doc = json.loads((tmp_path / "memlens" / "run.json").read_text())
    assert doc["summary"]["stopped_by"] == "error"
    assert "a bad batch" in doc["summary"]["extra"]["error"]

"""`main.py watch` on unmodified Lightning scripts whose LightningModule is not itself called
(#48): a module that calls its parts, a manual-optimization GAN, a DDP job whose rank 1
Lightning starts again. The callback attaches, the rows are the framework's steps, the
validation is recorded, a leak behind Lightning's `loss / accumulate_grad_batches` is found,
every rank is recorded. Truths are the scripts' own, through a plain Lightning Callback."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("lightning")

from memlens.core import findings
from memlens.core.runfolder.reader import load_run
from memlens.core.watch.script import run_script
from memlens.integrations.attach import attach_framework_callback

ROOT = Path(__file__).resolve().parents[2]

TRUTH = """
import json, sys
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class Truth(L.Callback):
    # Lightning's own numbers: the steps, the validation losses, the losses returned
    def __init__(self):
        self.val, self.rows = {}, []
    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.val[trainer.global_step] = float(trainer.callback_metrics["val_loss"])
    def on_fit_end(self, trainer, pl_module):
        with open(sys.argv[1], "w") as f:
            json.dump({"steps": trainer.global_step, "val": self.val, "rows": self.rows,
                       "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()
                                   if k.startswith("memlens/")}}, f)
"""

PARTS = TRUTH + """
class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)
        self.train_losses = []
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.head(self.encoder(x)), y)
        self.train_losses.append({kept})  # KEEP
        truth.rows.append(loss.item())
        return loss
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.head(self.encoder(x)), y))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

L.seed_everything(0, verbose=False)
data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
truth = Truth()
model = Lit()
trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=1, callbacks=[truth])
trainer.fit(model, DataLoader(data, batch_size=8), DataLoader(data, batch_size=32))
"""

GAN = TRUTH + """
class GAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
        self.D = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    def training_step(self, batch, batch_idx):
        x, = batch
        opt_g, opt_d = self.optimizers()
        fake = self.G(torch.randn(x.shape[0], 4))
        d_loss = (nn.functional.softplus(self.D(fake.detach())).mean()
                  + nn.functional.softplus(-self.D(x)).mean())
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        g_loss = nn.functional.softplus(-self.D(fake)).mean()
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        truth.rows.append(d_loss.item() + g_loss.item())
    def validation_step(self, batch, batch_idx):
        x, = batch
        self.log("val_loss", nn.functional.softplus(-self.D(x)).mean())
    def configure_optimizers(self):
        return (torch.optim.Adam(self.G.parameters(), 1e-3),
                torch.optim.Adam(self.D.parameters(), 1e-3))

L.seed_everything(0, verbose=False)
data = TensorDataset(torch.randn(64, 8))
truth = Truth()
trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=1, callbacks=[truth])
trainer.fit(GAN(), DataLoader(data, batch_size=16), DataLoader(data, batch_size=32))
"""


def watch(tmp_path, source: str):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    truth_file = tmp_path / "truth.json"
    code = run_script(str(script), [str(truth_file)], out=tmp_path / "run", quiet=True,
                      model_found=attach_framework_callback)
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    return code, doc, load_run(tmp_path / "run").steps, json.loads(truth_file.read_text())


def _recorded_like_lightning(doc, steps, truth, optimizers: int = 1) -> None:
    """A row per training batch whose optimizers stepped (global_step counts each)."""
    assert len(steps) == truth["steps"] // optimizers == len(truth["rows"])
    assert steps.column("loss").tolist() == pytest.approx(truth["rows"], rel=1e-5)
    eval_loss = steps.column("eval_loss").tolist()
    rows = {i for i, v in enumerate(eval_loss) if not math.isnan(v)}
    assert len(rows) == len(truth["val"]) == 2  # a validation each epoch
    assert sorted(v for v in eval_loss if not math.isnan(v)) == pytest.approx(
        sorted(truth["val"].values()), rel=1e-5)
    assert {"sanity check", "validation"} <= set(doc["summary"]["extra"]["custom_phases_ms"])
    assert len(doc["models"]) == 1  # the LightningModule, not also its parts


def test_a_module_calling_its_parts_gets_the_callback_and_its_kept_losses_are_found(
        tmp_path):
    source = PARTS.replace("{kept}", "loss")
    code, doc, steps, truth = watch(tmp_path, source)
    assert code == 0
    _recorded_like_lightning(doc, steps, truth)
    found = [e for e in doc["events"] if e["kind"] == "diagnosis"]
    assert [d["key"] for d in found] == [findings.GRAPH_KEPT]
    assert "`model.train_losses`" in found[0]["message"]
    line = next(i for i, ln in enumerate(source.splitlines(), 1) if "# KEEP" in ln)
    assert found[0]["where"].endswith(f"train.py:{line}")


def test_clean_a_module_calling_its_parts_keeping_values(tmp_path):
    code, doc, steps, truth = watch(tmp_path, PARTS.replace("{kept}", "loss.item()"))
    assert code == 0
    _recorded_like_lightning(doc, steps, truth)
    assert [e for e in doc["events"] if e["kind"] in ("diagnosis", "info")] == []
    # memlens's figures went to Lightning's loggers: the last step logged is the one before
    # the last batch's end (a step's row ends at the next batch's start)
    assert truth["metrics"]["memlens/step_ms"] == pytest.approx(
        steps.column("step_ms").tolist()[-2], rel=1e-5)
    assert truth["metrics"]["memlens/peak_bytes"] == steps.column("peak_bytes").tolist()[-2]


def test_a_manual_optimization_gan_has_a_row_per_batch_with_its_losses(tmp_path):
    code, doc, steps, truth = watch(tmp_path, GAN)
    assert code == 0
    assert truth["steps"] == 2 * len(truth["rows"])  # global_step counts both optimizers
    _recorded_like_lightning(doc, steps, truth, optimizers=2)  # row k: batch k's D + G
    assert doc["models"][0]["name"] == "GAN"
    assert [e for e in doc["events"] if e["kind"] == "diagnosis"] == []


DDP = """
import json, sys
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.rows = []
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.rows.append(loss.item())
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

if __name__ == "__main__":
    L.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    model = Lit()
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=2, strategy="ddp",
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=8))
    with open(f"{sys.argv[1]}/truth{trainer.global_rank}.json", "w") as f:
        json.dump({"rows": model.rows, "steps": trainer.global_step}, f)
"""


def test_a_lightning_ddp_job_under_watch_records_every_rank(tmp_path):
    """Lightning starts rank 1 as `python train.py` again, without memlens: it records
    itself (relaunch.py), rank 0 moves into rank0, and `main.py ranks` reads the job."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(DDP))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    job = tmp_path / "job"
    done = subprocess.run([sys.executable, str(ROOT / "main.py"), "watch", "--out", str(job),
                           str(script), str(tmp_path)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in job.iterdir()) == ["rank0", "rank1"]
    for rank in (0, 1):
        truth = json.loads((tmp_path / f"truth{rank}.json").read_text())
        folder = job / f"rank{rank}"
        doc = json.loads((folder / "run.json").read_text())
        assert (doc["rank"], doc["world_size"], doc["finished"]) == (rank, 2, True)
        steps = load_run(folder).steps
        assert len(steps) == truth["steps"] == 4  # 64 samples, 2 ranks, batches of 8
        assert steps.column("loss").tolist() == pytest.approx(truth["rows"], rel=1e-5)
        assert [m["name"] for m in doc["models"]] == ["model"]  # its parts not listed
    assert f"main.py ranks {job}" in done.stderr
    ranks = subprocess.run([sys.executable, str(ROOT / "main.py"), "ranks", str(job)],
                           env=env, capture_output=True, text=True, timeout=300)
    assert ranks.returncode == 0, ranks.stderr
    imbalance, buckets = ranks.stdout.splitlines()[-2:]  # DDP's buckets said after it
    assert imbalance.startswith("2 ranks;") and buckets.startswith("DDP's gradient buckets:")

"""`main.py watch` on an unmodified Lightning or Hugging Face script records what the script
would record with the framework's MemlensCallback added by hand: the same steps, losses,
grad norms, eval losses, model names and memory rows."""

from __future__ import annotations

import json
import os
import runpy
import sys
import textwrap

import pytest

from memlens.core.runfolder.reader import load_run
from memlens.core.watch.script import run_script
from memlens.integrations.attach import attach_framework_callback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

LIGHTNING = """
import sys
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    def forward(self, x):
        return self.net(x)
    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)

L.seed_everything(0, verbose=False)
data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
callbacks = []
if sys.argv[1:]:
    from memlens.integrations.lightning import MemlensCallback
    callbacks = [MemlensCallback(out=sys.argv[1])]
trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accumulate_grad_batches=2,
                    callbacks=callbacks)
trainer.fit(Tiny(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=32))
"""

TRANSFORMERS = """
import sys, tempfile
import torch
import transformers

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        self.ids = torch.randint(0, 64, (n, 12), generator=torch.Generator().manual_seed(seed))
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
    n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
callbacks = []
if sys.argv[1:]:
    from memlens.integrations.transformers import MemlensCallback
    callbacks = [MemlensCallback(out=sys.argv[1])]
args = transformers.TrainingArguments(
    output_dir=tempfile.mkdtemp(), num_train_epochs=2, per_device_train_batch_size=4,
    gradient_accumulation_steps=2, eval_strategy="epoch", save_strategy="no",
    report_to="none", use_cpu=True, disable_tqdm=True, seed=0, logging_steps=100)
transformers.Trainer(model=model, args=args, train_dataset=Tokens(32, 1),
                     eval_dataset=Tokens(8, 2), callbacks=callbacks).train()
"""

MEMORY = ("params", "grads", "optimizer", "buffers")


def _rows(folder):
    run = load_run(folder)
    steps = {c: run.steps.column(c).tolist() for c in ("loss", "grad_norm", "eval_loss")}
    cols = run.samples.columns
    samples = [tuple(r[cols.index(c)] for c in ("step", "phase", *MEMORY))
               for r in run.samples.rows()]
    doc = json.loads((folder / "run.json").read_text())
    return steps, samples, [m["name"] for m in doc["models"]], doc["events"]


@pytest.mark.parametrize("framework, source", [("lightning", LIGHTNING),
                                               ("transformers", TRANSFORMERS)])
def test_watch_on_an_unmodified_script_gives_the_callbacks_rows(tmp_path, framework, source):
    pytest.importorskip(framework)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    old = sys.argv
    sys.argv = [str(script), str(tmp_path / "by_hand")]
    try:
        runpy.run_path(str(script), run_name="__main__")  # the callback in the script
    finally:
        sys.argv = old
    code = run_script(str(script), [], out=tmp_path / "watched", quiet=True,
                      model_found=attach_framework_callback)
    assert code == 0
    by_hand, watched = _rows(tmp_path / "by_hand"), _rows(tmp_path / "watched")
    assert len(by_hand[0]["loss"]) == 8  # 16 batches, accumulated by 2
    for column, values in by_hand[0].items():
        assert watched[0][column] == pytest.approx(values, nan_ok=True), column
    assert sum(v == v for v in by_hand[0]["eval_loss"]) == 2  # an evaluation each epoch
    assert [s[:2] for s in watched[1]] == [s[:2] for s in by_hand[1]]  # step, phase
    assert watched[1] == by_hand[1]  # and their bytes
    assert watched[2] == by_hand[2]
    assert watched[3] == by_hand[3] == []

"""A LightningModule fit with memlens's callback, its toggles given to the callback
(`MemlensCallback(at=[...])` from the AT variable); ZEROS_FROM: the edit a test compares
with, optimizer.zero_grad(set_to_none=False) from a global step on."""
import os
import sys

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ZEROS_FROM = int(os.environ.get("ZEROS_FROM", "-1"))


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        print(f"step {self.global_step} loss {loss.item()!r}", flush=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        val = nn.functional.cross_entropy(self(x), y)
        print(f"val {val.item()!r}", flush=True)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        optimizer.zero_grad(set_to_none=not 0 <= ZEROS_FROM <= self.global_step)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


L.seed_everything(0, verbose=False)
data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
callbacks = []
if len(sys.argv) > 1:
    from memlens.integrations.lightning import MemlensCallback

    callbacks = [MemlensCallback(out=sys.argv[1], at=os.environ.get("AT", "").split(","))]
trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0,
                    limit_val_batches=1, val_check_interval=2, callbacks=callbacks)
trainer.fit(Tiny(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=32))

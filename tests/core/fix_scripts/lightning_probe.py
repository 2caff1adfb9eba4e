"""A LightningModule that logs its accuracy on a fixed probe batch at every training step,
the probe's forward under grad (Lightning runs training_step with grad on): the fix goes in
the module's own training_step."""
import argparse

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitClassifier(L.LightningModule):
    def __init__(self, probe_x, probe_y):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
        self.probe_x, self.probe_y = probe_x, probe_y

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        probe_acc = (self(self.probe_x).argmax(1) == self.probe_y).float().mean()
        self.log("probe_acc", probe_acc)
        print(f"batch {batch_idx} loss {loss.item():.4f} probe acc {probe_acc.item():.3f}")
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32 * args.batches, 16),
                         torch.randint(0, 4, (32 * args.batches,)))
    model = LitClassifier(torch.randn(512, 16), torch.randint(0, 4, (512,)))
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=32))

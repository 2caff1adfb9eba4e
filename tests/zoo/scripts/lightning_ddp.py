"""Lightning's DDP on two CPU processes (strategy="ddp", devices=2, gloo): Lightning starts
rank 1 as `python SCRIPT ARGS` again; each rank trains on its half of the data."""
import argparse

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import zoo_truth


class LitClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.last_loss = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.last_loss = loss.item()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    L.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    model = LitClassifier()
    zoo_truth.track(model)
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=2, strategy="ddp",
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=8))
    zoo_truth.final(model.last_loss, model, steps=trainer.global_step)


if __name__ == "__main__":
    main()

"""BUG: a LightningModule that keeps its training losses for an epoch-end mean,
`self.train_losses.append(loss)`: Lightning backwards `loss / accumulate_grad_batches`, and
the kept losses hold every step's graph. Its training_step calls its parts (`self.encoder`,
`self.head`), not itself. (The fix: append `loss.detach()` or `loss.item()`.)"""
import argparse

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import zoo_truth


class LitModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
        self.head = nn.Linear(64, 4)
        self.train_losses = []
        self.last_loss = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.head(self.encoder(x)), y)
        self.train_losses.append(loss)  # BUG: the graph of every step
        self.last_loss = loss.item()
        return loss

    def on_train_epoch_end(self):
        self.log("epoch_loss", torch.stack(self.train_losses).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    L.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(96, 32), torch.randint(0, 4, (96,)))
    model = LitModel()
    zoo_truth.track(model)
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=16))
    zoo_truth.final(model.last_loss, model, steps=trainer.global_step)


if __name__ == "__main__":
    main()

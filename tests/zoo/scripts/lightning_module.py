"""A PyTorch Lightning classifier as the Lightning docs write one: a LightningModule with
training_step / validation_step / configure_optimizers, DataLoaders of random data, and
`Trainer(max_epochs=..., accelerator="cpu")`, with --precision (32-true, bf16-mixed) and
--accumulate (accumulate_grad_batches)."""
import argparse

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import zoo_truth


class LitClassifier(L.LightningModule):
    def __init__(self, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(64, 64), nn.ReLU(),
            nn.Linear(64, 4),
        )
        self.last_loss = None

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        self.last_loss = loss.item()
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--accumulate", type=int, default=1)
    args = parser.parse_args()
    L.seed_everything(42, verbose=False)
    train = TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
    val = TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))
    model = LitClassifier()
    zoo_truth.track(model)
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=1,
                        precision=args.precision, accumulate_grad_batches=args.accumulate,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(train, batch_size=16, shuffle=True),
                DataLoader(val, batch_size=32))
    zoo_truth.final(model.last_loss, model, steps=trainer.global_step)


if __name__ == "__main__":
    main()

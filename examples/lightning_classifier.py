"""A PyTorch Lightning image classifier, written as the Lightning docs write one, with no
memlens in it: `python main.py watch examples/lightning_classifier.py` records it (memlens
adds its Lightning callback), or add `memlens.integrations.lightning.MemlensCallback()` to
the Trainer's callbacks yourself (docs/frameworks.md).

Random 28x28 images stand in for a dataset, so it runs anywhere without a download.
"""
import argparse

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitConvNet(L.LightningModule):
    def __init__(self, lr: float = 2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                                  nn.Dropout(0.2), nn.Linear(128, 10))

    def forward(self, x):
        return self.head(self.features(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", default="32-true", help="32-true or bf16-mixed")
    parser.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches")
    args = parser.parse_args()
    L.seed_everything(0, verbose=False)
    train = TensorDataset(torch.randn(2048, 1, 28, 28), torch.randint(0, 10, (2048,)))
    val = TensorDataset(torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,)))
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=1,
                        precision=args.precision, accumulate_grad_batches=args.accumulate,
                        gradient_clip_val=1.0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(LitConvNet(), DataLoader(train, batch_size=args.batch_size, shuffle=True),
                DataLoader(val, batch_size=128))
    print(f"trained {trainer.global_step} steps; "
          f"val_loss {float(trainer.callback_metrics['val_loss']):.4f}")


if __name__ == "__main__":
    main()

"""memlens example: a small CNN classifier with BatchNorm and Dropout, on synthetic images.

Run it: python main.py run --preset examples/cnn_classifier.py --steps 50
Each class is a fixed random image; a sample is its class image plus noise, so the loss
really falls. The batches are made in memory from the step number: the same step gives the
same batch.
"""

import torch
from torch import nn

CLASSES = 10
SIZE = 16  # images are 3 x SIZE x SIZE

CONFIG = {"batch_size": 16, "lr": 1e-3, "optimizer": "adam", "eval_every": 5}

_templates = torch.randn(CLASSES, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25),
        nn.Linear(32 * (SIZE // 4) ** 2, 64), nn.ReLU(),
        nn.Linear(64, CLASSES),
    )


def make_batch(step: int, split: str, batch_size: int = 16):
    # A separate seed range for eval: held-out samples of the same classes.
    gen = torch.Generator().manual_seed(step if split == "train" else 1_000_000 + step)
    labels = torch.randint(0, CLASSES, (batch_size,), generator=gen)
    images = _templates[labels] + torch.randn(batch_size, 3, SIZE, SIZE, generator=gen)
    return images, labels

"""A classifier with Dropout, evaluated under no_grad but in train mode, and a preview of one
prediction made under grad in train mode: the two places `main.py fix` switches to eval()
(the preview under torch.no_grad() too)."""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


def evaluate(model, x_val, y_val):
    with torch.no_grad():
        val_loss = F.cross_entropy(model(x_val), y_val)
    return val_loss.item()


def main(steps):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x_val, y_val = torch.randn(64, 16), torch.randint(0, 4, (64,))
    x_preview = torch.randn(512, 16)
    for step in range(steps):
        x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step % 2 == 0:
            print(f"step {step} loss {loss.item():.4f} val {evaluate(model, x_val, y_val):.4f}")
            preview = model(x_preview).softmax(1)  # how sure is it?
            print(f"  preview {preview.max(1).values.mean():.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    main(parser.parse_args().steps)

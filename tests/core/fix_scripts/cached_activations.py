"""Blocks that keep their last output on themselves (for a later look, a feature map, a
debug print): `self.last_out = None` in __init__, `self.last_out = out` in forward. Each
keeps the step's graph alive until the next forward: the fix detaches what forward keeps."""
import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.last_out = None

    def forward(self, x):
        out = torch.relu(self.lin(x))
        self.last_out = out
        return out


class Model(nn.Module):
    def __init__(self, d=48):
        super().__init__()
        self.b1 = Block(d)
        self.b2 = Block(d)
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        return self.head(self.b2(self.b1(x)))


def train(steps):
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(steps):
        x = torch.randn(64, 48)
        y = x.sum(1, keepdim=True)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    return model


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    train(parser.parse_args().steps)

"""Activation checkpointing as the torch.utils.checkpoint docs show it: a deep MLP whose
blocks run through `checkpoint(block, x, use_reentrant=False)` (or, with --reentrant, the
older use_reentrant=True that recomputes under its own backward), SGD, random data."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import zoo_truth


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class DeepMLP(nn.Module):
    def __init__(self, dim=64, depth=4, reentrant=False):
        super().__init__()
        self.inp = nn.Linear(16, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 1)
        self.reentrant = reentrant

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--reentrant", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = DeepMLP(reentrant=args.reentrant)
    zoo_truth.track(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(args.steps):
        x, y = torch.randn(64, 16), torch.randn(64, 1)
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    zoo_truth.final(loss, model)


if __name__ == "__main__":
    main()
